"""Dataset fixtures on disk in torchvision's formats (written once per session; see fixtures_datasets.py)."""
from __future__ import annotations

import pytest
from fixtures_datasets import cifar_checksums, digits_as_mnist_arrays, synthetic_images, write_cifar10, write_mnist


@pytest.fixture(scope="session")
def mnist_digits_root(tmp_path_factory):
    """The bundled digits (real handwriting) upsampled to 28x28, as MNIST IDX files (1437 train / 360 test)."""
    root = tmp_path_factory.mktemp("mnist_digits")
    write_mnist(root, "MNIST", *digits_as_mnist_arrays())
    return root


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory):
    """One root holding tiny MNIST (gzipped, as distributed), Fashion-MNIST and CIFAR-10 files."""
    root = tmp_path_factory.mktemp("tiny")
    x, y = synthetic_images(80, (28, 28), seed=1)
    write_mnist(root, "MNIST", x[:60], y[:60], x[60:], y[60:], compress=True)
    x, y = synthetic_images(80, (28, 28), seed=2)
    write_mnist(root, "FashionMNIST", x[:60], y[:60], x[60:], y[60:])
    x, y = synthetic_images(80, (3, 32, 32), seed=3)
    md5 = write_cifar10(root, x[:60], y[:60], x[60:], y[60:])
    return root, md5


@pytest.fixture
def tiny(tiny_root, monkeypatch):
    """The tiny root, with torchvision's CIFAR10 checking the md5s of the files written here."""
    import torchvision.datasets

    root, md5 = tiny_root
    for attr, value in cifar_checksums(md5).items():
        monkeypatch.setattr(torchvision.datasets.CIFAR10, attr, value)
    return root
