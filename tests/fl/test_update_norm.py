"""`fl.max_update_norm`: each client's update is clipped to an L2 norm before it is encoded, so one client whose
local training blew up cannot wreck the global model; off by default, and never turning a NaN/Inf into a number."""
import numpy as np
import pandas as pd
import pytest

import fl
from fl import seeds
from fl.config import ConfigError, as_dict, validate
from fl.results import config_hash
from fl.rounds.client import clip_norm
from fl.runtime.worker import Worker


def test_clip_norm_scales_a_long_update_to_the_bound_and_leaves_a_short_one_bit_for_bit():
    rng = np.random.default_rng(0)
    short = rng.normal(size=1000).astype(np.float32)
    norm = float(np.linalg.norm(short))
    same, clipped = clip_norm(short, norm * 1.01)
    assert same is short and not clipped
    assert clip_norm(short, None) == (short, False)
    out, clipped = clip_norm(short, norm / 4)
    assert clipped and out.dtype == np.float32
    assert np.linalg.norm(out.astype(np.float64)) == pytest.approx(norm / 4, rel=1e-6)
    np.testing.assert_allclose(out * 4, short, rtol=1e-6)  # the direction is kept


def test_clip_norm_handles_a_finite_update_whose_float32_norm_would_overflow():
    huge = np.full(100, 3e38, np.float32)  # finite; its squares overflow float32
    out, clipped = clip_norm(huge, 2.0)
    assert clipped and np.isfinite(out).all()
    assert np.linalg.norm(out.astype(np.float64)) == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_clip_norm_never_turns_a_non_finite_update_into_a_number(bad):
    update = np.ones(10, np.float32)
    update[3] = bad
    out, clipped = clip_norm(update, 1.0)
    assert out is update and not clipped  # refused downstream, as without a bound


@pytest.mark.parametrize("bad", ["0", "-1", "inf", "nan"])
def test_a_bound_that_is_not_positive_and_finite_is_refused_at_config_time(bad):
    with pytest.raises(ConfigError, match="fl.max_update_norm must be > 0 and finite"):
        validate(fl.compose([f"fl.max_update_norm={bad}"]))


def test_the_key_at_its_default_keeps_earlier_runs_hashes_and_a_bound_changes_the_hash():
    recorded = as_dict(validate(fl.compose(["secagg=none"])))
    before = {**recorded, "fl": {k: v for k, v in recorded["fl"].items() if k != "max_update_norm"}}
    assert config_hash(before) == config_hash(recorded)
    assert config_hash(as_dict(validate(fl.compose(["secagg=none", "fl.max_update_norm=5"])))) != \
        config_hash(recorded)


def _blow_up(monkeypatch, client=2):
    """Client `client`'s local training ends 1e7 times too far away (finite), as a diverging local SGD does."""
    original = Worker.train

    def train(self, cid, round):
        update, n = original(self, cid, round)
        return (update * np.float32(1e7) if cid == client else update), n

    monkeypatch.setattr(Worker, "train", train)


ROUNDS = 8


def _run(tmp_path, *overrides):
    return fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", f"fl.rounds={ROUNDS}",
                              "fl.num_clients=20", "fl.clients_per_round=8", "dataset.partition=dirichlet",
                              *overrides]))


def _took_part(client=2) -> list[int]:
    took_part = [int(client in seeds.cohort(0, r, 20, 8)) for r in range(ROUNDS)]
    assert 0 < sum(took_part) < ROUNDS
    return took_part


