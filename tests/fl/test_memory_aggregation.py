"""fl.aggregation=memory: the server's one sum equals every client's weighted memory, in plain and masked rounds,
with partial participation, dropouts at each step, refused updates and a worker's death; bad settings are refused.
(Its arithmetic against an independent loop: tests/fl/test_fedavg_reference.py.)"""
import json

import numpy as np
import pytest

import compression
import fl
import fl.rounds.client
import fl.seeds
import fl.server
from fl.config import validate
from fl.errors import ConfigError
from fl.runtime.pool import InlinePool
from fl.runtime.worker import Worker

BASE = ["backend=inline", "model=mlp_small", "fl.aggregation=memory", "fl.num_clients=30", "fl.clients_per_round=8",
        "fl.rounds=6", "compression.ratio=0.1", "ray.num_workers=2"]


@pytest.fixture
def captured(monkeypatch):
    """The run's server and workers, kept after it ends."""
    got = {"servers": [], "workers": []}
    init, attach = fl.server.Server.__init__, Worker.attach
    monkeypatch.setattr(fl.server.Server, "__init__", lambda self, *a: (init(self, *a), got["servers"].append(self))[0])
    monkeypatch.setattr(Worker, "attach", lambda self, *a: (got["workers"].append(self), attach(self, *a))[1])
    return got


def _memories(server, workers) -> dict:
    """Every client's memory as the server's sum holds it: a masked round's staged memories count once that round
    was applied with the client's values in its sum (they are kept at the worker's next masked round); a plain
    round's refused sender takes its old memory back at its worker's next call."""
    held = {}
    for worker in workers:
        held.update(worker.residuals)
        for cid in server.unsummed.get(worker.replaced_round, ()):
            if cid in worker.replaced:
                held.pop(cid) if worker.replaced[cid] is None else held.update({cid: worker.replaced[cid]})
        if worker.plan.masked and worker.staged_round not in server.aborted_rounds:
            refused = set(server.unsummed.get(worker.staged_round, ()))
            held.update({c: m for c, m in worker.staged.items() if c not in refused})
    return held


def _weight(worker, cid: int) -> float:
    n = len(worker.parts[cid])
    return min(n / worker.mean_samples, worker.plan.max_weight) if worker.plan.masked else float(n)


def _check_sum(server, workers) -> dict:
    """The server's sum is the weighted sum of the clients' memories, and its weight is theirs."""
    held = _memories(server, workers)
    owner = {c: w for w in workers for c in range(w.plan.partitions["num_clients"]) if c % len(workers) == w.worker_id}
    expected = sum((np.float64(_weight(owner[c], c)) * m.astype(np.float64) for c, m in held.items()),
                   np.zeros(server.plan.length))
    scale = np.abs(expected).max()
    assert scale > 0 and np.abs(server.memory.total - expected).max() <= 1e-5 * scale
    weight = sum(_weight(owner[c], c) for c in held)
    step = server.plan.max_weight / (2**15 - 1) if server.plan.masked else 0.0  # a masked weight's rounding
    assert server.memory.weight == pytest.approx(weight, abs=len(held) * step + 1e-9)
    return held


@pytest.mark.parametrize("setting", [
    ["secagg=none"],  # per-client top-k
    ["secagg=none", "compression=none"],  # dense: MIFA
    ["secagg=dh", "secagg.dropout=0.1"],  # fresh: two exchanges
    ["secagg=dh", "secagg.dropout=0.1", "compression.index_policy=sketch"],
    ["secagg=secaggplus", "compression=none"],
], ids=["plain-topk", "plain-dense", "dh-fresh-dropout", "dh-sketch-dropout", "secaggplus-dense"])
def test_the_servers_sum_is_every_clients_weighted_memory(tmp_path, captured, setting):
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, *setting]))
    server, workers = captured["servers"][0], captured["workers"]
    held = _check_sum(server, workers)
    assert 5 < len(held) < 30  # partial participation: some clients sampled, not all
    assert set(rows["aggregation"]) == {"memory"} and not rows["error_feedback"].any()  # the rows say which rule
    if "secagg.dropout=0.1" in setting:
        assert rows["dropped"].sum() > 0 and (~rows["aborted"]).sum() >= 3


def test_a_client_that_refuses_its_update_keeps_its_memory_and_the_sum_leaves_it_out(tmp_path, captured, monkeypatch):
    train = Worker.train

    def poisoned(self, cid, round):
        update, n = train(self, cid, round)
        return (update * np.float32(np.nan) if round >= 2 else update), n

    monkeypatch.setattr(Worker, "train",
                        lambda self, cid, r: poisoned(self, cid, r) if cid % 3 == 0 else train(self, cid, r))
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=dh"]))
    assert rows["rejected"].iloc[2:].sum() > 0
    _check_sum(captured["servers"][0], captured["workers"])


