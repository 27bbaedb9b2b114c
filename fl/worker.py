"""A worker: one resident model that runs many simulated clients in turn.

The same class runs in-process (`backend=inline`) and as a Ray actor (`backend=ray`). Each call
carries the messages of all the worker's clients of a round, as bytes in and bytes out. Per client:

1. load the reference weights (what every client holds after the last broadcast);
2. train `local_epochs` on the client's partition, seeded from (root seed, round, client id);
3. update = local - reference; add the client's error-feedback residual;
4. without masking: the client's own codec (e.g. top-k) -> ClientUpdate bytes;
   with masking (four steps: keys, shares, masked input, unmask): the round's shared index set (or a
   linear codec's table) -> weight -> fixed point -> residual sketch -> mask -> MaskedInput bytes.

Client state kept across rounds (error-feedback residuals) lives here, with the worker that owns the
client (sticky assignment: client id modulo number of workers).
"""
from __future__ import annotations

import gc
import os
import resource
import time
import warnings
from collections import defaultdict

import numpy as np
import torch
from omegaconf import OmegaConf

import compression
import secagg
from fl import wire
from fl.data import Dataset, client_partitions
from fl.models import build_model, check_device, flatten_parameters, get_flat, set_flat
from fl.policy import linear_codec, make_codec, make_index_policy, masks
from fl.seeds import client_seed
from fl.training import SGD, as_tensor, evaluate_batches, seed_torch, train_local
from fl.transport import ReplyBuffer


# A worker trains this many bytes' worth of clients (their float32 updates) before it encodes their updates:
# numpy's encoding runs warm then, about 11 us a client for mlp_small against 27 us right after each client's
# torch training (about 0.4 ms of a worker's round at N = 50), and the updates held at once stay bounded.
ENCODE_BATCH_BYTES = 4 << 20

# Streamed replies come in chunks of about this many bytes of messages (fl.simulation streams only when
# a worker's round could exceed one chunk: for small replies a plain call is ~1.5 ms cheaper a round).
CHUNK_BYTES = 4 << 20


