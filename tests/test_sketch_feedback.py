"""experiments.sketch_feedback (its table is in docs/performance.md): the residual's norm over one update's."""
import numpy as np
import pytest

import compression
from experiments.sketch_feedback import growth


def test_the_residual_is_measured_in_update_norms_at_the_checkpoints_and_the_last_round():
    n, codec = 400, compression.get("topk")(0.25)
    out = growth(codec, n, 12, seed=3)
    assert list(out) == [10, 12]
    update = np.random.default_rng(3).standard_normal(n).astype(np.float32)  # round 1's: its residual by hand
    kept = np.sort(np.argsort(-np.abs(update))[:100])
    residual = update.copy()
    residual[kept] = 0
    assert growth(codec, n, 1, seed=3) == {1: pytest.approx(np.linalg.norm(residual) / np.sqrt(n), rel=1e-6)}
    assert growth(compression.get("none")(1.0), n, 10, seed=3) == {10: 0.0}  # everything sent: nothing kept