@pytest.mark.parametrize("last", [False, True], ids=["mid-run", "last-round"])
def test_a_plain_update_the_server_refuses_leaves_its_client_with_the_memory_the_sum_holds(tmp_path, captured,
                                                                                         monkeypatch, last):
    """A truncated message: the server refuses it, and its client takes its old memory back (or none, if it had
    none) when its worker is next called. `last`: refused in the last round, still to be taken back."""
    encode, cut = fl.wire.encode_update, []

    def truncated(round, cid, *a):
        message = encode(round, cid, *a)
        if cid % 4 == 1 and (round == 5 if last else round in (2, 3)):
            cut.append(cid)
            return message[:-3]
        return message

    monkeypatch.setattr(fl.wire, "encode_update", truncated)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=none"]))
    server = captured["servers"][0]
    assert rows["rejected"].sum() == len(cut) > 0
    assert sorted(c for cs in server.unsummed.values() for c in cs) == sorted(cut)
    _check_sum(server, captured["workers"])


def test_a_masked_round_of_returning_clients_sums_no_weight_and_is_still_applied(tmp_path, captured):
    """Every client of the cohort already has a memory: the weight slot sums to 0 and the round is not aborted."""
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=dh", "fl.num_clients=8"]))
    assert not rows["aborted"].any()
    server = captured["servers"][0]
    _check_sum(server, captured["workers"])
    assert server.memory.weight == pytest.approx(8.0, abs=8 * server.plan.max_weight / (2**15 - 1))


def _worker_1_dies(monkeypatch, before_round: int) -> None:
    """Worker 1 is replaced at the start of round `before_round` and then holds what a fresh worker holds: nothing."""
    calls = []

    def revive(self):
        calls.append(1)
        if len(calls) != before_round + 1:
            return []
        self.workers[1].residuals.clear()
        self.workers[1].staged = {}
        return [1]

    monkeypatch.setattr(InlinePool, "revive", revive)


@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_a_worker_death_resets_the_sum_and_every_memory_so_that_they_stay_equal(tmp_path, captured, monkeypatch,
                                                                                 secagg):
    """The dead worker's clients lost their memories, which the server's sum holds and cannot take out: both
    restart, and the run says so. Three workers, the middle one dead: the workers on either side must forget."""
    _worker_1_dies(monkeypatch, before_round=3)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, f"secagg={secagg}", "ray.num_workers=3"]))
    server, workers = captured["servers"][0], captured["workers"]
    held = _check_sum(server, workers)
    since = set()
    for r in range(3, 6):
        since |= set(fl.seeds.cohort(0, r, 30, 8))
    assert set(held) <= since  # nothing from before the reset
    done = json.loads(next(tmp_path.glob("*/done.json")).read_text())
    assert done["memory_resets"] == [3]
    # every worker's memories were discarded, not only the dead one's
    assert rows["state_lost_bytes"].tolist() == [0, 0, 0, rows["state_bytes"].iloc[2], 0, 0]


def test_a_masked_client_sends_its_update_less_its_memory_so_its_memory_is_its_latest_update(tmp_path, captured,
                                                                                           monkeypatch):
    """Every entry masked (no codec): what the server holds of a client is its latest update, as each round the
    client masks (update - memory). A client masking its whole update would keep the sum equal to its memories too,
    each then the sum of its updates."""
    latest = {}
    train = fl.rounds.client.timed_train

    def recorded(worker, cid, round, t):
        update, n = train(worker, cid, round, t)
        latest[cid] = update.copy()
        return update, n

    monkeypatch.setattr(fl.rounds.client, "timed_train", recorded)
    fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=dh", "compression=none", "fl.num_clients=8"]))
    held = _memories(captured["servers"][0], captured["workers"])
    assert set(held) == set(latest) == set(range(8))  # every client in every round
    for cid, memory in held.items():
        np.testing.assert_allclose(memory, latest[cid], rtol=0, atol=1e-3 * np.abs(latest[cid]).max())


def test_a_masked_round_under_memory_steps_every_entry_by_the_mean_of_all_memories(tmp_path, captured, monkeypatch):
    """The round's index set is only where its differences are: the step is the memories' mean everywhere, also
    at the entries earlier cohorts sent."""
    steps = []
    apply = fl.server.Server.apply_masked

    def recorded(self, r, values, weight, cells):
        before = self.weights.copy()
        apply(self, r, values, weight, cells)
        steps.append((self.weights - before, self.memory.mean(), self.positions))

    monkeypatch.setattr(fl.server.Server, "apply_masked", recorded)
    fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=dh"]))
    lr = np.float32(captured["servers"][0].plan.server_lr)
    outside = 0
    for moved, mean, positions in steps:
        np.testing.assert_allclose(moved, lr * mean, rtol=0, atol=1e-6)
        outside += np.count_nonzero(np.delete(mean, positions))
    assert len(steps) == 6 and outside > 0


