"""A local Ray's workers can import the project however it was obtained (installed or only cloned)."""
import os
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
