"""The row's worker_peak_mb is the largest worker's peak so far (docs/configuration.md), also in a round whose
dropouts leave that worker uncalled."""
from collections import defaultdict

import fl
import fl.seeds
from fl.rounds.exchange import Tally, exchange
from fl.runtime.worker import Worker


class _Pool:
    """Each called worker replies with its one client's message and the peak it reports."""

    def __init__(self, peaks: dict[int, float]):
        self.peaks = peaks

    def call(self, step, calls, carried=None):
        return {w: ([(w, b"m")], {"worker_peak_mb": self.peaks[w], "state_bytes": 0}) for w in calls}


def _round(pool, workers, held, peaks) -> dict:
    stats = defaultdict(float)
    tally = Tally({}, stats, 0, held, peaks)
    list(exchange(pool, None, {w: () for w in workers}, {w: [w] for w in workers}, tally))
    return stats


def test_worker_peak_keeps_the_largest_worker_of_earlier_rounds():
    pool, held, peaks = _Pool({0: 500.0, 1: 600.0}), {}, {}
    assert _round(pool, [0, 1], held, peaks)["worker_peak_mb"] == 600.0
    assert _round(pool, [0], held, peaks)["worker_peak_mb"] == 600.0  # worker 1's clients all dropped
    assert _round(pool, [], held, peaks)["worker_peak_mb"] == 600.0  # nobody called (a masked round aborted early)


def test_a_replaced_workers_fresh_process_does_not_lower_the_peak_its_predecessor_reached():
    """A fresh process reports its own, lower peak: the row must still give the largest a worker of the run reached."""
    pool, held, peaks = _Pool({0: 500.0, 1: 600.0}), {}, {}
    _round(pool, [0, 1], held, peaks)
    pool.peaks[1] = 100.0  # worker 1 died and was replaced
    assert _round(pool, [0, 1], held, peaks)["worker_peak_mb"] == 600.0


def test_a_runs_rows_keep_the_largest_workers_peak_in_rounds_that_do_not_call_it(tmp_path, monkeypatch):
    """Worker 2 (peak 300 MB) has clients in round 0 only among rounds 0, 1 and 5: every row still gives its peak."""
    stats = Worker.stats
    monkeypatch.setattr(Worker, "stats", lambda self: {**stats(self), "worker_peak_mb": 100.0 * (self.worker_id + 1)})
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=none",
                              "fl.num_clients=30", "fl.clients_per_round=3", "fl.rounds=6", "ray.num_workers=3"]))
    assert [sorted({c % 3 for c in fl.seeds.cohort(0, r, 30, 3)}) for r in (0, 1, 5)] == [[1, 2], [0, 1], [0]]
    assert rows["worker_peak_mb"].tolist() == [300.0] * 6
