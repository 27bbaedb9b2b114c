"""The config hash names an experiment: where it runs and where its rows go are not part of it."""
import fl
from fl.config import as_dict, validate
from fl.results import config_hash


def _hash(*overrides):
    return config_hash(as_dict(validate(fl.compose(["secagg=none", *overrides]))))


def test_the_config_hash_ignores_backend_ray_and_results_and_sees_everything_else(tmp_path):
    base = _hash()
    assert base == _hash("backend=inline") == _hash("ray.num_workers=3", "ray.num_cpus_per_worker=0.5") \
        == _hash(f"results.dir={tmp_path}") == _hash("ray.address=auto")
    assert len({base, _hash("seed=1"), _hash("fl.rounds=3"), _hash("compression.ratio=0.1"),
                _hash("dataset.partition=shards"), _hash("model=mlp_small")}) == 6