class Worker:
    """Created before the data exists (so a Ray worker imports torch while the driver loads the data),
    then `attach`ed to the run's dataset: loaded once by the driver and shared read-only."""

    # The calls that answer ([(client id, message bytes or None)], timings): `packed` can carry their messages.
    MESSAGE_REPLIES = frozenset({"plain_round", "advertise", "share_keys", "masked_round", "unmask"})

    def __init__(self, cfg: dict, worker_id: int = 0):
        torch.set_num_threads(1)  # one core per worker; also makes results independent of the pool size
        self.cfg = c = OmegaConf.create(cfg)
        self.worker_id = worker_id
        check_device(c.device)
        # Read for every client, so kept as plain values: an OmegaConf lookup costs 8-18 us here, and these
        # were 1.5 ms of each worker's 22 ms round with 25 clients (counted as training until then).
        self.seed, self.device = int(c.seed), str(c.device)
        self.local_epochs, self.batch_size = int(c.fl.local_epochs), int(c.fl.batch_size)
        self.model = None
        self.replies: ReplyBuffer | None = None  # shared-memory replies (fl.transport), when the driver can map them

    def attach(self, data: Dataset) -> int:
        """Take the run's dataset (the driver's, never reloaded here); returns the parameter count."""
        c = self.cfg
        parts = client_partitions(c, data.y_train)
        self.mean_samples = len(data.y_train) / c.fl.num_clients
        # Data and model move to the device once; clients index into the resident tensors. Arrays from
        # Ray's object store are read-only views of shared memory: torch warns, but nothing writes them.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            self.x, self.y = as_tensor(data.x_train, c.device), as_tensor(data.y_train, c.device)
        self.parts = [torch.from_numpy(p).to(c.device) for p in parts]
        self.x_test, self.y_test = data.x_test, data.y_test  # evaluated a range of batches at a time
        torch.manual_seed(c.seed)
        self.model = flatten_parameters(build_model(c.model, data.input_shape, data.num_classes).to(c.device))
        self.optimizer = SGD(self.model.parameters(), lr=c.fl.lr, momentum=c.fl.momentum,
                             weight_decay=c.fl.weight_decay)
        self.length = sum(p.numel() for p in self.model.parameters())
        self.reference = np.zeros(self.length, np.float32)
        self.synced_round = -1
        self.index_set: np.ndarray | None = None
        self.residuals: dict[int, np.ndarray] = {}
        self.pending: dict[int, secagg.Client] = {}  # this round's protocol state, per client
        self.staged: dict[int, np.ndarray] = {}  # residuals of a masked round not yet known to be applied
        self.staged_round = -1
        layers = [p.numel() for p in self.model.parameters()]
        self.client_codec = make_codec(c, layers) if c.compression.client else compression.get("none")()
        # Under masking a linear codec (count sketch) masks its table; its error feedback is the server's.
        self.linear = linear_codec(c) if masks(c) else None
        self.error_feedback = (c.compression.error_feedback and c.compression.client and self.client_codec.biased
                               and self.linear is None)
        self.feedback = compression.ErrorFeedback(self.client_codec)
        self.residual_dtype = np.dtype(c.compression.residual_dtype)
        self.policy = make_index_policy(c, self.length)  # public: the worker needs only its sketch hashes
        if _in_ray_worker():
            # What exists now (torch, the model, the data) lives as long as this process: keep it out
            # of every later collection, including the one at exit (about 1 s for ~300k objects).
            gc.freeze()
        return self.length

    # --- shared steps ---------------------------------------------------------------------------

    def sync(self, broadcast: bytes, round: int, catchup: bytes | None = None) -> float:
        """Apply the round's broadcast to the reference weights once per round; returns seconds. A worker
        that missed broadcasts (idle in a round, or revived) is sent `catchup`, the dense model before this
        round, and applies it first: a delta on a stale model would train its clients from the wrong one."""
        if self.synced_round == round:
            return 0.0
        t0 = time.perf_counter()
        if catchup is not None:
            dense = wire.decode_broadcast(catchup, self.length)
            if dense.is_delta or dense.round != round - 1:
                raise wire.WireError(f"catch-up: round {dense.round} (delta {dense.is_delta}), expected a dense "
                                     f"model of round {round - 1}")
            self.reference = compression.get(dense.codec)().decode(dense.payload, self.length).copy()
            self.synced_round = round - 1
        msg = wire.decode_broadcast(broadcast, self.length)
        if msg.round != round:
            raise wire.WireError(f"model broadcast: round {msg.round}, expected {round}")
        if msg.is_delta and self.synced_round != round - 1:
            raise wire.WireError(f"model broadcast: a delta for round {round} on a model of round "
                                 f"{self.synced_round}, and no catch-up")
        values = compression.get(msg.codec)().decode(msg.payload, self.length)
        if msg.is_delta:
            self.reference += values
        else:
            self.reference = values.copy()
        self.index_set = wire.decode_index_set(msg)
        self.synced_round = round
        return time.perf_counter() - t0

    def _train(self, cid: int, round: int) -> tuple[np.ndarray, int]:
        set_flat(self.model, self.reference)
        seed = client_seed(self.seed, round, cid)
        seed_torch(seed, self.device)
        x, y = self.x[self.parts[cid]], self.y[self.parts[cid]]
        train_local(self.model, self.optimizer, x, y, self.local_epochs, self.batch_size, seed, self.device)
        return get_flat(self.model) - self.reference, len(y)

    def _timed_train(self, cid: int, round: int, t: dict) -> tuple[np.ndarray, int]:
        t0 = time.perf_counter()
        update, n = self._train(cid, round)
        t["t_train"] += time.perf_counter() - t0
        return update, n

    def _client_update(self, cid: int, round: int, t: dict) -> tuple[np.ndarray, int]:
        """Train the client; its update plus its error-feedback residual, and its sample count."""
        update, n = self._timed_train(cid, round, t)
        residual = self.residuals.get(cid) if self.error_feedback else None
        return (update if residual is None else update + residual.astype(np.float32)), n

    def _keep_residual(self, cid: int, residual: np.ndarray) -> None:
        self.residuals[cid] = residual.astype(self.residual_dtype, copy=False)

    def stats(self) -> dict:
        """Memory held across rounds for this worker's clients (error-feedback residuals) and the
        process's peak resident memory (ru_maxrss, MB)."""
        return {"state_bytes": sum(r.nbytes for r in self.residuals.values()),
                "worker_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    def evaluate(self, weights: np.ndarray, first: int, stop: int) -> list[tuple[int, float]]:
        """(correct, summed loss) of test batches first..stop-1 under `weights`: the workers evaluate the
        test split in parallel, and the driver sums the batches in order (fl.training.combine)."""
        set_flat(self.model, weights)
        batches = evaluate_batches(self.model, self.x_test, self.y_test, first, stop, self.device)
        self.model.train()
        return batches

    # --- replies through shared memory (fl.transport) ------------------------------------------------

    def probe_replies(self, token: bytes):
        """Open this worker's reply buffer holding `token`: the driver checks that it can map it."""
        self.close_replies()
        self.replies = ReplyBuffer()
        return self.replies.pack([(0, token)]), os.getpid()

    def packed(self, method: str, *args):
        """`method`'s reply, its messages written to the shared buffer: only where they lie goes back."""
        out, stats = getattr(self, method)(*args)
        return self.replies.pack(out), stats

    def close_replies(self) -> None:
        if self.replies is not None:
            self.replies.close()
            self.replies = None

    # --- without masking: one exchange ---------------------------------------------------------

    def plain_round(self, broadcast: bytes, round: int, clients: list[int], catchup: bytes | None = None):
        """Train each client and return [(client id, ClientUpdate bytes or None if rejected)], timings."""
        return _collect(self.plain_round_stream(broadcast, round, clients, catchup, chunk_bytes=None))

    def plain_round_stream(self, broadcast: bytes, round: int, clients: list[int], catchup: bytes | None = None,
                           chunk_bytes: int | None = CHUNK_BYTES):
        """As `plain_round`, but yielding the messages as they are ready, in chunks of about `chunk_bytes`
        (None: one chunk at the end), then the timings dict. The server sums a batch's updates while
        this worker trains the next batch, and never holds all of a worker's messages at once."""
        t = defaultdict(float)
        yield from _in_chunks(self._plain_messages(broadcast, round, clients, catchup, t), chunk_bytes)
        t.update(self.stats())
        yield dict(t)

    def _plain_messages(self, broadcast: bytes, round: int, clients: list[int], catchup, t: dict):
        t["t_sync"] += self.sync(broadcast, round, catchup)
        for batch in _batches(clients, ENCODE_BATCH_BYTES // (4 * self.length)):
            trained = [(cid, *self._timed_train(cid, round, t)) for cid in batch]
            yield from self._encode_updates(trained, round, t)

    def _encode_updates(self, trained: list[tuple[int, np.ndarray, int]], round: int, t: dict):
        for cid, update, n in trained:
            t1 = time.perf_counter()
            try:
                if self.error_feedback:
                    payload, residual = self.feedback.encode(update, self.residuals.get(cid))
                    self._keep_residual(cid, residual)
                else:
                    payload = self.client_codec.encode(update)
                message = wire.encode_update(round, cid, self.client_codec.name, self.length, float(n), payload)
            except ValueError:  # NaN/Inf from a diverged client: never sent, never aggregated
                message = None
            t["t_encode"] += time.perf_counter() - t1
            yield cid, message

    # --- with masking: advertise keys -> share keys -> masked input -> unmask --------------------

    def advertise(self, round: int, session: bytes, cohort: list[int], clients: list[int], masked_length: int,
                  aborted_rounds: list[int]):
        """Step 1: two fresh key pairs per client; returns [(client id, AdvertiseKeys bytes)], stats.

        Residuals staged by this worker's last masked round are kept only if that round was applied (an
        aborted round sent nothing the model used, so its clients keep their old residuals). That round
        may be any earlier one: a worker with no client in a round is not called."""
        if self.staged_round not in aborted_rounds:
            for cid, residual in self.staged.items():
                self._keep_residual(cid, residual)
        self.staged = {}
        t0 = time.perf_counter()
        c = self.cfg.secagg
        protocol = secagg.get(c.name)
        config = secagg.make_round(protocol, session, cohort, masked_length, c.threshold, c.neighbours)
        self.pending = {cid: protocol.Client(config, cid) for cid in clients}
        out = [(cid, wire.encode_advertise(client.advertise())) for cid, client in self.pending.items()]
        return out, {"t_mask": time.perf_counter() - t0}

    def _step(self, clients: list[int], act) -> tuple[list, dict]:
        """Run one protocol step for each client; a client whose check fails sends nothing (drops out)."""
        t0 = time.perf_counter()
        out = []
        for cid in clients:
            try:
                out.append((cid, act(cid, self.pending[cid])))
            except (secagg.ProtocolError, KeyError, wire.WireError):
                self.pending.pop(cid, None)
                out.append((cid, None))
        return out, {"t_mask": time.perf_counter() - t0}

    def share_keys(self, roster: bytes, clients: list[int]):
        """Step 2: Shamir shares of each client's self-mask seed and mask key, encrypted per recipient."""
        roster_msg = wire.decode_roster(roster)
        return self._step(clients, lambda cid, client: wire.encode_share_keys(client.share_keys(roster_msg)))

    def masked_round(self, broadcast: bytes, round: int, bundles: dict[int, bytes], clients: list[int],
                     catchup: bytes | None = None):
        """Step 3: train, select the shared index set, quantize, sketch, mask; returns [(id, MaskedInput bytes)]."""
        return _collect(self.masked_round_stream(broadcast, round, bundles, clients, catchup, chunk_bytes=None))

    def masked_round_stream(self, broadcast: bytes, round: int, bundles: dict[int, bytes], clients: list[int],
                            catchup: bytes | None = None, chunk_bytes: int | None = CHUNK_BYTES):
        """As `masked_round`, but yielding the messages in chunks of about `chunk_bytes` as they are
        ready, then the timings dict: the server adds them into its masked sum while this worker
        trains the next clients, and never holds all of a worker's masked vectors at once."""
        t = defaultdict(float)
        yield from _in_chunks(self._masked_messages(broadcast, round, bundles, clients, catchup, t), chunk_bytes)
        t.update(self.stats())
        yield dict(t)

    def _masked_messages(self, broadcast: bytes, round: int, bundles: dict[int, bytes], clients: list[int], catchup,
                         t: dict):
        c = self.cfg
        t["t_sync"] += self.sync(broadcast, round, catchup)
        self.staged_round = round
        idx = self.index_set
        n_max = c.fl.clients_per_round
        q_values = secagg.FixedPointQuantizer(c.secagg.clip, n_max)
        q_weight = secagg.FixedPointQuantizer(c.secagg.max_weight, n_max)
        q_sketch = secagg.FixedPointQuantizer(c.secagg.sketch_clip, n_max)
        sketch = self.policy.sketch(round) if self.policy is not None else None
        max_weight = float(c.secagg.max_weight)
        for cid in clients:
            corrected, n = self._client_update(cid, round, t)
            t1 = time.perf_counter()
            rng = np.random.default_rng(client_seed(self.seed, round, cid) ^ 0x5EC)
            w = min(n / self.mean_samples, max_weight)
            if not np.isfinite(corrected).all():  # NaN/Inf: nothing is sent; the round goes on without it
                self.pending.pop(cid, None)
                yield cid, None
                continue
            parts = [q_weight.quantize(np.array([w], np.float32), rng)]
            if self.linear is not None:  # count sketch: the weighted update's table is the message
                parts.append(q_sketch.quantize(self.linear.sketch_table(corrected * w).ravel(), rng))
            else:
                qv, sent = q_values.quantize_with_error(corrected[idx] * w, rng)
                parts.insert(0, qv)
                if self.error_feedback or sketch is not None:
                    residual = corrected.copy()
                    residual[idx] -= sent / w  # clipping and rounding error stay in the residual
                    if self.error_feedback:
                        self.staged[cid] = residual  # kept once the round is applied
                if sketch is not None:
                    parts.append(q_sketch.quantize(sketch.sketch(residual).ravel(), rng))
            vector = np.concatenate(parts)
            t2 = time.perf_counter()
            try:
                bundle = wire.decode_share_bundle(bundles[cid])
                message = wire.encode_masked(self.pending[cid].masked_input(bundle, vector))
            except (secagg.ProtocolError, KeyError, wire.WireError):
                self.pending.pop(cid, None)
                self.staged.pop(cid, None)
                message = None
            t["t_encode"] += t2 - t1
            t["t_mask"] += time.perf_counter() - t2
            yield cid, message

    def unmask(self, request: bytes, clients: list[int]):
        """Step 4: shares of b for survivors, of the mask key for dropped clients; the round ends here."""
        request_msg = wire.decode_unmask_request(request)
        out, stats = self._step(clients, lambda cid, client: wire.encode_unmask_response(client.unmask(request_msg)))
        self.pending = {}  # private keys of this round are dropped
        return out, stats


def _batches(items: list, size: int):
    """`items` in consecutive lists of `size` (at least 1)."""
    size = max(1, size)
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _in_chunks(messages, chunk_bytes: int | None):
    """(client id, message or None) pairs grouped in lists of about `chunk_bytes` of messages (None: one list)."""
    chunk, size = [], 0
    for cid, message in messages:
        chunk.append((cid, message))
        size += len(message) if message is not None else 0
        if chunk_bytes is not None and size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _collect(stream) -> tuple[list, dict]:
    """A stream's messages as one list, and its closing timings: what the one-reply call returns."""
    out, stats = [], {}
    for item in stream:
        if isinstance(item, dict):
            stats = item
        else:
            out.extend(item)
    return out, stats


def _in_ray_worker() -> bool:
    """Whether this process is a Ray worker (gc.freeze is for processes we own, never an inline caller's)."""
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    except Exception:
        return False
