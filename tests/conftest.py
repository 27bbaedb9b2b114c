"""Shared fixtures: one Ray runtime per test session (started here, shut down here)."""
import atexit
import os
import shutil
import tempfile

import pytest

# Unpacked dataset copies (fl.data's cache) go to a folder of this session, never the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = _cache = tempfile.mkdtemp(prefix="fedsqueeze-test-cache-")
atexit.register(shutil.rmtree, _cache, True)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=os.cpu_count() or 2, include_dashboard=False, configure_logging=False,
                 log_to_driver=False)  # "local": not a cluster that RAY_ADDRESS or a `ray start` names
        started = True
    yield ray
    if started:
        ray.shutdown()
