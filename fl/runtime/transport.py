"""A worker's replies through shared memory, when the worker runs on the driver's machine.

Ray carries a one-reply call's return value through its serializer and gRPC, which costs a round more than
the messages are worth (docs/performance.md, "Round time at N = 50"). Here the worker copies its messages into
a file in shared memory that the driver has mapped, and the call returns only where they lie; the
driver copies them out as soon as the reply arrives. The messages are the same bytes either way:
this changes how they travel between two local processes, not what is counted.

One call per worker is in flight at a time (each exchange of a round waits for its replies before the
next is sent), so a worker can reuse its buffer from offset 0 at every call.
"""
from __future__ import annotations

import itertools
import mmap
import os
import tempfile

# Streamed replies come in chunks of about this many bytes of messages (fl.rounds.exchange streams only
# when a worker's step could exceed one chunk: for small replies a plain call is cheaper).
CHUNK_BYTES = 4 << 20

# /dev/shm is memory on Linux; elsewhere the temporary directory (page cache) still avoids the copies.
SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
INITIAL_BYTES = 1 << 20
_names = itertools.count()


# (path, size, index): a reply's messages in a worker's buffer; the index is a list of
# (client id, offset, length), length -1 for a client that sent nothing.
Packed = tuple[str, int, list[tuple[int, int, int]]]


class ReplyBuffer:
    """Worker side: the buffer its messages are written to, grown (as a new file) when a reply needs more."""

    def __init__(self, directory: str = SHM_DIR):
        self.directory = directory
        self.path: str | None = None
        self.map: mmap.mmap | None = None

    def pack(self, out: list[tuple[int, bytes | None]]) -> Packed:
        """Write the messages of [(client id, message or None)] and say where they lie."""
        index, need = [], 0
        for cid, message in out:
            size = -1 if message is None else len(message)
            index.append((cid, need, size))
            need += max(size, 0)
        if self.map is None or need > len(self.map):
            self._grow(need)
        view = self.map
        for (_, offset, size), (_, message) in zip(index, out):
            if size > 0:
                view[offset:offset + size] = message
        return self.path, len(self.map), index

    def _grow(self, need: int) -> None:
        size = max(INITIAL_BYTES, 2 * len(self.map) if self.map is not None else 0, need)
        self.close()
        while True:  # a name left by a killed process whose PID this one reuses is taken: the next one
            path = os.path.join(self.directory, f"fedsqueeze-replies-{os.getpid()}-{next(_names)}")
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                break
            except FileExistsError:
                continue
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.path = path  # the driver unlinks it once mapped; the mapping lives on

    def close(self) -> None:
        if self.path is not None:
            try:
                os.unlink(self.path)  # not yet mapped by the driver (it never replied with it)
            except FileNotFoundError:
                pass
        if self.map is not None:
            self.map.close()
        self.path, self.map = None, None


class ReplyReader:
    """Driver side: maps each worker's buffer once (then removes its name) and copies messages out."""

    def __init__(self):
        self.maps: dict[int, tuple[str, mmap.mmap]] = {}

    def attach(self, worker: int, probe: Packed, token: bytes) -> bool:
        """Whether `worker`'s buffer, holding `token` as its one message, is this machine's to map.
        False for a worker on another machine (no such file here, or another file of that name)."""
        path, size, _ = probe
        try:
            view = _map(path, size)
        except (OSError, ValueError):
            return False
        if _read(view, probe[2]) != [(0, token)]:
            view.close()
            return False
        self._keep(worker, path, view)
        return True

    def unpack(self, worker: int, packed: Packed) -> list[tuple[int, bytes | None]]:
        """The messages of a reply, copied out (the worker reuses its buffer at its next call)."""
        path, size, index = packed
        known = self.maps.get(worker)
        if known is None or known[0] != path:  # the worker grew its buffer: a new file
            known = self._keep(worker, path, _map(path, size))
        return _read(known[1], index)

    def _keep(self, worker: int, path: str, view: mmap.mmap) -> tuple[str, mmap.mmap]:
        """Use `view` for `worker` from now on, and remove its file's name: the file lives while mapped,
        and nothing is left behind when both processes end."""
        self.drop(worker)
        os.unlink(path)
        self.maps[worker] = known = (path, view)
        return known

    def drop(self, worker: int) -> None:
        """Forget a worker's buffer (it died, or replied with a new one)."""
        known = self.maps.pop(worker, None)
        if known is not None:
            known[1].close()

    def close(self) -> None:
        for worker in list(self.maps):
            self.drop(worker)


def remove_leftovers(pid: int, directory: str = SHM_DIR) -> None:
    """Remove buffers a worker process created that the driver never mapped (it died mid-reply)."""
    prefix = f"fedsqueeze-replies-{pid}-"
    for name in os.listdir(directory):
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def _map(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def _read(view: mmap.mmap, index: list[tuple[int, int, int]]) -> list[tuple[int, bytes | None]]:
    return [(cid, None if length < 0 else view[offset:offset + length]) for cid, offset, length in index]
