"""MNIST, Fashion-MNIST and CIFAR-10 through torchvision's own classes, on tiny files in their real formats."""
import os
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch
from fixtures_datasets import dataset_cfg, synthetic_images, write_mnist
from omegaconf import OmegaConf

import fl
from fl.config import ConfigError, validate
from fl.data import DatasetNotFoundError, load_dataset
from fl.models import build_model
from fl.training import evaluate, train_local

LENET = Path(__file__).resolve().parents[2] / "conf" / "model" / "lenet.yaml"
EXPECTED = {  # a file each dataset's error must name, relative to dataset.root
    "mnist": os.path.join("MNIST", "raw", "train-images-idx3-ubyte"),
    "fashion_mnist": os.path.join("FashionMNIST", "raw", "t10k-labels-idx1-ubyte"),
    "cifar10": os.path.join("cifar-10-batches-py", "data_batch_1"),
}


def test_lenet_on_mnist_format_digits_reaches_093(mnist_digits_root):
    """Real handwriting (the bundled digits, 28x28) through torchvision.datasets.MNIST, LeNet, local SGD."""
    data = load_dataset(dataset_cfg("mnist", mnist_digits_root), seed=0)
    assert data.x_train.shape == (1437, 1, 28, 28) and data.x_test.shape == (360, 1, 28, 28)
    torch.manual_seed(0)
    model = build_model(OmegaConf.load(LENET), data.input_shape, data.num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(7):  # over init seeds 0-5 this ends at 0.956-0.975 (the slowest passes 0.93 at epoch 6)
        train_local(model, optimizer, data.x_train, data.y_train, 1, 32, seed=epoch)
    accuracy, _ = evaluate(model, data.x_test, data.y_test)
    assert accuracy >= 0.93


@pytest.mark.parametrize("name,folder,shape,seed", [("mnist", "MNIST", (1, 28, 28), 1),
                                                    ("fashion_mnist", "FashionMNIST", (1, 28, 28), 2),
                                                    ("cifar10", "cifar-10-batches-py", (3, 32, 32), 3)])
def test_each_dataset_reads_its_own_split_standardized_per_channel_with_train_statistics(tiny, name, folder,
                                                                                           shape, seed):
    data = load_dataset(dataset_cfg(name, tiny), seed=0)
    x, y = synthetic_images(80, shape, seed=seed)  # what the fixture wrote: 60 train, then 20 test
    assert data.x_train.shape == (60, *shape) and data.x_test.shape == (20, *shape) and data.input_shape == shape
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64 and data.num_classes == 10
    np.testing.assert_array_equal(data.y_train, y[:60])
    np.testing.assert_array_equal(data.y_test, y[60:])
    raw = x.astype(np.float64)
    mean = raw[:60].mean(axis=(0, 2, 3), keepdims=True)
    std = raw[:60].std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(data.x_train, (raw[:60] - mean) / std, atol=1e-4)
    np.testing.assert_allclose(data.x_test, (raw[60:] - mean) / std, atol=1e-4)  # the test split: train statistics


def _listing(folder: Path) -> list:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


def test_gzipped_files_as_distributed_are_unpacked_into_the_cache_never_beside_them(tiny, tmp_path):
    raw = tiny / "MNIST" / "raw"
    assert (raw / "train-images-idx3-ubyte.gz").exists()  # the fixture wrote only .gz files
    before = _listing(raw)
    cache = tmp_path / "cache"
    data = load_dataset(dataset_cfg("mnist", tiny, cache=str(cache)), seed=0)
    assert _listing(raw) == before and not (raw / "train-images-idx3-ubyte").exists()
    unpacked = list(cache.rglob("train-images-idx3-ubyte"))
    assert len(unpacked) == 1 and unpacked[0].parent.name == "raw"
    stamp = unpacked[0].stat().st_mtime_ns
    again = load_dataset(dataset_cfg("mnist", tiny, cache=str(cache)), seed=0)  # unpacked once
    assert unpacked[0].stat().st_mtime_ns == stamp
    np.testing.assert_array_equal(again.x_train, data.x_train)


def _gz_copy(tmp_path: Path, x, y) -> Path:
    """Debian's layout, writable: the four gzipped IDX files flat in one folder."""
    raw = write_mnist(tmp_path / "staging", "FashionMNIST", x[:60], y[:60], x[60:], y[60:], compress=True)
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in raw.iterdir():
        (flat / f.name).write_bytes(f.read_bytes())
    return flat


def test_a_corrupt_gz_is_one_clear_error_and_leaves_no_partial_file(tmp_path):
    x, y = synthetic_images(80, (28, 28), seed=5)
    flat = _gz_copy(tmp_path, x, y)
    gz = flat / "train-images-idx3-ubyte.gz"
    data = bytearray(gz.read_bytes())
    data[40:200] = bytes(160)  # the deflate stream, not its length: zlib fails mid-file
    gz.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(DatasetNotFoundError, match="could not unpack .*train-images-idx3-ubyte.gz"):
        load_dataset(dataset_cfg("fashion_mnist", tmp_path / "none", system_dirs=[str(flat)], cache=str(cache)), 0)
    assert not [p for p in cache.rglob("*") if "partial" in p.name]


def test_a_cut_cached_copy_is_made_again_and_an_unreadable_copy_is_named(tmp_path):
    """A copy truncated after its stamp was written (a full disk, a killed copy by hand) was read forever, and the
    error told the user to replace the originals, naming only them."""
    x, y = synthetic_images(80, (28, 28), seed=5)
    flat = _gz_copy(tmp_path, x, y)
    cache = tmp_path / "cache"
    cfg = dataset_cfg("fashion_mnist", tmp_path / "none", system_dirs=[str(flat)], cache=str(cache))
    first = load_dataset(cfg, 0)
    (copy,) = cache.rglob("train-images-idx3-ubyte")
    copy.write_bytes(copy.read_bytes()[:1000])
    np.testing.assert_array_equal(load_dataset(cfg, 0).x_train, first.x_train)  # made again, whole
    data = bytearray(copy.read_bytes())
    data[2] = 9  # the same size, another type code: refused, naming the copy and its original
    copy.write_bytes(bytes(data))
    with pytest.raises(DatasetNotFoundError, match=f"{copy} .the copy of {flat / 'train-images-idx3-ubyte.gz'}: "
                                                   "delete it to have it made again; if the error stays, the "
                                                   "original is at fault. is no IDX file"):
        load_dataset(cfg, 0)


@pytest.mark.parametrize("damage,problem", [
    (lambda b: b[:-1], "47055 bytes where its header .60 x 28 x 28. says 47056"),  # cut short
    (lambda b: b + b"\x00", "47057 bytes where its header .60 x 28 x 28. says 47056"),  # a byte past its end
    (lambda b: b[:2] + b"\x09" + b[3:], "magic number 00000903, expected 00000803"),  # another type code
    (lambda b: b[:3] + b"\x01" + b[4:], "magic number 00000801, expected 00000803"),  # a label file's header
    (lambda b: b[:6], "6 bytes, shorter than its header"),
])
def test_an_idx_file_its_reader_cannot_take_is_named_with_its_problem(tmp_path, damage, problem):
    """torchvision's reader failed with 'AssertionError' or 'shape [...] is invalid', naming no file."""
    x, y = synthetic_images(80, (28, 28), seed=5)
    raw = write_mnist(tmp_path / "root", "MNIST", x[:60], y[:60], x[60:], y[60:])
    images = raw / "train-images-idx3-ubyte"
    images.write_bytes(damage(images.read_bytes()))
    with pytest.raises(DatasetNotFoundError, match=f"{images} is no IDX file its reader can take: {problem}"):
        load_dataset(dataset_cfg("mnist", tmp_path / "root"), 0)


def test_an_unreadable_copy_in_the_cache_is_named_with_the_way_out(tiny, tmp_path):
    """CIFAR-10 files flat in a system folder are read from a copy in the cache: when the copy cannot be read, the
    message named only the originals and told the user to replace them."""
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in (tiny / "cifar-10-batches-py").iterdir():
        (flat / f.name).write_bytes(f.read_bytes())
    cache = tmp_path / "cache"
    cfg = dataset_cfg("cifar10", tmp_path / "none", system_dirs=[str(flat)], cache=str(cache))
    load_dataset(cfg, 0)
    (copy,) = cache.rglob("data_batch_1")
    data = bytearray(copy.read_bytes())
    data[100] ^= 1  # the same size: the copy is kept, and torchvision's checksum refuses it
    copy.write_bytes(bytes(data))
    with pytest.raises(DatasetNotFoundError, match=f"read from their copy in {copy.parent}: delete the copy"):
        load_dataset(cfg, 0)


@pytest.mark.parametrize("removed", [1, 3])
def test_a_root_holding_only_some_files_is_refused_not_passed_over_for_a_system_copy(tmp_path, removed):
    """Some of the four files under dataset.root: the run read the system copy, silently, under a hash keyed to
    the root."""
    x, y = synthetic_images(80, (28, 28), seed=5)
    flat = _gz_copy(tmp_path, x, y)
    raw = write_mnist(tmp_path / "root", "FashionMNIST", x[:60], y[:60], x[60:], y[60:])
    for name in ("t10k-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "train-labels-idx1-ubyte")[:removed]:
        (raw / name).unlink()
    cfg = dataset_cfg("fashion_mnist", tmp_path / "root", system_dirs=[str(flat)], cache=str(tmp_path / "cache"))
    with pytest.raises(DatasetNotFoundError, match=r"holds only some of .*t10k-labels-idx1-ubyte"):
        load_dataset(cfg, 0)


def test_a_replaced_source_is_unpacked_again_even_when_it_keeps_an_older_time(tmp_path):
    """dpkg, tar and cp -p keep a file's time: a cached copy newer than its replacement is still stale."""
    x, y = synthetic_images(80, (28, 28), seed=5)
    flat = _gz_copy(tmp_path, x, y)
    cfg = dataset_cfg("fashion_mnist", tmp_path / "none", system_dirs=[str(flat)], cache=str(tmp_path / "cache"))
    np.testing.assert_array_equal(load_dataset(cfg, 0).y_train, y[:60])
    shifted = (y + 1) % 10
    write_mnist(tmp_path / "new", "FashionMNIST", x[:60], shifted[:60], x[60:], shifted[60:], compress=True)
    labels = flat / "train-labels-idx1-ubyte.gz"
    labels.write_bytes((tmp_path / "new" / "FashionMNIST" / "raw" / labels.name).read_bytes())
    os.utime(labels, (946684800, 946684800))  # 2000-01-01, older than the cached copy
    np.testing.assert_array_equal(load_dataset(cfg, 0).y_train, shifted[:60])


@pytest.mark.parametrize("case", ["fewer labels", "label out of range"])
def test_files_that_parse_but_disagree_are_refused_naming_the_folder(tmp_path, case):
    x, y = synthetic_images(80, (28, 28), seed=5)
    y_train = y[:59] if case == "fewer labels" else np.where(np.arange(60) == 3, 200, y[:60]).astype(np.uint8)
    write_mnist(tmp_path, "FashionMNIST", x[:60], y_train, x[60:], y[60:])
    expected = "60 images but 59 labels" if case == "fewer labels" else "labels from 0 to 200, expected 0 to 9"
    with pytest.raises(DatasetNotFoundError, match=f"train files under .*FashionMNIST.* disagree: {expected}"):
        load_dataset(dataset_cfg("fashion_mnist", tmp_path), 0)


def _system_copy(tmp_path: Path, x, y) -> Path:
    """Debian's layout: the four gzipped IDX files flat in one folder, made read-only."""
    system = tmp_path / "usr-share-datasets" / "fashion-mnist"
    write_mnist(tmp_path / "staging", "FashionMNIST", x[:60], y[:60], x[60:], y[60:], compress=True)
    system.mkdir(parents=True)
    for f in (tmp_path / "staging" / "FashionMNIST" / "raw").iterdir():
        (system / f.name).write_bytes(f.read_bytes())
        (system / f.name).chmod(0o444)
    system.chmod(0o555)
    return system


def test_a_system_folder_is_found_after_root_and_its_listing_never_changes(tmp_path):
    x, y = synthetic_images(80, (28, 28), seed=5)
    system = _system_copy(tmp_path, x, y)
    before = _listing(system)
    cache = tmp_path / "cache"
    cfg = dataset_cfg("fashion_mnist", tmp_path / "empty-root", system_dirs=[str(tmp_path / "nowhere"), str(system)],
                      cache=str(cache))
    data = load_dataset(cfg, seed=0)
    np.testing.assert_array_equal(data.y_train, y[:60])
    np.testing.assert_array_equal(data.y_test, y[60:])
    assert _listing(system) == before
    assert not (tmp_path / "empty-root").exists()  # root is looked at, never created
    assert len(list(cache.rglob("t10k-labels-idx1-ubyte"))) == 1


def test_files_under_root_win_over_the_system_folder(tiny, tmp_path):
    x, y = synthetic_images(80, (28, 28), seed=5)
    system = _system_copy(tmp_path, x, y)
    data = load_dataset(dataset_cfg("fashion_mnist", tiny, system_dirs=[str(system)], cache=str(tmp_path / "c")),
                        seed=0)
    np.testing.assert_array_equal(data.y_train, synthetic_images(80, (28, 28), seed=2)[1][:60])  # the tiny root's
    assert not (tmp_path / "c").exists()  # plain files in torchvision's layout are read where they are


def test_the_raw_files_are_read_not_processed_files_an_older_torchvision_left_beside_them(tmp_path):
    """torchvision's MNIST reads `processed/{training,test}.pt` when both exist, in place of `raw/`."""
    x, y = synthetic_images(80, (28, 28), seed=6)
    write_mnist(tmp_path / "root", "MNIST", x[:60], y[:60], x[60:], y[60:])
    processed = tmp_path / "root" / "MNIST" / "processed"
    processed.mkdir()
    for f, n in (("training.pt", 7), ("test.pt", 5)):
        torch.save((torch.zeros(n, 28, 28, dtype=torch.uint8), torch.zeros(n, dtype=torch.int64)), processed / f)
    data = load_dataset(dataset_cfg("mnist", tmp_path / "root", cache=str(tmp_path / "c")), seed=0)
    np.testing.assert_array_equal(data.y_train, y[:60])
    np.testing.assert_array_equal(data.y_test, y[60:])


def test_one_processed_file_alone_is_ignored_as_torchvision_ignores_it_and_raw_is_read_in_place(tmp_path):
    """torchvision reads `processed/` only when both of its files are there: one alone needs no copy of `raw/`."""
    x, y = synthetic_images(80, (28, 28), seed=6)
    write_mnist(tmp_path / "root", "MNIST", x[:60], y[:60], x[60:], y[60:])
    processed = tmp_path / "root" / "MNIST" / "processed"
    processed.mkdir()
    torch.save((torch.zeros(7, 28, 28, dtype=torch.uint8), torch.zeros(7, dtype=torch.int64)),
               processed / "training.pt")
    data = load_dataset(dataset_cfg("mnist", tmp_path / "root", cache=str(tmp_path / "c")), seed=0)
    np.testing.assert_array_equal(data.y_train, y[:60])
    assert not (tmp_path / "c").exists()


def test_missing_files_name_every_place_looked_and_both_ways_to_get_them(tmp_path):
    cfg = fl.compose(["dataset=fashion_mnist", f"dataset.root={tmp_path}",
                      f"dataset.system_dirs=[{tmp_path / 'sys1'},{tmp_path / 'sys2'}]"])
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    message = str(err.value)
    for place in (tmp_path / "FashionMNIST" / "raw", tmp_path / "sys1", tmp_path / "sys2"):
        assert str(place) in message
    assert "apt-get install dataset-fashion-mnist" in message and "dataset.download=true" in message


def test_fashion_mnist_config_looks_in_debians_folder_by_default():
    cfg = fl.compose(["dataset=fashion_mnist"])
    assert list(cfg.dataset.system_dirs) == ["/usr/share/datasets/fashion-mnist"]


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_missing_files_are_one_clear_error_naming_where_they_go(tmp_path, name):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(dataset_cfg(name, tmp_path), seed=0)
    message = str(err.value)
    assert str(tmp_path / EXPECTED[name]) in message and "dataset.download=true" in message
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ValueError)
    assert err.value.__context__ is None  # raised before torchvision is asked, not re-wrapped from deep inside


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_missing_files_refuse_the_configuration_before_any_work(tmp_path, name):
    cfg = fl.compose([f"dataset={name}", f"dataset.root={tmp_path}"])
    with pytest.raises(ConfigError, match="dataset.download=true") as err:
        validate(cfg)
    assert str(tmp_path / EXPECTED[name]) in str(err.value)
    results = tmp_path / "rows"
    with pytest.raises(ConfigError):
        fl.run_server(backend="inline", dataset=name, **{"dataset.root": str(tmp_path), "results.dir": str(results)})
    assert not results.exists()


def test_mnist_files_torchvision_cannot_read_are_one_clear_error(tiny_root, monkeypatch):
    """The md5 check behind the message reads CIFAR-10's lists; MNIST's classes have none, and must not fail it."""
    import torchvision.datasets

    def unreadable(self, *args, **kwargs):
        raise RuntimeError("cannot read")

    monkeypatch.setattr(torchvision.datasets.FashionMNIST, "__init__", unreadable)
    root, _ = tiny_root
    with pytest.raises(DatasetNotFoundError, match=r"could not be read \(RuntimeError: cannot read\)\. Replace"):
        load_dataset(dataset_cfg("fashion_mnist", root), seed=0)


def test_corrupt_cifar_files_are_one_clear_error_not_torchvisions_trace(tiny_root):
    """Without the fixture's checksums torchvision finds the md5 of every batch wrong: one error, context hidden."""
    root, _ = tiny_root
    with pytest.raises(DatasetNotFoundError, match="could not be read") as err:
        load_dataset(dataset_cfg("cifar10", root), seed=0)
    assert err.value.__suppress_context__ and "dataset.download=true" in str(err.value)


@pytest.mark.parametrize("name", ["data_batch_3", "batches.meta"])
def test_a_cut_cifar_batch_is_named_among_files_whose_md5_is_right(tiny, tmp_path, name):
    """torchvision's error names no file: the one whose md5 is wrong is named, the others are not (the label names'
    file too, which torchvision checks apart from the batches)."""
    import shutil

    shutil.copytree(tiny / "cifar-10-batches-py", tmp_path / "cifar-10-batches-py")
    cut = tmp_path / "cifar-10-batches-py" / name
    cut.write_bytes(cut.read_bytes()[:-100])
    with pytest.raises(DatasetNotFoundError, match="could not be read") as err:
        load_dataset(dataset_cfg("cifar10", tmp_path), seed=0)
    assert str(cut) in str(err.value) and "data_batch_1" not in str(err.value)


def test_failed_download_is_one_clear_error(tmp_path, monkeypatch):
    import torchvision.datasets

    def offline(self):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", offline)
    with pytest.raises(DatasetNotFoundError, match="could not download") as err:
        load_dataset(dataset_cfg("mnist", tmp_path, download=True), seed=0)
    assert str(tmp_path / "MNIST" / "raw") in str(err.value) and err.value.__suppress_context__


def test_download_true_skips_the_missing_file_check_at_config_time(tmp_path):
    validate(fl.compose(["dataset=mnist", f"dataset.root={tmp_path}", "dataset.download=true"]))


@pytest.mark.parametrize("name", ["mnist", "cifar10", "digits"])
def test_max_train_and_max_test_subsample_deterministically(tiny, name):
    full = load_dataset(dataset_cfg(name, tiny), seed=0)
    a = load_dataset(dataset_cfg(name, tiny, max_train=25, max_test=7), seed=0)
    b = load_dataset(dataset_cfg(name, tiny, max_train=25, max_test=7), seed=0)
    c = load_dataset(dataset_cfg(name, tiny, max_train=25, max_test=7), seed=1)
    assert len(a.y_train) == 25 and len(a.y_test) == 7
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)  # the seed picks the subset
    assert abs(float(a.x_train.mean())) < 1e-4  # standardized on what is kept
    big = load_dataset(dataset_cfg(name, tiny, max_train=10**9, max_test=None), seed=0)
    np.testing.assert_array_equal(big.y_train, full.y_train)
