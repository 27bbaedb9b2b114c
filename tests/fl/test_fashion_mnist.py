"""The real Fashion-MNIST (60,000 / 10,000 images), as Debian's `dataset-fashion-mnist` installs it.

Skipped, with the reason printed, on a machine without the package (`.ci/run` installs it where it can).
"""
import shutil
from pathlib import Path

import pytest

import fl

SYSTEM = Path("/usr/share/datasets/fashion-mnist")
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz")
pytestmark = pytest.mark.skipif(not all((SYSTEM / f).is_file() for f in FILES),
                                reason=f"real Fashion-MNIST not in {SYSTEM}: apt-get install dataset-fashion-mnist")


def _listing(folder: Path) -> list:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_lenet_at_federated_scale_learns_real_fashion_mnist_from_a_read_only_system_folder(tmp_path):
    """100 clients, 10 a round, 1 local epoch, no root given: 5 rounds reach 0.64 (seed 0); the bar is 0.55."""
    system = tmp_path / "datasets" / "fashion-mnist"
    system.mkdir(parents=True)
    for f in FILES:
        shutil.copy2(SYSTEM / f, system / f)
        (system / f).chmod(0o444)
    system.chmod(0o555)
    before, real_before = _listing(system), _listing(SYSTEM)
    rows = fl.run(fl.compose([
        f"results.dir={tmp_path / 'rows'}", "backend=inline",
        "dataset=fashion_mnist", f"dataset.root={tmp_path / 'no'}",
        f"dataset.system_dirs=[{system}]", f"dataset.cache={tmp_path / 'cache'}", "model=lenet", "secagg=none",
        "compression=none", "fl.num_clients=100", "fl.clients_per_round=10", "fl.rounds=5", "fl.local_epochs=1"]))
    assert rows["dataset"].iloc[0] == "fashion_mnist" and rows["n_params"].iloc[0] == 107_786
    assert rows["accuracy"].iloc[-1] >= 0.55
    # a dense broadcast, never a catch-up: 431,165 bytes in round 0 (protobuf omits a zero round), 431,167 after
    assert (rows["catchups"] == 0).all()
    assert rows["bytes_down_per_client"].tolist() == [431_165] + [431_167] * 4
    assert _listing(system) == before and _listing(SYSTEM) == real_before
    assert not (tmp_path / "no").exists()


def test_the_default_fashion_mnist_config_finds_the_system_folder_without_a_root(tmp_path):
    from fl.config import validate
    from fl.data import load_dataset

    cfg = validate(fl.compose(["dataset=fashion_mnist", f"dataset.root={tmp_path}", f"dataset.cache={tmp_path / 'c'}"]))
    data = load_dataset(cfg.dataset, 0)
    assert data.x_train.shape == (60_000, 1, 28, 28) and data.x_test.shape == (10_000, 1, 28, 28)
    assert sorted(set(data.y_test.tolist())) == list(range(10))


def test_gpu_round_loads_fashion_mnist_from_where_apt_installs_it(tmp_path):
    """experiments.gpu_round's data comes from the preset's config, system_dirs included: with only `name` and
    `root` it could not find the files simulate.py reads."""
    from experiments.gpu_round import real_data

    data = real_data("fashion_mnist", str(tmp_path / "empty-root"))
    assert data.x_train.shape == (60_000, 1, 28, 28) and len(data.y_test) == 10_000
