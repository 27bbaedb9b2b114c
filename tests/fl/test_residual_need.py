"""The clients' residual state a run will reach, known before round 0: the figure the run then reports, and the
start-up warning where this machine's available memory cannot hold it."""
import pytest

import fl
import fl.seeds
import fl.simulation as sim
from fl.runtime.worker import Worker

PARTIAL = ("model=mlp_small", "secagg=none", "compression=topk", "compression.ratio=0.1", "fl.num_clients=20",
           "fl.clients_per_round=4", "fl.rounds=4", "ray.num_workers=2")


def run(tmp_path, *overrides):
    return fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", *PARTIAL, *overrides]))


@pytest.fixture
def need(monkeypatch):
    """What residual_need told the run, and each worker's last reported state (bytes)."""
    seen = {"need": [], "held": {}}
    original_need, original_stats = sim.residual_need, Worker.stats

    def residual_need(*a):
        seen["need"].append(original_need(*a))
        return seen["need"][-1]

    def stats(self):
        out = original_stats(self)
        seen["held"][self.worker_id] = out["state_bytes"]
        return out

    monkeypatch.setattr(sim, "residual_need", residual_need)
    monkeypatch.setattr(Worker, "stats", stats)
    return seen


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_estimate_is_the_state_the_run_reports_at_its_last_round(tmp_path, need, dtype, capsys):
    """20 clients, 4 a round for 4 rounds: the clients sampled at least once keep a residual each, on worker
    cid % 2, and each worker's most senders in a round hold their old one beside it until its next call."""
    rows = run(tmp_path, f"compression.residual_dtype={dtype}")
    (total, largest, clients), = need["need"]
    each = rows["n_params"].iloc[0] * (4 if dtype == "float32" else 2)
    kept = rows["state_bytes"].iloc[-1]
    assert kept == clients * each and 4 < clients < 16 and set(need["held"]) == {0, 1}
    most = [max(sum(c % 2 == w for c in fl.seeds.cohort(0, r, 20, 4)) for r in range(4)) for w in (0, 1)]
    assert total == kept + sum(most) * each
    assert largest == max(need["held"][w] + most[w] * each for w in (0, 1))
    out = capsys.readouterr()
    assert f"{clients} clients' {dtype} residuals will reach {total / 1e6:,.1f} MB" in out.out
    assert "warning" not in out.err


@pytest.mark.parametrize("setting, dtype", [(("compression.index_policy=sketch",), "float16"),
                                            (("compression.index_policy=fresh",), "float32"),
                                            (("secagg=none", "fl.aggregation=memory", "compression=none"), "float32"),
                                            (("secagg=none",), "float16")],
                         ids=["masked-sketch", "masked-fresh", "memory-dense", "plain-topk"])
def test_a_runs_estimate_holds_its_rounds_second_copies_beside_the_kept_residuals(tmp_path, monkeypatch, setting,
                                                                                  dtype):
    """Every client in every round: a masked round stages each client's new residual (float32, held first under
    `fresh`) beside the one it keeps, twice (three times in float16) the residuals the estimate counted; a plain
    round holds each sender's old residual beside its new one, and under fl.aggregation=memory its old memory (also
    without compression)."""
    peaks, needs = {}, []
    original_need, original_stats = sim.residual_need, Worker.stats

    def stats(self):  # called once a round's residuals are staged (fresh: held; memory: replaced), before they are kept
        held = sum(c.nbytes for c, _ in self.held.values()) + sum(r.nbytes for r in self.staged.values())
        held += sum(r.nbytes for r in self.replaced.values() if r is not None)
        peaks[self.worker_id] = max(peaks.get(self.worker_id, 0), held + sum(r.nbytes for r in self.residuals.values()))
        return original_stats(self)

    monkeypatch.setattr(sim, "residual_need", lambda *a: needs.append(original_need(*a)) or needs[-1])
    monkeypatch.setattr(Worker, "stats", stats)
    fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "compression.ratio=0.1",
                       "fl.num_clients=10", "fl.clients_per_round=10", "fl.rounds=3", "ray.num_workers=2",
                       *setting, f"compression.residual_dtype={dtype}"]))
    (total, largest, clients), = needs
    assert (total, largest, clients) == (sum(peaks.values()), max(peaks.values()), 10)


def test_no_estimate_nor_line_where_no_client_keeps_a_residual(tmp_path, need, capsys):
    rows = run(tmp_path, "compression.error_feedback=false")
    assert need["need"] == [(0, 0, 0)] and rows["state_bytes"].iloc[-1] == 0
    assert "residuals will reach" not in capsys.readouterr().out


def test_a_run_whose_residuals_exceed_the_available_memory_is_warned_at_start_up_and_still_runs(
        tmp_path, need, monkeypatch, capsys):
    monkeypatch.setattr(sim, "available_memory", lambda: 100_000)
    rows = run(tmp_path)
    (total, _, _), = need["need"]
    assert len(rows) == 4 and total > 100_000
    err = capsys.readouterr().err
    assert f"residuals will reach {total / 1e6:,.1f} MB, more than the 0.1 MB of memory available now" in err
    assert "compression.residual_dtype=float16" in err and "fl.num_clients" in err


def test_a_run_on_other_machines_is_not_held_to_this_ones_memory(monkeypatch, capsys):
    """`local=False` (a Ray cluster by `ray.address`): the line, no warning."""
    from types import SimpleNamespace

    monkeypatch.setattr(sim, "available_memory", lambda: 1)
    plan = SimpleNamespace(length=1000, residual_dtype="float32", memory=False)
    sim.announce_residuals(plan, 8000, 4000, 2, local=False)
    out = capsys.readouterr()
    assert "2 clients' float32 residuals will reach 0.0 MB" in out.out and out.err == ""
    sim.announce_residuals(plan, 8000, 4000, 2, local=True)
    assert "more than the 0.0 MB of memory available now" in capsys.readouterr().err


def test_the_warning_under_memory_aggregation_names_memories_and_only_settings_that_lessen_them(monkeypatch, capsys):
    """Under fl.aggregation=memory float16 is refused, and error_feedback=false or a codec without residuals leaves
    every memory in place: the advice must not send a user to them."""
    from types import SimpleNamespace

    monkeypatch.setattr(sim, "available_memory", lambda: 1)
    plan = SimpleNamespace(length=1000, residual_dtype="float32", memory=True)
    sim.announce_residuals(plan, 8000, 4000, 2, local=True)
    err = capsys.readouterr().err
    assert "the clients' memories will reach 0.0 MB, more than the 0.0 MB of memory available now" in err
    assert "fewer fl.num_clients" in err
    assert "residual_dtype=float16" not in err and "error_feedback=false" not in err and "qsgd" not in err
