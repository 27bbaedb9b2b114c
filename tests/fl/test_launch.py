"""fl.launch: a run starts Ray before torch loads, and stops the Ray it started whatever happens."""
import subprocess
import sys

import pytest

import fl
from fl import launch


def test_validating_a_cpu_configuration_does_not_import_torch():
    # Ray's start begins right after validation: importing torch there would delay it by about 1.3 s.
    code = ("import sys, fl; from fl.config import validate; "
            "validate(fl.compose(['model=mlp_small', 'backend=ray'])); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


class FakeRay:
    def __init__(self):
        self.calls = []

    def start(self, address=None):
        self.calls.append(("start", address))
        return True

    def stop(self):
        self.calls.append(("stop",))


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(launch.raystart, "start", fake.start)
    monkeypatch.setattr(launch.raystart, "stop", fake.stop)
    return fake


def test_a_run_that_fails_after_ray_started_stops_it(tmp_path, monkeypatch, fake_ray):
    import fl.simulation

    def crash(*args):
        assert fake_ray.calls == [("start", None)]  # Ray was started before the loop ran
        raise RuntimeError("crashed mid-run")

    monkeypatch.setattr(fl.simulation, "simulate", crash)
    with pytest.raises(RuntimeError, match="crashed mid-run"):
        fl.run(fl.compose([f"results.dir={tmp_path}", "backend=ray", "model=mlp_small"]))
    assert fake_ray.calls == [("start", None), ("stop",)]


def test_a_refused_configuration_starts_no_ray(tmp_path, fake_ray):
    with pytest.raises(fl.ConfigError, match="ratio"):
        fl.run(fl.compose([f"results.dir={tmp_path}", "backend=ray", "compression.ratio=1.5"]))
    assert fake_ray.calls == []


def test_the_inline_backend_starts_no_ray_and_gets_the_dataset_loaded_meanwhile(tmp_path, fake_ray):
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=1",
                              "secagg=none"]))
    assert fake_ray.calls == [] and len(rows) == 1
    assert rows["accuracy"].iloc[0] > 0.4  # one round of mlp_small on digits: 0.59 here, chance is 0.1


def test_an_inline_run_leaves_the_callers_torch_generator_as_it_was(tmp_path):
    # A notebook seeds torch, runs, then draws: the run's own seeding (initial model, each client) must not
    # change what the notebook draws next.
    import torch

    overrides = [f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "fl.rounds=1", "secagg=none"]
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    fl.run(fl.compose(overrides))
    assert torch.equal(torch.rand(3), expected)