def test_without_a_bound_one_blown_up_client_wrecks_plain_fedavg_and_with_one_it_does_not(tmp_path, monkeypatch):
    """Honest updates here have norms of 0.2 to 1; the blown-up one 1e7 times its own. Clipped to 2, it costs
    the run less than 2 points; aggregated as it is, the loss goes past 1e10."""
    settings = ("secagg=none", "compression=none")
    clean = _run(tmp_path / "clean", *settings)
    _blow_up(monkeypatch)
    wrecked = _run(tmp_path / "off", *settings)
    clipped = _run(tmp_path / "on", *settings, "fl.max_update_norm=2")
    assert (wrecked["clipped"] == 0).all() and wrecked["loss"].iloc[-1] > 1e10
    assert wrecked["accuracy"].iloc[-1] < 0.5
    # only the blown-up client is clipped, in each round it takes part in
    assert clipped["clipped"].tolist() == _took_part()
    assert (clipped["rejected"] == 0).all()
    assert clipped["accuracy"].iloc[-1] >= clean["accuracy"].iloc[-1] - 0.02


@pytest.mark.parametrize("compression", [["compression=none"], ["compression.ratio=0.1"]])
def test_under_masking_the_bound_is_applied_by_the_client_before_its_update_is_masked(tmp_path, monkeypatch,
                                                                                       compression):
    """The server cannot see a masked update's norm: the client clips its own, so the masked sum carries the
    clipped update. Masking's per-value clip (secagg.clip) alone leaves the blown-up update at 0.5 in every
    entry, which still costs more than 10 points here."""
    clean = _run(tmp_path / "clean", "secagg=dh", *compression)
    _blow_up(monkeypatch)
    unbounded = _run(tmp_path / "off", "secagg=dh", *compression)
    rows = _run(tmp_path / "on", "secagg=dh", *compression, "fl.max_update_norm=1")
    assert unbounded["accuracy"].iloc[-1] < clean["accuracy"].iloc[-1] - 0.1
    assert (rows["clipped"] >= _took_part()).all()  # the blown-up client each time (an honest one at most ~1)
    assert not rows["aborted"].any() and (rows["rejected"] == 0).all()
    assert rows["accuracy"].iloc[-1] >= clean["accuracy"].iloc[-1] - 0.03


@pytest.mark.parametrize("secagg", ["none", "dh"])
def test_update_norm_max_is_the_largest_norm_of_the_rounds_updates_before_the_bound(tmp_path, monkeypatch, secagg):
    """The row's `update_norm_max` is what a user reads to choose a bound: the largest norm the cohort's clients
    trained to, taken before clipping, in every round, with and without masking."""
    from fl.rounds.client import update_norm

    _blow_up(monkeypatch)
    blown, norms = Worker.train, {}

    def record(self, cid, round):
        update, n = blown(self, cid, round)
        norms.setdefault(round, []).append(update_norm(update))
        return update, n

    monkeypatch.setattr(Worker, "train", record)
    rows = _run(tmp_path, f"secagg={secagg}", "compression.ratio=0.1", "fl.max_update_norm=1")
    assert rows["update_norm_max"].tolist() == [max(norms[r]) for r in range(ROUNDS)]
    took_part = _took_part()
    assert all((m > 1e5) == bool(p) for m, p in zip(rows["update_norm_max"], took_part))


@pytest.mark.parametrize("overlap", [True, False])
def test_a_run_that_diverges_keeps_every_finite_rounds_row_with_its_evaluation(tmp_path, monkeypatch, overlap):
    """With eval_overlap, round 1's evaluation rides on round 2's training call: the round that diverges has
    already carried it back, so round 1's row keeps its accuracy either way."""
    from fl.errors import Diverged

    original = Worker.train

    def train(self, cid, round):
        update, n = original(self, cid, round)
        return (np.full_like(update, 3e38) if round == 2 else update), n

    monkeypatch.setattr(Worker, "train", train)
    with pytest.raises(Diverged):
        _run(tmp_path, "secagg=none", "fl.server_lr=2.0", f"fl.eval_overlap={str(overlap).lower()}")
    rows = pd.read_csv(next(tmp_path.rglob("rounds.csv")))
    assert rows["round"].tolist() == [0, 1] and rows["accuracy"].notna().all() and rows["accuracy"].iloc[1] > 0.3
    assert len(list(tmp_path.rglob("failed-*.txt"))) == 1
