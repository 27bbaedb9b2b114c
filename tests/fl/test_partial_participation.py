"""Partial participation (a sampled cohort each round): downlink bytes, catch-ups, and results that do not
depend on how many workers ran the clients."""
import numpy as np
import pytest

import fl
from fl import seeds, wire
from fl.server import Broadcaster


def run(tmp_path, *overrides):
    return fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", *overrides]))


@pytest.fixture
def sent(monkeypatch):
    """Every serialized message by kind, and each round's broadcast (catch-ups apart)."""
    sizes: dict[str, list[int]] = {}
    for name in ("encode_roster", "encode_share_bundle", "encode_unmask_request"):
        original = getattr(wire, name)

        def wrapper(*a, _original=original, _name=name, **kw):
            message = _original(*a, **kw)
            sizes.setdefault(_name, []).append(len(message))
            return message

        monkeypatch.setattr(wire, name, wrapper)
    original_encode = Broadcaster.encode

    def encode(self, *a, **kw):
        message = original_encode(self, *a, **kw)
        sizes.setdefault("broadcast", []).append(len(message))
        return message

    monkeypatch.setattr(Broadcaster, "encode", encode)
    original_catchup = Broadcaster.catchup

    def catchup(self, round):
        message = original_catchup(self, round)
        sizes.setdefault("catchup", {})[round] = len(message)
        return message

    monkeypatch.setattr(Broadcaster, "catchup", catchup)
    return sizes


@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_a_dense_broadcast_is_counted_once_per_sampled_client_with_no_catch_up(tmp_path, sent, secagg):
    rows = run(tmp_path, f"secagg={secagg}", "compression=none", "fl.num_clients=20", "fl.clients_per_round=5",
               "fl.rounds=5")
    assert (rows["catchups"] == 0).all()
    expected = 5 * np.array(sent["broadcast"])
    if secagg == "dh":  # roster and unmask request to each of the 5 clients, one share bundle each
        expected += 5 * np.array(sent["encode_roster"]) + 5 * np.array(sent["encode_unmask_request"])
        expected += np.array(sent["encode_share_bundle"]).reshape(5, 5).sum(axis=1)
    np.testing.assert_array_equal(rows["bytes_down"], expected)


@pytest.mark.parametrize("secagg", [("secagg=none",), ("secagg=dh", "compression.index_policy=randk")])
def test_a_compressed_broadcast_adds_one_catch_up_for_each_client_that_missed_one(tmp_path, sent, secagg):
    """A client behind fetches the broadcasts it missed, or the catch-up message where that is shorter: counted
    as the catch-up's own length (it names its round; round 0's broadcast, which was charged, names none, and
    under masking carries the index set's seed)."""
    rows = run(tmp_path, *secagg, "compression=topk", "compression.ratio=0.1", "fl.num_clients=12",
               "fl.clients_per_round=4", "fl.rounds=6")
    sizes = sent["broadcast"]
    if secagg[0] == "secagg=dh":  # what the protocol sends: roster and unmask request to each, a bundle each
        protocol = 4 * np.array(sent["encode_roster"]) + 4 * np.array(sent["encode_unmask_request"])
        protocol += np.array(sent["encode_share_bundle"]).reshape(6, 4).sum(axis=1)
    else:
        protocol = np.zeros(6, int)
    last: dict[int, int] = {}
    charged_apart = 0  # catch-ups charged at a length round 0's broadcast does not have
    for r in range(6):
        expected, catchups = protocol[r], 0
        for cid in seeds.cohort(0, r, 12, 4):
            missed = sizes[last.get(cid, -1) + 1:r] if r > 0 else []
            charged_apart += bool(missed) and sent["catchup"][r] < sum(missed) and sent["catchup"][r] != sizes[0]
            expected += sizes[r] + (min(sum(missed), sent["catchup"][r]) if missed else 0)
            catchups += bool(missed)
            last[cid] = r
        assert rows["bytes_down"].iloc[r] == expected and rows["catchups"].iloc[r] == catchups
    assert rows["catchups"].iloc[1:].sum() > 0 and charged_apart > 0


@pytest.mark.parametrize("secagg", [("secagg=none",), ("secagg=dh", "secagg.dropout=0.12"),
                                    ("secagg=none", "fl.aggregation=memory"),
                                    ("secagg=dh", "secagg.dropout=0.12", "fl.aggregation=memory")],
                         ids=["plain", "masked", "plain-memory", "masked-memory"])
def test_results_do_not_depend_on_the_number_of_workers_with_partial_participation(tmp_path, secagg):
    """With a compressed broadcast a worker idle in a round must still catch up on the model it missed."""
    settings = ("compression=topk", "compression.ratio=0.1", "fl.num_clients=20", "fl.clients_per_round=10",
                "fl.rounds=8", "dataset.partition=dirichlet", *secagg)
    runs = [run(tmp_path / str(w), f"ray.num_workers={w}", *settings) for w in (1, 2, 10)]
    assert list(runs[2]["num_workers"].unique()) == [10]  # some of the ten are idle in a round
    for other in runs[1:]:
        for column in ("accuracy", "loss", "bytes_up", "bytes_down", "catchups", "dropped", "aborted"):
            np.testing.assert_array_equal(runs[0][column], other[column])
        if secagg[0] == "secagg=none":  # every worker's residuals, called this round or not (a masked round's
            # new residuals wait, staged, until their worker is next called)
            np.testing.assert_array_equal(runs[0]["state_bytes"], other["state_bytes"])
    if "secagg.dropout=0.12" in secagg:  # aborted rounds (below t):
        # their staged residuals are dropped on every worker
        assert runs[0]["dropped"].sum() > 0 and runs[0]["aborted"].any() and not runs[0]["aborted"].all()
    else:
        assert runs[0]["accuracy"].iloc[-1] >= 0.75  # 0.800 (8 rounds, 20 Dirichlet clients, 10 a round)


def test_a_worker_refuses_a_delta_on_a_stale_model_and_applies_a_catch_up_first():
    from fixtures_workers import attached_workers
    from fl.rounds.client import sync

    cfg, plan, (worker,) = attached_workers(["model=mlp_small", "secagg=none", "compression.ratio=0.1",
                                             "fl.num_clients=4", "fl.clients_per_round=2", "backend=inline"])
    n = plan.length
    broadcaster = Broadcaster(plan)
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=n).astype(np.float32) for _ in range(3)]
    first = broadcaster.encode(0, weights[0])
    sync(worker, first, 0)
    broadcaster.encode(1, weights[1])  # this worker misses round 1
    catchup = broadcaster.catchup(2)
    third = broadcaster.encode(2, weights[2])
    with pytest.raises(wire.WireError, match="no catch-up"):
        sync(worker, third, 2)
    sync(worker, third, 2, catchup)
    np.testing.assert_array_equal(worker.reference, broadcaster.view)
