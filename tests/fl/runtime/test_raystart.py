"""A local Ray's workers can import the project however it was obtained (installed or only cloned)."""
import os
import subprocess
import sys
from pathlib import Path

import fl
from fl.runtime import raystart

ROOT = str(Path(fl.__file__).resolve().parents[1])


def test_the_checkout_goes_first_on_the_workers_path_and_only_once(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/somewhere/else", "", "/another"]))
    raystart._workers_import_project()
    raystart._workers_import_project()
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [ROOT, "/somewhere/else", "/another"]


def test_an_unset_path_becomes_the_checkout(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    raystart._workers_import_project()
    assert os.environ["PYTHONPATH"] == ROOT


def test_a_ray_started_for_another_address_is_started_again_for_this_one(monkeypatch):
    """A sweep's warm local Ray, then a cell with ray.address=auto: the cell ran on the local Ray."""
    import sys
    from types import SimpleNamespace

    calls = []
    state = {"up": False}
    fake = SimpleNamespace(is_initialized=lambda: state["up"],
                           init=lambda address=None, **kw: (calls.append(("init", address)), state.update(up=True)),
                           shutdown=lambda: (calls.append(("shutdown",)), state.update(up=False)))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(raystart, "_owned", False)
    monkeypatch.setattr(raystart, "_address", None)
    monkeypatch.setattr(raystart, "_workers_import_project", lambda: None)
    monkeypatch.setattr(raystart, "_stop_autoscaler_monitor", lambda ray: None)
    assert raystart.start(None) and raystart.start(None)  # the local Ray, kept for the next local cell
    assert raystart.start("auto")  # another address: stopped, and started again there
    assert calls == [("init", "local"), ("shutdown",), ("init", "auto")]
    monkeypatch.setattr(raystart, "_owned", False)  # a Ray someone else started is never stopped here
    assert not raystart.start(None) and calls[-1] == ("init", "auto")


def test_no_address_starts_a_local_ray_whatever_ray_address_names():
    """ray.address=null is a local Ray (docs/configuration.md). Ray's own default joins the cluster that RAY_ADDRESS
    (or the last `ray start` on this machine) names, where the local Ray's num_cpus is refused with a ValueError."""
    script = ("from fl.runtime import raystart\n"
              "import ray\n"
              "raystart.start(None)\n"
              "print('CPUs', ray.cluster_resources().get('CPU'))\n"
              "raystart.stop()\n")
    env = dict(os.environ, RAY_ADDRESS="127.0.0.1:1")  # nothing listens there
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CPUs" in done.stdout
