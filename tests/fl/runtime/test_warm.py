"""A sweep's warm pool (fl.runtime.warm): one set of Ray workers serves cell after cell, and no cell sees a
trace of the one before it (residuals, secagg sessions, seeds, the model, the data)."""
import numpy as np
import pandas as pd
import pytest

import fl
from fl.results import read_rows
from fl.runtime import warm

# what a cell computes (timings, ids and peak memory vary between any two runs)
COMPUTED = ["config_hash", "round", "accuracy", "loss", "bytes_up", "bytes_up_payload", "bytes_up_protocol",
            "bytes_up_sketch", "bytes_down", "catchups", "rejected", "dropped", "state_bytes", "n_params"]

# masked top-k with error feedback under partial participation and non-IID data: every kind of client state
MASKED = ["model=mlp_small", "secagg=dh", "compression=topk", "compression.ratio=0.1", "fl.num_clients=20",
          "fl.clients_per_round=6", "fl.rounds=3", "dataset.partition=shards", "secagg.dropout=0.1"]
# another model, codec, dataset split and seed in the same pool
OTHER = ["model=mlp_large", "secagg=none", "compression=topk", "compression.ratio=0.01", "fl.num_clients=12",
         "fl.clients_per_round=12", "fl.rounds=2", "seed=3", "dataset.partition=dirichlet"]


def run(overrides, results, keep):
    return fl.run(fl.compose([*overrides, "backend=ray", "ray.num_workers=2", f"results.dir={results}"]),
                  keep_warm=keep)


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a[COMPUTED].reset_index(drop=True), b[COMPUTED].reset_index(drop=True))


@pytest.fixture
def sweep():
    yield
    warm.close()
    assert warm._pool is None


def test_a_cell_after_another_in_the_warm_pool_equals_it_run_alone(tmp_path, ray_session, sweep):
    alone = run(MASKED, tmp_path / "alone", keep=False)
    assert alone["dropped"].sum() > 0 and alone["catchups"].sum() > 0  # the state that could leak exists

    first = run(MASKED, tmp_path / "first", keep=True)
    pool = warm._pool
    workers = list(pool.workers)
    other = run(OTHER, tmp_path / "warm", keep=True)
    after = run(MASKED, tmp_path / "warm", keep=True)
    assert warm._pool is pool and pool.workers == workers  # the same processes served all three cells
    same(first, alone)
    same(after, alone)
    same(other, run(OTHER, tmp_path / "other-alone", keep=False))
    assert other["accuracy"].iloc[-1] > 0.5


def test_a_cell_that_raises_takes_the_pool_with_it_and_the_next_cell_starts_afresh(tmp_path, ray_session, sweep,
                                                                                  monkeypatch):
    import fl.simulation

    run(OTHER, tmp_path, keep=True)
    pool = warm._pool
    real = fl.simulation.Server.broadcast

    def crash(self, r, *args):
        if r == 1:
            raise RuntimeError("a crash in round 1")
        return real(self, r, *args)

    monkeypatch.setattr(fl.simulation.Server, "broadcast", crash)
    with pytest.raises(RuntimeError, match="a crash in round 1"):
        run(MASKED, tmp_path, keep=True)
    assert warm._pool is None and pool.workers == []  # its workers were killed, not kept mid-step
    monkeypatch.undo()
    rows = run(MASKED, tmp_path, keep=True)  # the same command again: the failed cell is retried
    assert warm._pool is not None and warm._pool is not pool
    same(rows, run(MASKED, tmp_path / "alone", keep=False))


def test_a_pool_of_another_shape_is_replaced(tmp_path, ray_session, sweep):
    run(OTHER, tmp_path, keep=True)
    pool = warm._pool
    rows = fl.run(fl.compose([*OTHER, "backend=ray", "ray.num_workers=1", f"results.dir={tmp_path / 'one'}"]),
                  keep_warm=True)
    assert warm._pool is not pool and len(warm._pool.workers) == 1 and pool.workers == []
    np.testing.assert_array_equal(rows["accuracy"], read_rows(next(tmp_path.glob("*/rounds.csv")))["accuracy"])


def test_a_warm_pool_waits_for_each_cell_as_that_cell_says(sweep):
    """ray.call_timeout_s is not part of a pool's shape: a cell served by the last cell's pool waited as that cell
    said (for ever, or killing workers this cell gives longer)."""
    class Pool:
        timeout, workers = None, []

        def close(self):
            pass

    first = warm.pool(fl.compose(["ray.num_workers=2"]), 2, Pool)
    assert warm.pool(fl.compose(["ray.num_workers=2", "ray.call_timeout_s=30"]), 2, Pool) is first
    assert first.timeout == 30
    assert warm.pool(fl.compose(["ray.num_workers=2"]), 2, Pool) is first and first.timeout is None
