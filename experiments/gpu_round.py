"""Time one round of local training on cuda against cpu, per model.

    python -m experiments.gpu_round                                   # digits, all five models
    python -m experiments.gpu_round --dataset cifar10 --synthetic 5000 --models lenet resnet_small

A round as a worker runs it: data and model are moved to the device once; then per client: load the
global weights -> train `--epochs` on the client's IID share -> update = local - global, copied to the
host (the wire needs it there). The first client of each device is run once untimed (CUDA context,
cuDNN autotuning). `--synthetic N` times N random samples of the dataset's shape, so no files are needed.
Prints a Markdown table (model, parameters, seconds per round on cpu and cuda, speed-up). Exits with a
message and status 1 when CUDA is not available.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from fl.data import INPUT_SHAPES, Dataset, load_dataset
from fl.partitions import partition
from fl.models import MODELS, build_model, check_device, get_flat, num_params, set_flat
from fl.training import as_tensor, train_local
from experiments.args import positive_int, summary

MODEL_CONF = Path(__file__).resolve().parent.parent / "conf" / "model"


def synthetic(name: str, n: int, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, *INPUT_SHAPES[name]), dtype=np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return Dataset(x, y, x[:0], y[:0], 10)


def time_round(model_name: str, data: Dataset, parts: list[np.ndarray], device: str, epochs: int = 1,
               batch_size: int = 32, lr: float = 0.1, seed: int = 0) -> tuple[float, int]:
    """Seconds for one round of local training of every client in `parts` on `device`; and the model size."""
    cfg = OmegaConf.load(MODEL_CONF / f"{model_name}.yaml")
    torch.manual_seed(seed)
    model = build_model(cfg, data.input_shape, data.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = as_tensor(data.x_train, device), as_tensor(data.y_train, device)  # once per worker
    index = [torch.from_numpy(p).to(device) for p in parts]
    weights = get_flat(model)

    def client(cid: int) -> np.ndarray:
        set_flat(model, weights)
        train_local(model, optimizer, x[index[cid]], y[index[cid]], epochs, batch_size, seed + cid, device)
        return get_flat(model) - weights  # to the host: synchronizes with the device

    client(0)  # warm-up, untimed
    t0 = time.perf_counter()
    for cid in range(len(parts)):
        client(cid)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0, num_params(model)


def real_data(name: str, root: str) -> Dataset:
    """The dataset as simulate.py loads it: its preset's whole config (system_dirs: where apt installs
    Fashion-MNIST), with `root` searched first."""
    preset = OmegaConf.load(MODEL_CONF.parent / "dataset" / f"{name}.yaml")
    return load_dataset(OmegaConf.merge(preset, {"root": root}), 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=summary(__doc__))
    parser.add_argument("--dataset", default="digits", choices=list(INPUT_SHAPES))
    parser.add_argument("--root", default="data", help="dataset.root for mnist/fashion_mnist/cifar10")
    parser.add_argument("--synthetic", type=positive_int, default=None, metavar="N",
                        help="time N random samples of the dataset's shape instead of its files")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--clients", type=positive_int, default=10)
    parser.add_argument("--epochs", type=positive_int, default=1)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--device", default="cuda", help="the accelerator to compare with cpu")
    args = parser.parse_args(argv)
    if not args.device.startswith("cuda"):
        sys.exit(f"gpu_round: nothing to compare: --device {args.device!r} is no CUDA device (cpu is the baseline)")
    try:
        check_device(args.device)
    except ValueError as err:
        sys.exit(f"gpu_round: nothing to compare: {err}")

    if args.synthetic:
        data = synthetic(args.dataset, args.synthetic)
    else:
        data = real_data(args.dataset, args.root)
    parts = partition(data.y_train, args.clients, "iid", 0.0, 0)
    print(f"{args.dataset}{' (synthetic)' if args.synthetic else ''}: {len(data.y_train)} samples, "
          f"{args.clients} clients, {args.epochs} local epoch(s), batch {args.batch_size}; "
          f"cpu: {torch.get_num_threads()} threads; {args.device}: {torch.cuda.get_device_name(args.device)}")
    print(f"\n| model | parameters | cpu s/round | {args.device} s/round | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for name in args.models:
        t_cpu, n = time_round(name, data, parts, "cpu", args.epochs, args.batch_size)
        t_gpu, _ = time_round(name, data, parts, args.device, args.epochs, args.batch_size)
        print(f"| `{name}` | {n:,} | {t_cpu:.3f} | {t_gpu:.3f} | {t_cpu / t_gpu:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
