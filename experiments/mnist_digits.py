"""The bundled digits written as MNIST IDX files, so the real MNIST reader runs on real handwriting.

    python -m experiments.mnist_digits data/mnist_digits      # then dataset=mnist dataset.root=data/mnist_digits

The 8x8 glyphs are scaled to 20x20 and centred in 28x28, as MNIST was made; 1437 train / 360 test images.
"""
from __future__ import annotations

import argparse
import gzip
import struct
from pathlib import Path

import numpy as np

from experiments.args import summary


MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    """An IDX file: magic (0, 0, 0x08 = uint8, number of dimensions), each dimension as big-endian uint32, data."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    blob = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(f"{path}.gz", "wb") as f:
            f.write(blob)
    else:
        path.write_bytes(blob)


def write_mnist(root: Path, folder: str, x_train, y_train, x_test, y_test, compress: bool = False) -> Path:
    """Images (n, 28, 28) uint8 and labels as the four IDX files of `<root>/<folder>/raw/`."""
    raw = Path(root) / folder / "raw"
    for split, (x, y) in {"train": (x_train, y_train), "test": (x_test, y_test)}.items():
        images, labels = MNIST_FILES[split]
        write_idx(raw / images, x, compress)
        write_idx(raw / labels, y, compress)
    return raw


def digits_as_mnist_arrays(seed: int = 0):
    """scikit-learn's digits (real handwriting), upsampled as MNIST was made: the 8x8 glyph scaled to
    20x20 (bilinear), centred in a 28x28 frame, 0-255. Returns x_train, y_train, x_test, y_test (80/20)."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    small = torch.from_numpy(x.reshape(-1, 1, 8, 8).astype(np.float32) / 16.0)
    big = torch.nn.functional.interpolate(small, size=(20, 20), mode="bilinear", align_corners=False)
    big = torch.nn.functional.pad(big, (4, 4, 4, 4))
    images = (big.clamp(0, 1) * 255).round().to(torch.uint8).numpy()[:, 0]
    x_tr, x_te, y_tr, y_te = train_test_split(images, y.astype(np.uint8), test_size=0.2, random_state=seed,
                                              stratify=y)
    return x_tr, y_tr, x_te, y_te


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("root", help="dataset.root to write <root>/MNIST/raw/ into")
    root = Path(ap.parse_args(argv).root)
    raw = write_mnist(root, "MNIST", *digits_as_mnist_arrays())
    print(f"wrote {raw}: use dataset=mnist dataset.root={root}")
    return raw


if __name__ == "__main__":
    main()
