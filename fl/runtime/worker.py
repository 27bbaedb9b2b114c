"""A worker: one resident model, the run's data and the state of the clients it owns, running the client
steps of fl.rounds for many simulated clients in turn.

The same class runs in-process (`backend=inline`) and as a Ray actor (`backend=ray`). Each call carries
one client step for all the worker's clients of a round, bytes in and bytes out. A client's state across
rounds (error-feedback residuals) stays with the worker that owns it (client id modulo the pool size).
"""
from __future__ import annotations

import gc
import os
import resource
import time
import warnings
from collections import defaultdict

import numpy as np

from fl.runtime.memory import release_during_torch_import, release_gpu_libraries

release_during_torch_import()  # the GPU libraries' pages go as soon as torch has mapped them
import torch  # noqa: E402

import compression
import secagg
from fl.data import Dataset
from fl.partitions import partition
from fl.models import build_model, check_device, flatten_parameters, get_flat, set_flat
from fl.runtime.raystart import in_ray_worker as _in_ray_worker
from fl.runtime.transport import CHUNK_BYTES, ReplyBuffer
from fl.scores import EVALUATED, EVALUATED_SECONDS
from fl import seeds
from fl.training import SGD, as_tensor, evaluate_batches, seed_torch, train_local


# What the rest of `import torch` made resident of a CUDA build's GPU libraries (they fault back in from their
# files on a GPU run), before the worker waits for its first call.
release_gpu_libraries()


_frozen = False  # whether this process's long-lived objects were frozen (gc.freeze, at a worker's first attach)


