"""A small pool of long-lived workers: Ray actors (`backend=ray`) or the same class in-process (`inline`).

One call per worker per exchange, each carrying all of that worker's clients; never one call per client.
"""
from __future__ import annotations

import math
import os
import time
from typing import Iterator

import numpy as np
from tqdm import tqdm

from fl.errors import ConfigError
from fl.runtime.raystart import usable_cpus
from fl.runtime.transport import CHUNK_BYTES, ReplyReader, remove_leftovers


def _no_evaluation(w: int) -> None:
    """No evaluation carried by a call."""
    return None


def pool_size(cfg) -> int:
    wanted = cfg.ray.num_workers or usable_cpus()
    return max(1, min(int(wanted), cfg.fl.clients_per_round))


class InlinePool:
    def __init__(self, device: str, size: int):
        import torch

        from fl.runtime.worker import Worker

        self._threads = torch.get_num_threads()  # a Worker sets this process to one thread: restored at close
        self.workers = [Worker(device, i) for i in range(size)]

    def initial_model(self, *args) -> dict:
        """The run's initial model (fl.runtime.worker.Worker.initial_model), built by worker 0."""
        return self.workers[0].initial_model(*args)

    def attach(self, data, plan) -> None:
        """Give every worker the run's dataset (the same arrays: nothing is copied) and plan."""
        for worker in self.workers:
            worker.attach(data, plan)

    def put(self, data):
        return data

    def call(self, step, args_per_worker: dict[int, tuple], carried=_no_evaluation) -> dict[int, object]:
        """Client step `step` on each worker: its ([(client id, message)], timings). `carried(w)`: keyword
        arguments of an evaluation worker w runs after the step (fl.evaluation.CarriedEvaluation.spec)."""
        return {w: self.workers[w].run(step, *args, **(carried(w) or {})) for w, args in args_per_worker.items()}

    def stream(self, step, args_per_worker: dict[int, tuple], chunk_bytes: int = CHUNK_BYTES,
               carried=_no_evaluation) -> dict[int, Iterator]:
        """Per worker, the chunks of messages and then the timings of `step` (run lazily, as they are asked for)."""
        return {w: self.workers[w].stream(step, *args, chunk_bytes=chunk_bytes, **(carried(w) or {}))
                for w, args in args_per_worker.items()}

    def evaluate(self, args_per_worker: dict[int, tuple]) -> dict[int, object]:
        return {w: self.workers[w].evaluate(*args) for w, args in args_per_worker.items()}

    def revive(self) -> list[int]:
        """In-process workers do not die."""
        return []

    def close(self) -> None:
        if self.workers:
            import torch

            torch.set_num_threads(self._threads)
        self.workers = []


class RemoteWorker:
    """The Ray actor: a Worker made inside the actor's process, so that the driver, which only calls it,
    never imports torch (its memory: docs/performance.md, "Memory of a run's process tree")."""

    def __init__(self, device: str, worker_id: int):
        from fl.runtime.worker import Worker

        self.worker = Worker(device, worker_id)

    def attach(self, data, plan) -> int:
        return self.worker.attach(data, plan)

    def initial_model(self, *args) -> dict:
        return self.worker.initial_model(*args)

    def run(self, step, *args, packed: bool = False, **carried):
        return self.worker.run(step, *args, packed=packed, **carried)

    def stream(self, step, *args, chunk_bytes: int = CHUNK_BYTES, **carried):
        yield from self.worker.stream(step, *args, chunk_bytes=chunk_bytes, **carried)

    def evaluate(self, *args):
        return self.worker.evaluate(*args)

    def stats(self) -> dict:
        return self.worker.stats()

    def probe_replies(self, token: bytes):
        return self.worker.probe_replies(token)

    def close_replies(self) -> None:
        self.worker.close_replies()


# A broadcast (or weights to evaluate) up to this size is sent inside each worker's call; larger ones are
# put in the object store once and read by every worker.
INLINE_BROADCAST_BYTES = 256 << 10


