"""The seconds columns measure what docs/configuration.md#result-columns says each one does: work made slow on
purpose shows up in its own column, and only there."""
import time

import fl
from compression.index_policy import IndexPolicy
from fl.runtime.worker import Worker
from fl.server import Server

SLOW = 0.5  # seconds added to one piece of work: far above what the rest of a tiny round takes


def _slow(monkeypatch, owner, name: str) -> None:
    original = getattr(owner, name)

    def slow(*args, **kwargs):
        time.sleep(SLOW)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow)


def _run(tmp_path, *overrides):
    return fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=dh",
                              "compression.ratio=0.1", "fl.num_clients=4", "fl.clients_per_round=4", "fl.rounds=2",
                              *overrides]))


def test_under_fresh_choosing_the_index_set_is_decoding_not_unmasking(tmp_path, monkeypatch):
    """t_unmask is rebuilding secrets and removing masks; the server's choice of the index set is t_decode's, under
    `fresh` (from the summed summary, mid-round) as under `sketch` (for the next round, in apply_masked)."""
    _slow(monkeypatch, IndexPolicy, "choose")
    rows = _run(tmp_path)  # the default policy: fresh
    assert rows["index_policy"].str.startswith("fresh").all()
    assert (rows["t_decode"] >= SLOW).all()
    assert (rows["t_unmask"] < SLOW).all()


def test_the_unmask_steps_wall_ends_with_the_protocol_not_with_applying_the_update(tmp_path, monkeypatch):
    """t_step_unmask is the unmask exchange's wall; applying the update (a count sketch's heavy hitters, the next
    index set) is t_decode, after it."""
    _slow(monkeypatch, Server, "apply_masked")
    rows = _run(tmp_path, "compression.index_policy=randk")
    assert (rows["t_decode"] >= SLOW).all()
    assert (rows["t_step_unmask"] < SLOW).all()
    steps = rows[["t_step_advertise", "t_step_share_keys", "t_step_masked_input", "t_step_unmask"]].sum(axis=1)
    assert (steps + rows["t_decode"] <= rows["t_round"]).all()


def test_a_plain_rounds_aggregate_seconds_hold_its_whole_server_side_applying_the_mean_included(tmp_path, monkeypatch):
    """Without masking t_aggregate is the whole server side of the round (t_decode is masked rounds' only)."""
    _slow(monkeypatch, Server, "apply")
    rows = _run(tmp_path, "secagg=none")
    assert rows["t_decode"].isna().all()
    assert (rows["t_aggregate"] >= SLOW).all()


SLOW_RESIDUAL = 0.15


class _SlowResidual:
    """A residual whose conversion (error feedback's `update + residual`) takes SLOW_RESIDUAL seconds."""

    def __init__(self, values):
        self.values = values

    def astype(self, dtype):
        time.sleep(SLOW_RESIDUAL)
        return self.values.astype(dtype)


def test_a_masked_clients_error_feedback_counts_in_its_encode_seconds_as_a_plain_clients_does(tmp_path, monkeypatch):
    """t_encode holds error feedback: adding the residual to a masked client's update was counted nowhere."""
    class Slow(dict):
        def get(self, cid, default=None):
            value = super().get(cid, default)
            return value if value is None else _SlowResidual(value)

    attach = Worker.attach

    def slow_attach(self, data, plan):
        out = attach(self, data, plan)
        self.residuals = Slow()
        return out

    monkeypatch.setattr(Worker, "attach", slow_attach)
    rows = _run(tmp_path, "compression.index_policy=randk", "fl.rounds=3")
    later = rows[rows["round"] > 0]  # every client of the cohort holds a residual from round 1 on
    assert not later["aborted"].any()
    assert (later["t_encode"] >= 4 * SLOW_RESIDUAL).all()
    assert (later["t_train"] < 4 * SLOW_RESIDUAL).all()