class Worker:
    """Created before the data exists (so a Ray worker imports torch while the driver loads the data),
    then `attach`ed to the run's dataset, loaded once by the driver and shared read-only, and its plan."""

    def __init__(self, device: str, worker_id: int = 0):
        torch.set_num_threads(1)  # one core per worker; also makes results independent of the pool size
        check_device(device)
        self.worker_id = worker_id
        self.plan = None
        self.replies: ReplyBuffer | None = None  # shared-memory replies, when the driver can map them

    def attach(self, data: Dataset, plan) -> int:
        """Take the run's dataset (never reloaded here) and plan; returns the parameter count. Attached
        again (a warm pool's next cell), it first drops every trace of the last cell."""
        if self.plan is not None:
            self._forget()
        self.plan = p = plan
        device = p.training.device
        parts = partition(data.y_train, **p.partitions)
        self.mean_samples = len(data.y_train) / p.partitions["num_clients"]
        # Data and model move to the device once; clients index into the resident tensors. Arrays from
        # Ray's object store are read-only views of shared memory: torch warns, but nothing writes them.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            self.x, self.y = as_tensor(data.x_train, device), as_tensor(data.y_train, device)
        self.parts = [torch.from_numpy(part).to(device) for part in parts]
        self.x_test, self.y_test = data.x_test, data.y_test  # evaluated a range of batches at a time
        torch.manual_seed(p.training.seed)
        self.model = flatten_parameters(build_model(p.model, data.input_shape, data.num_classes).to(device))
        self.optimizer = SGD(self.model.parameters(), lr=p.training.lr, momentum=p.training.momentum,
                             weight_decay=p.training.weight_decay, prox_mu=p.training.prox_mu)
        if sum(q.numel() for q in self.model.parameters()) != p.length:
            raise ValueError(f"the plan is for {p.length} parameters, the model has another count")
        # the clients' state: the model they train from, their residuals, this round's protocol state
        self.reference = np.zeros(p.length, np.float32)
        self.synced_round = -1
        self.index_set: np.ndarray | None = None
        self.residuals: dict[int, np.ndarray] = {}  # error-feedback residuals, or memories (fl.aggregation=memory)
        self.pending: list[dict[int, secagg.Client]] = []  # per masked exchange of the round
        self.held: dict[int, tuple[np.ndarray, float]] = {}  # `fresh`: updates between its two exchanges
        self.staged: dict[int, np.ndarray] = {}  # residuals of a masked round not yet known to be applied
        self.staged_round = -1
        self.straggling: tuple[int, frozenset[int]] = (-1, frozenset())  # (round, its stragglers)
        self.steps_trained = 0  # minibatch steps of every client this worker has trained (the rows' local_steps)
        self.replaced: dict[int, np.ndarray | None] = {}  # a plain round's senders' old residuals or memories (or None)
        self.replaced_round = -1
        self.feedback = (compression.MemoryFeedback if p.memory else compression.ErrorFeedback)(p.client_codec)
        self.policy = p.index_policy()  # public: a worker needs only its sketch hashes
        self.linear_cells = p.linear.table_size(p.length) if p.linear is not None else 0
        global _frozen
        if _in_ray_worker() and not _frozen:
            # What exists now (torch and everything the first cell imported) lives as long as this process:
            # keep it out of every later collection, including the one at exit. Once per process: a warm pool's
            # later cells, and later Workers of a Ray task process that ray_cells reuses, stay collectable.
            gc.freeze()
            _frozen = True
        return p.length

    @staticmethod
    def initial_model(model_cfg, input_shape, num_classes: int, seed: int, device: str) -> dict:
        """The run's initial global model, built here so that the driver never imports torch: its
        parameter sizes and shapes (flat-vector order), its flat weights and this torch's version."""
        torch.manual_seed(seed)
        model = flatten_parameters(build_model(model_cfg, input_shape, num_classes).to(device))
        return {"sizes": [q.numel() for q in model.parameters()],
                "shapes": [tuple(q.shape) for q in model.parameters()],
                "weights": get_flat(model),
                "torch": str(torch.__version__)}  # a plain str: a TorchVersion would import torch

    def _forget(self) -> None:
        """Everything but the worker's identity and reply buffer goes: model, data, clients' state."""
        for name in [name for name in vars(self) if name not in ("worker_id", "replies")]:
            delattr(self, name)
        self.plan = None
        if _in_ray_worker():
            gc.collect()  # the last cell's cycles, if any; torch's objects are frozen, so this walks little

    def train(self, cid: int, round: int) -> tuple[np.ndarray, int]:
        """Client `cid`'s local training from the reference weights: (local - reference, sample count). A
        straggler (fl.stragglers) stops early; its weight stays its sample count, as in FedProx's aggregation."""
        t = self.plan.training
        set_flat(self.model, self.reference)
        seed = seeds.client_seed(t.seed, round, cid)
        seed_torch(seed, t.device)
        x, y = self.x[self.parts[cid]], self.y[self.parts[cid]]
        self.steps_trained += train_local(self.model, self.optimizer, x, y, t.local_epochs, t.batch_size, seed,
                                          t.device, self.local_steps(cid, round, len(y)))
        return get_flat(self.model) - self.reference, len(y)

    def local_steps(self, cid: int, round: int, samples: int) -> int | None:
        """The steps client `cid` trains this round: None (all) unless it is one of the round's stragglers and
        stragglers are kept (dropped ones are never asked to train)."""
        t = self.plan.training
        if not t.stragglers or self.plan.drop_stragglers:
            return None
        if self.straggling[0] != round:
            self.straggling = (round, self.plan.stragglers(round))
        if cid not in self.straggling[1]:
            return None
        return self.plan.client_steps(cid, round, samples, self.straggling[1])

    def stats(self) -> dict:
        """Memory held across rounds for this worker's clients (residuals) and the process's peak (MB)."""
        return {"state_bytes": sum(r.nbytes for r in self.residuals.values()),
                "worker_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    def evaluate(self, weights: np.ndarray, first: int, stop: int) -> list[tuple]:
        """(correct, summed loss, the logits' spread) of test batches first..stop-1 under `weights`; the driver
        sums them in order."""
        set_flat(self.model, weights)
        batches = evaluate_batches(self.model, self.x_test, self.y_test, first, stop, self.plan.training.device)
        self.model.train()
        return batches

    # --- running client steps ----------------------------------------------------------------------

    def run(self, step, *args, packed: bool = False, eval_weights=None, eval_batches=None):
        """Run client step `step(worker, *args, t)` for this worker's clients: ([(client id, message or
        None)], timings). `packed`: the messages go to the shared buffer, and only where they lie comes back.
        With `eval_weights`, the worker then evaluates test batches `eval_batches` (first, stop) under them
        (the previous round's evaluation, fl.evaluation.CarriedEvaluation); they come back in the timings."""
        t = defaultdict(float)
        out = list(step(self, *args, t))
        timings = self._carried(dict(t), eval_weights, eval_batches)
        return (self.replies.pack(out) if packed else out), timings

    def stream(self, step, *args, chunk_bytes: int = CHUNK_BYTES, eval_weights=None, eval_batches=None):
        """As `run`, yielding the messages in chunks of about `chunk_bytes` as they are ready, then the
        timings: the server sums while this worker trains the next clients."""
        t = defaultdict(float)
        chunk, size = [], 0
        for cid, message in step(self, *args, t):
            chunk.append((cid, message))
            size += len(message) if message is not None else 0
            if size >= chunk_bytes:
                yield chunk
                chunk, size = [], 0
        if chunk:
            yield chunk
        yield self._carried(dict(t), eval_weights, eval_batches)

    def _carried(self, timings: dict, weights, batches) -> dict:
        """The step's timings, with the carried evaluation's batches and seconds where there is one."""
        if weights is not None:
            t0 = time.perf_counter()
            timings[EVALUATED] = self.evaluate(weights, *batches)
            timings[EVALUATED_SECONDS] = time.perf_counter() - t0
        return timings

    # --- replies through shared memory (fl.runtime.transport) ---------------------------------------

    def probe_replies(self, token: bytes):
        """Open this worker's reply buffer holding `token`: the driver checks that it can map it."""
        self.close_replies()
        self.replies = ReplyBuffer()
        return self.replies.pack([(0, token)]), os.getpid()

    def close_replies(self) -> None:
        if self.replies is not None:
            self.replies.close()
            self.replies = None