class RayPool:
    """Long-lived Ray actors on the Ray that fl.launch started or joined; closing kills them, not Ray."""

    def __init__(self, device: str, size: int, num_cpus: float, num_gpus: float, timeout: float | None = None):
        """`timeout`: the seconds the driver waits for a worker's next reply in a round before it kills the
        worker as hung (its clients count as dropped, as a dead worker's); None waits for ever."""
        import ray

        if not ray.is_initialized():  # fl.launch starts Ray (or joins a cluster); the pool only uses it
            raise RuntimeError("RayPool needs a running Ray: start it with fl.runtime.raystart.start()")
        self._ray = ray
        _check_fits(ray.cluster_resources(), size, num_cpus, num_gpus)
        self._actor = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(RemoteWorker)
        self._device, self._resources = device, (num_cpus, num_gpus)
        self.timeout = timeout
        self.workers = [self._actor.remote(device, i) for i in range(size)]  # start up in the background
        self.dead: set[int] = set()
        self._replaced: set[int] = set()  # replaced since the last `revive`, which reports them to the server
        self._data = self._plan = self._source = None
        self._reader = ReplyReader()
        self._probed = False  # whether the workers' reply buffers were probed (once per pool)
        self._shared: dict[int, int] = {}  # worker -> its pid, for workers whose replies come through shared memory

    def attach(self, data, plan) -> None:
        """Put the run's dataset in the object store once and give it and the plan to every worker (each
        reads the same shared-memory copy; none loads the data itself). Waits until every worker is ready.
        A warm pool (fl.runtime.warm) is attached again for each cell: the same dataset is not put again."""
        if data is not self._source:
            self._data, self._source = self._ray.put(data), data
        self._plan = self._ray.put(plan)
        for w, ref in enumerate([w.attach.remote(self._data, self._plan) for w in self.workers]):
            try:
                self._ray.get(ref)
            except self._ray.exceptions.RayActorError:  # died since the last cell of a warm pool: replaced here
                self.dead.add(w)
        self._ray.get(self._started(self._replace_dead()))
        self._replaced.clear()  # a new run's server knows no worker's model yet
        if not self._probed:
            self._share_replies()
            self._probed = True

    def initial_model(self, *args) -> dict:
        """The run's initial model (fl.runtime.worker.Worker.initial_model), built by worker 0; asked before
        `attach`, so a warm pool's worker 0 that died between cells is replaced here."""
        try:
            return self._ray.get(self.workers[0].initial_model.remote(*args))
        except self._ray.exceptions.RayActorError:
            self.dead.add(0)
            self.replace_dead()
            return self._ray.get(self.workers[0].initial_model.remote(*args))

    def _share_replies(self) -> None:
        """Workers on this machine reply through shared memory (fl.runtime.transport); any other through Ray."""
        token = os.urandom(16)
        probes = self._ray.get([w.probe_replies.remote(token) for w in self.workers])
        for w, (probe, pid) in enumerate(probes):
            if self._reader.attach(w, probe, token):
                self._shared[w] = pid
            else:
                self.workers[w].close_replies.remote()

    def put(self, data):
        """A handle every worker's call can take: small data as is, large data as one object-store copy."""
        if isinstance(data, (bytes, bytearray)) and len(data) <= INLINE_BROADCAST_BYTES:
            return data
        if isinstance(data, np.ndarray) and data.nbytes <= INLINE_BROADCAST_BYTES:
            return data  # a small model's weights to evaluate: inside the call saves the store's put and get
        return self._ray.put(data)

    def call(self, step, args_per_worker: dict[int, tuple], carried=_no_evaluation) -> dict[int, object]:
        """Client step `step`, one call per worker; a worker whose actor died answers None (its clients
        count as dropped). Workers on this machine write their messages to shared memory. `carried(w)`:
        keyword arguments of an evaluation worker w runs after the step (their weights reach it resolved)."""
        shared = {w for w in args_per_worker if w in self._shared}
        refs = {w: self.workers[w].run.remote(step, *args, packed=w in shared, **(carried(w) or {}))
                for w, args in args_per_worker.items()}
        out = self._gather(refs)
        for w in refs:
            if w in shared and out[w] is not None:  # copied out now: the worker reuses its buffer at its next call
                where, stats = out[w]
                out[w] = self._reader.unpack(w, where), stats
        return out

    def evaluate(self, args_per_worker: dict[int, tuple]) -> dict[int, object]:
        return self._gather({w: self.workers[w].evaluate.remote(*args) for w, args in args_per_worker.items()})

    def _gather(self, refs: dict) -> dict[int, object]:
        killed = []
        if self.timeout is not None:
            late = set(self._ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.timeout)[1])
            killed = [w for w, ref in refs.items() if ref in late]
            for w in killed:
                self._kill_hung(w)
        try:  # one wait for all the replies: the driver wakes once, when the slowest worker answers
            out = dict(zip(refs, self._ray.get(list(refs.values()))))
        except self._ray.exceptions.RayActorError:  # a worker died: find which, one reply at a time
            out = {}
            for w, ref in refs.items():
                try:
                    out[w] = self._ray.get(ref)
                except self._ray.exceptions.RayActorError:
                    self.dead.add(w)
                    out[w] = None
        for w in killed:  # a reply that landed as its worker was being killed is not used: it is dead all the same
            out[w] = None
        return out

    def stream(self, step, args_per_worker: dict[int, tuple], chunk_bytes: int = CHUNK_BYTES,
               carried=_no_evaluation) -> dict[int, Iterator]:
        """Per worker, the chunks of messages and then the timings of `step`, as they arrive (Ray streaming
        generators: each chunk travels as soon as the worker yields it). A worker whose actor dies yields
        None and stops (its remaining clients count as dropped)."""
        generators = {w: self.workers[w].stream.remote(step, *args, chunk_bytes=chunk_bytes, **(carried(w) or {}))
                      for w, args in args_per_worker.items()}
        return {w: self._items(w, generator) for w, generator in generators.items()}

    def _items(self, w: int, generator) -> Iterator:
        try:
            while True:
                if self.timeout is not None and not self._ray.wait([generator], timeout=self.timeout)[0]:
                    self._kill_hung(w)
                    yield None  # whatever it sends as it is killed is not used
                    return
                ref = next(generator, None)
                if ref is None:
                    return
                yield self._ray.get(ref)
        except self._ray.exceptions.RayActorError:
            self.dead.add(w)
            yield None

    def _kill_hung(self, w: int) -> None:
        """A worker silent for `timeout` seconds is killed, so that a hang (a deadlock, a stalled file system)
        costs its clients this round rather than the run; the next `revive` replaces it. Marked dead here: a reply
        that lands while `ray.kill` (asynchronous) takes effect would otherwise leave a dead actor in the pool."""
        tqdm.write(f"fedsqueeze: worker {w} sent nothing for {self.timeout:g} s (ray.call_timeout_s): killed; its "
                   "clients that have not answered count as dropped this round, and it is replaced")
        self._ray.kill(self.workers[w], no_restart=True)
        self.dead.add(w)
        if w in self._shared:  # gone before the driver removes its reply buffer, which it could still be writing
            _wait_exited([self._shared[w]])

    def revive(self) -> list[int]:
        """Replace dead actors with fresh ones (the clients they held lose their state, as a device would);
        returns the workers replaced since the last call, here or by `replace_dead` (their model must be caught up)."""
        self.replace_dead()
        revived, self._replaced = sorted(self._replaced), set()
        return revived

    def replace_dead(self) -> None:
        """Replace dead actors now, mid-round: an evaluation that found no worker alive needs one. The next
        `revive` still returns them."""
        self._started(self._replace_dead())  # a fresh actor's start-up (torch's import, the data) is not a hang

    def _started(self, attached: list) -> list:
        """Wait until fresh actors are attached; returns `attached`. One that cannot start, as the Ray no longer holds
        the pool (a node of the cluster lost, with its workers), fails the run: it would otherwise wait for ever."""
        waiting = attached
        while waiting:
            waiting = self._ray.wait(waiting, num_returns=len(waiting), timeout=1.0)[1]
            if waiting:
                try:
                    _check_fits(self._ray.cluster_resources(), len(self.workers), *self._resources)
                except ConfigError as err:
                    raise RuntimeError(f"dead workers cannot be replaced, as the Ray has shrunk (a node of the cluster "
                                       f"lost?): {err}") from None
        return attached

    def _replace_dead(self) -> list:
        """A fresh actor for each dead one (replying through Ray), given the run's data and plan; the refs of
        those attach calls."""
        refs = []
        for w in sorted(self.dead):
            self._forget_replies(w)
            self.workers[w] = self._actor.remote(self._device, w)
            if self._data is not None:
                refs.append(self.workers[w].attach.remote(self._data, self._plan))
        self._replaced |= self.dead
        self.dead.clear()
        return refs

    def _forget_replies(self, w: int) -> None:
        self._reader.drop(w)
        pid = self._shared.pop(w, None)
        if pid is not None:
            remove_leftovers(pid)

    def close(self) -> None:
        for w in self.workers:
            self._ray.kill(w)
        self.workers = []
        self._data = self._plan = self._source = None
        _wait_exited(self._shared.values())  # ray.kill returns first: a worker mid-call could still grow its buffer
        for w in list(self._shared):
            self._forget_replies(w)


