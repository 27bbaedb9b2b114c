"""fl.runtime.memory: a CPU worker drops the resident pages of a CUDA build's GPU libraries, and torch still
computes the same on the CPU afterwards."""
import re

import numpy as np
import pytest
import torch

from fl.runtime import memory


def resident_gpu_bytes() -> int:
    return sum(rss for _, _, rss in memory.clean_mappings())


def test_gpu_library_pages_are_released_and_cpu_torch_still_computes_the_same():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    before = (x @ x).numpy().copy()
    conv = torch.nn.functional.conv2d(x.view(1, 1, 64, 64), torch.ones(2, 1, 5, 5)).numpy().copy()
    # the worker module released them at import; fault some back in by reading them, then release again
    mapped = [m for m in memory.clean_mappings(re.compile(r"/nvidia/|/libtorch_cuda"))]
    if not mapped and not any("libtorch_cuda" in line for line in open("/proc/self/maps")):
        pytest.skip("this torch is not a CUDA build: no GPU libraries are mapped")
    memory.release_gpu_libraries()
    assert resident_gpu_bytes() == 0  # nothing clean of theirs is left resident
    np.testing.assert_array_equal((x @ x).numpy(), before)
    np.testing.assert_array_equal(
        torch.nn.functional.conv2d(x.view(1, 1, 64, 64), torch.ones(2, 1, 5, 5)).numpy(), conv)


def test_only_clean_file_backed_mappings_are_candidates():
    with open("/proc/self/smaps") as f:
        text = f.read()
    dirty = set()
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        start = int(block.split("-", 1)[0], 16)
        if re.search(r"^(Private_Dirty|Anonymous):\s+[1-9]", block, re.M):
            dirty.add(start)
    assert not dirty & {start for start, _, _ in memory.clean_mappings(re.compile(r"\.so"))}


def test_a_mapping_with_a_page_swapped_out_is_not_clean(monkeypatch):
    """A copied-on-write page that went to swap shows only in `Swap:`; MADV_DONTNEED would drop that copy."""
    import io

    smaps = ("7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libtorch_cuda.so\n"
             "Rss:                   4 kB\nPrivate_Dirty:         0 kB\n"
             "Anonymous:             0 kB\nSwap:                  4 kB\n"
             "7f0000002000-7f0000003000 r-xp 00000000 08:01 1 /usr/lib/libtorch_cuda.so\n"
             "Rss:                   4 kB\nPrivate_Dirty:         0 kB\n"
             "Anonymous:             0 kB\nSwap:                  0 kB\n")
    monkeypatch.setattr(memory, "open", lambda path: io.StringIO(smaps), raising=False)
    assert memory.clean_mappings() == [(0x7f0000002000, 0x7f0000003000, 4096)]


def test_reading_the_mappings_leaves_no_file_open():
    """Every worker reads them at start-up: an unclosed file warns (ResourceWarning) and holds a descriptor."""
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        memory.clean_mappings()
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
