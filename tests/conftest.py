"""Shared fixtures: one Ray runtime per test session (started here, shut down here)."""
import os

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, configure_logging=False,
                 log_to_driver=False)
        started = True
    yield ray
    if started:
        ray.shutdown()
