"""Memory a CPU worker need not hold: the pages of GPU libraries that a CUDA build of torch maps at import.

`import torch` from a CUDA wheel loads libtorch_cuda, cuBLASLt, nvrtc, nvJitLink and others, and their pages
become resident in every process (how much: docs/performance.md), although a CPU run never executes them.
Pages of a mapping that are all clean and file-backed hold exactly the file's bytes: madvise(MADV_DONTNEED)
drops them from this process, and if the code is ever needed it faults back in from the file. Mappings
with any private or anonymous page (relocated data), or any page swapped out (it could be a private copy), are
left alone. Linux only; elsewhere nothing is done.
"""
from __future__ import annotations

import ctypes
import re
import sys

MADV_DONTNEED = 4
GPU_LIBRARIES = re.compile(r"/nvidia/|/libtorch_cuda|/libcudnn|/libnccl|/libcusparseLt|/cuda/bindings/|/triton/")
_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def clean_mappings(pattern: re.Pattern = GPU_LIBRARIES) -> list[tuple[int, int, int]]:
    """(start, end, resident bytes) of this process's mappings of files matching `pattern` whose resident
    pages are all clean and file-backed."""
    try:
        with open("/proc/self/smaps") as f:  # closed at once: read in every worker at start-up
            lines = f.read().splitlines()
    except OSError:
        return []
    out, current = [], None
    for line in lines:
        header = _HEADER.match(line)
        if header:
            current = None
            if pattern.search(header.group(3)):
                current = [int(header.group(1), 16), int(header.group(2), 16), 0, True]
                out.append(current)
        elif current is not None:
            key, _, value = line.partition(":")
            if key == "Rss":
                current[2] = int(value.split()[0]) * 1024
            elif key in ("Private_Dirty", "Shared_Dirty", "Anonymous", "Swap") and int(value.split()[0]):
                current[3] = False
    return [(start, end, rss) for start, end, rss, clean in out if clean and rss]


def release_gpu_libraries() -> int:
    """Drop the resident clean pages of GPU libraries from this process; returns the bytes released."""
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    released = 0
    for start, end, rss in clean_mappings():
        if madvise(start, end - start, MADV_DONTNEED) == 0:
            released += rss
    return released


class _ReleaseWhenTorchCLoads:
    """An import hook that releases once torch's C extension (which maps the GPU libraries) has loaded, at the
    next module torch imports: the rest of `import torch` then runs without those pages."""

    def find_spec(self, name, path=None, target=None):
        if "torch._C" in sys.modules:
            sys.meta_path.remove(self)
            release_gpu_libraries()
        return None  # never finds anything itself


def release_during_torch_import() -> None:
    """Call before `import torch` (with release_gpu_libraries after it, for pages the rest of the import touched)."""
    if "torch" not in sys.modules and not any(isinstance(f, _ReleaseWhenTorchCLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _ReleaseWhenTorchCLoads())