def _wait_exited(pids, seconds: float = 5.0) -> None:
    """Until these processes of this machine have exited (or are zombies), for at most `seconds` in all."""
    deadline = time.monotonic() + seconds
    for pid in pids:
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.005)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): whether the pid exists
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _check_fits(have: dict, size: int, num_cpus: float, num_gpus: float) -> None:
    """ConfigError unless the Ray holds the pool's actors all at once: one that never gets its resources
    would leave the run waiting for it forever."""
    for kind, per_worker, key in (("CPU", num_cpus, "ray.num_cpus_per_worker"),
                                  ("GPU", num_gpus, "ray.num_gpus_per_worker")):
        need, total = size * float(per_worker), float(have.get(kind, 0.0))
        if need > total + 1e-9:
            if total > 0:
                fix = f"set {key}={_floor3(total / size):g} to share them, or lower ray.num_workers"
            elif kind == "GPU":  # no pool size fits: even one worker asks for what this Ray lacks
                fix = f"set {key}=0 (and device=cpu), or join a Ray that has GPUs"
            else:
                fix = "join a Ray that has CPUs"
            raise ConfigError(f"a pool of {size} workers with {key}={per_worker:g} needs {need:g} {kind}s and this "
                              f"Ray has {total:g}, so some workers could never start: {fix}")


def _floor3(x: float) -> float:
    """x to 3 significant digits, rounded down (a share rounded up would not fit either)."""
    places = 2 - math.floor(math.log10(x))
    return math.floor(x * 10**places) / 10**places


def make_pool(cfg):
    size, device = pool_size(cfg), str(cfg.device)
    if cfg.backend == "inline":
        return InlinePool(device, size)
    return RayPool(device, size, cfg.ray.num_cpus_per_worker, cfg.ray.num_gpus_per_worker, cfg.ray.call_timeout_s)