def test_a_worker_replaced_before_any_memory_was_summed_resets_nothing(tmp_path, monkeypatch):
    """Before round 0 the sum holds no memory: the run must not report a reset that discarded none."""
    _worker_1_dies(monkeypatch, before_round=0)
    fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=none"]))
    done = json.loads(next(tmp_path.glob("*/done.json")).read_text())
    assert done["workers_replaced"] == [[0, [1]]] and "memory_resets" not in done


def test_after_a_memory_reset_a_worker_not_called_since_holds_no_bytes_in_the_rows_state(tmp_path, monkeypatch):
    """Worker 1 dies before round 4, whose clients are on workers 1 and 2 only: worker 0's memories were discarded
    by the reset, so the row's state_bytes must not count its last report."""
    _worker_1_dies(monkeypatch, before_round=4)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=none", "fl.clients_per_round=3",
                              "ray.num_workers=3"]))
    assert {c % 3 for c in fl.seeds.cohort(0, 4, 30, 3)} == {1, 2}  # the setting's premise
    assert {c % 3 for c in fl.seeds.cohort(0, 5, 30, 3)} == {0}
    each = 4 * rows["n_params"].iloc[0]  # a float32 memory
    assert rows["state_lost_bytes"].iloc[4] == rows["state_bytes"].iloc[3] > 0
    assert rows["state_bytes"].iloc[4:].tolist() == [3 * each, 6 * each]


@pytest.mark.parametrize("overrides,says", [
    (["fl.aggregation=mean"], "unknown fl.aggregation 'mean'; available: cohort, memory"),
    (["compression=rotation"], "linear codec 'rotation'"),
    (["compression=countsketch", "compression.ratio=0.1"], "linear codec 'countsketch'"),
    (["compression.residual_dtype=float16"], "compression.residual_dtype=float32"),
])
def test_settings_memory_cannot_keep_exact_are_refused(overrides, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        validate(fl.compose(["fl.aggregation=memory", "secagg=dh", *overrides]))


@pytest.mark.parametrize("ratio,refused", [(0.1, True), (0.5, True), (0.6, False)])
def test_memory_with_unbiased_randk_at_half_or_less_is_refused_as_its_memories_diverge(ratio, refused):
    """memory += (n/k) randk(update - memory): in mean square (update - memory) grows by (1 - ratio) / ratio a round,
    as the broadcast's view under the same codec does (refused alike)."""
    codec = compression.get("randk")(ratio, unbiased=True)
    update = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    memory = None
    for _ in range(8):
        _, memory = compression.MemoryFeedback(codec).encode(update, memory)
    gap = np.linalg.norm(update - memory) / np.linalg.norm(update)
    assert gap > 0.9 if refused else gap < 0.3
    settings = ["fl.aggregation=memory", "secagg=none", "compression=randk", "compression.server=false",
                f"compression.ratio={ratio}", "+compression.options.unbiased=true"]
    if refused:
        with pytest.raises(ConfigError, match=r"fl.aggregation=memory with compression 'randk' with unbiased values"):
            validate(fl.compose(settings))
    else:
        validate(fl.compose(settings))
    validate(fl.compose([*settings[:-1], "+compression.options.unbiased=false"]))  # biased: contracts, allowed
    validate(fl.compose([*settings, "compression.client=false"]))  # the clients' updates are not compressed


def test_memory_under_an_unmasked_linear_codec_is_allowed_as_each_client_decodes_its_own_message():
    validate(fl.compose(["fl.aggregation=memory", "secagg=none", "compression=countsketch", "compression.ratio=0.1"]))


@pytest.mark.parametrize("decoder,dropped", [("decode_unmask_request", "dropped_unmask"),
                                              ("decode_share_bundle", "dropped_masked_input")])
def test_a_client_that_cannot_check_a_message_keeps_the_memory_the_applied_sum_holds(tmp_path, captured, monkeypatch,
                                                                                     decoder, dropped):
    """The first such message a client is given does not decode. An unmask request: it sends no shares, but its
    masked input is in the survivors' sum the round applies, so its new memory is the one it keeps. A share bundle:
    it leaves before masking, so the sum holds none of its new memory, which it must not keep."""
    decode, calls = getattr(fl.wire, decoder), []

    def once(data):
        calls.append(1)
        if len(calls) == 1:
            raise fl.wire.WireError(f"{decoder}: a corrupted message")
        return decode(data)

    monkeypatch.setattr(fl.wire, decoder, once)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", *BASE, "secagg=dh", "compression.index_policy=sketch"]))
    assert rows[dropped].tolist() == [1, 0, 0, 0, 0, 0] and not rows["aborted"].any()
    _check_sum(captured["servers"][0], captured["workers"])
