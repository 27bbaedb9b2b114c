"""Models by name and size, and the flat float32 view of their weights that the wire carries.

Every model is sized to the dataset's input shape and runs on every dataset: flat inputs with a square
number of features (digits' 64) are viewed as one-channel images (1x8x8) by the convolutional models.
No model holds buffers (no BatchNorm running statistics): the flat parameter vector is the whole model
state, so there is nothing to aggregate or keep per client, and a result does not depend on which
worker ran which client. `resnet_small` normalizes with GroupNorm by default (`model.norm=batch`:
BatchNorm with batch statistics in training and evaluation alike).

`python -m fl.models` prints the parameter count of every model (conf/model/) on every dataset.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

# model name -> architecture family; the sizes live in conf/model/<name>.yaml
MODELS = {"mlp_small": "mlp", "mlp_large": "mlp", "lenet": "cnn", "cnn_wide": "cnn", "resnet_small": "resnet"}
NORMS = ("group", "batch")


def _opt(cfg, key: str, default):
    value = getattr(cfg, key, default)
    return default if value is None else value


def image_shape(input_shape) -> tuple[int, int, int]:
    """(C, H, W) of an input: images as they are, a square flat feature count as one channel."""
    shape = (int(input_shape),) if isinstance(input_shape, (int, np.integer)) else tuple(int(d) for d in input_shape)
    if len(shape) == 3:
        return shape  # type: ignore[return-value]
    if len(shape) == 2:
        return (1, *shape)  # type: ignore[return-value]
    side = math.isqrt(shape[0]) if len(shape) == 1 else 0
    if side * side == shape[0] and side > 0:
        return (1, side, side)
    raise ValueError(f"a convolutional model needs an image input (C, H, W) or a square number of features, "
                     f"got input shape {shape}")


class ToImage(nn.Module):
    """View each sample as a (C, H, W) image (digits' 64 features as 1x8x8); images pass unchanged."""

    def __init__(self, shape: tuple[int, int, int]):
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}"


class BatchStatNorm2d(nn.BatchNorm2d):
    """BatchNorm that always normalizes with the statistics of the batch at hand (training and evaluation)
    and keeps no running state. A batch with a single value per channel (one sample at 1x1 resolution, as
    the last ResNet stage on 8x8 digits) normalizes to the bias rather than raising, as x - mean = 0."""

    def __init__(self, channels: int):
        super().__init__(channels, track_running_stats=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] * x.shape[2] * x.shape[3] > 1:
            return super().forward(x)
        centred = x - x.mean(dim=(0, 2, 3), keepdim=True)  # zeros, but keeps the graph for autograd
        return centred * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)


def norm_layer(kind: str, channels: int) -> nn.Module:
    """BatchNorm with batch statistics and no running state (`batch`), or GroupNorm with 32 groups, or
    fewer that divide `channels` (`group`)."""
    if kind == "batch":
        return BatchStatNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(math.gcd(32, channels), channels)
    raise ValueError(f"unknown model.norm {kind!r}; use one of {', '.join(NORMS)}")


def _head(width: int, hidden, num_classes: int) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(width, int(h)), nn.ReLU()]
        width = int(h)
    layers.append(nn.Linear(width, num_classes))
    return layers


def mlp(in_features: int, hidden, num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), *_head(in_features, hidden, num_classes))


class MaxPool2x2(nn.MaxPool2d):
    """2x2 max-pool (ceil mode). Without autograd it takes the maximum of strided slices: the same values
    (a maximum is exact), without the indices that max_pool2d also computes and only a backward pass needs
    (the gain: docs/performance.md). With autograd it is max_pool2d, whose gradient goes to one input on ties."""

    def __init__(self):
        super().__init__(2, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().forward(x)
        h, w = x.shape[-2:]
        if h % 2 or w % 2:  # ceil mode: the last row / column pools alone
            x = nn.functional.pad(x, (0, w % 2, 0, h % 2), value=float("-inf"))
        x = torch.maximum(x[..., 0::2], x[..., 1::2])
        return torch.maximum(x[..., 0::2, :], x[..., 1::2, :])


def convnet(shape: tuple[int, int, int], channels, hidden, num_classes: int, padding: str = "same") -> nn.Module:
    """LeNet-style: per stage a 5x5 convolution -> ReLU -> 2x2 max-pool; then the MLP head. `padding`:
    'same' keeps each stage's size (28 -> 14 -> 7), 'valid' is the classic LeNet / NIID-Bench CNN
    (28 -> 24 -> 12 -> 8 -> 4: 256 features into the head)."""
    if padding not in ("same", "valid"):
        raise ValueError(f"unknown model.padding {padding!r}; use 'same' or 'valid'")
    layers: list[nn.Module] = [ToImage(shape)]
    width = shape[0]
    for ch in channels:
        layers += [nn.Conv2d(width, int(ch), 5, padding=2 if padding == "same" else 0), nn.ReLU(),
                   MaxPool2x2()]
        width = int(ch)
    features = nn.Sequential(*layers, nn.Flatten())
    with torch.no_grad():
        flat = features(torch.zeros(1, *shape)).shape[1]
    return nn.Sequential(*features, *_head(flat, hidden, num_classes))


class BasicBlock(nn.Module):
    """ResNet basic block: 3x3 conv -> norm -> ReLU -> 3x3 conv -> norm, plus the (projected) input."""

    def __init__(self, width_in: int, width: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(width_in, width, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm_layer(norm, width)
        self.relu1 = nn.ReLU()  # modules, not torch.relu: a forward hook (experiments.activations) sees them
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.norm2 = norm_layer(norm, width)
        self.relu2 = nn.ReLU()
        self.shortcut = nn.Sequential()
        if stride != 1 or width_in != width:
            self.shortcut = nn.Sequential(nn.Conv2d(width_in, width, 1, stride=stride, bias=False),
                                          norm_layer(norm, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.norm1(self.conv1(x)))
        return self.relu2(self.norm2(self.conv2(out)) + self.shortcut(x))


def resnet(shape: tuple[int, int, int], channels, hidden, num_classes: int, norm: str,
           blocks_per_stage: int = 2) -> nn.Module:
    """ResNet-18 layout for small images (a 3x3 stem, no max-pool): one stage per entry of `channels`,
    two basic blocks each, stride 2 from the second stage on; global average pool; linear head."""
    layers: list[nn.Module] = [ToImage(shape), nn.Conv2d(shape[0], int(channels[0]), 3, padding=1, bias=False),
                               norm_layer(norm, int(channels[0])), nn.ReLU()]
    width = int(channels[0])
    for stage, ch in enumerate(channels):
        for block in range(blocks_per_stage):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(BasicBlock(width, int(ch), stride, norm))
            width = int(ch)
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), *_head(width, hidden, num_classes)]
    return nn.Sequential(*layers)


def build_model(cfg, input_shape, num_classes: int) -> nn.Module:
    """The model `cfg.name` (a `model` config) for inputs of `input_shape` and `num_classes` outputs.

    `input_shape` is one sample's shape: (64,) for digits, (1, 28, 28) for MNIST, (3, 32, 32) for
    CIFAR-10; a plain int is taken as a flat feature count (the older call form).
    - `mlp_small` / `mlp_large`: MLP with `cfg.hidden` widths (4,810 / 501,270 parameters on digits).
    - `lenet` / `cnn_wide`: `cfg.channels` 5x5 conv stages (`cfg.padding` same or valid), then `cfg.hidden`
      dense layers.
    - `resnet_small`: ResNet-18 layout with `cfg.channels` stage widths (11.2M parameters on CIFAR-10),
      normalized by `cfg.norm` (`group` or `batch`).
    """
    family = MODELS.get(cfg.name)
    if family is None:
        raise ValueError(f"unknown model {cfg.name!r}; available: {', '.join(MODELS)}")
    hidden = list(_opt(cfg, "hidden", []))
    if family == "mlp":
        in_features = int(input_shape) if isinstance(input_shape, (int, np.integer)) else int(np.prod(input_shape))
        return mlp(in_features, hidden, num_classes)
    channels = list(_opt(cfg, "channels", []))
    if not channels:
        raise ValueError(f"model {cfg.name!r} needs model.channels (its convolution widths)")
    shape = image_shape(input_shape)
    if family == "cnn":
        return convnet(shape, channels, hidden, num_classes, str(_opt(cfg, "padding", "same")))
    return resnet(shape, channels, hidden, num_classes, str(_opt(cfg, "norm", "group")))


def check_device(device: str) -> None:
    """Refuse a torch device this machine cannot use, with the reason: `cpu`, or `cuda`/`cuda:N` with CUDA."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}") from None
    if dev.type == "cpu":
        return
    if dev.type != "cuda":
        raise ValueError(f"device must be 'cpu' or 'cuda' (or 'cuda:N'), got {device!r}")
    if not torch.cuda.is_available():
        build = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ValueError(
            f"device={device} requested but CUDA is not available on this machine (torch {torch.__version__}, "
            f"{build}; no usable NVIDIA GPU or driver found). Use device=cpu, or run on a machine with an NVIDIA "
            f"GPU and a CUDA build of torch.")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device={device} requested but this machine has {torch.cuda.device_count()} CUDA device(s)")


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flatten_parameters(model: nn.Module) -> nn.Module:
    """Re-home the parameters as views into one contiguous buffer (same values, same shapes), so that
    `set_flat` and `get_flat` are one copy each instead of one per tensor, for every client of every
    round. Call it once the model is on its device; a later
    `.to()` that moves the parameters only sends those two back to their per-tensor path."""
    params = list(model.parameters())
    if params and all(p.dtype == torch.float32 and p.device == params[0].device for p in params):
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        offset = 0
        for p in params:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        model._flat_parameters = flat
    return model


def _flat_buffer(model: nn.Module) -> torch.Tensor | None:
    """The buffer of `flatten_parameters` if the parameters still live in it, else None."""
    flat = getattr(model, "_flat_parameters", None)
    if flat is None or next(model.parameters()).data_ptr() != flat.data_ptr():
        return None
    return flat


def get_flat(model: nn.Module) -> np.ndarray:
    """All parameters as one float32 vector (a copy), in `model.parameters()` order."""
    flat = _flat_buffer(model)
    if flat is not None:
        return flat.detach().cpu().numpy().copy()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().cpu().numpy().astype(np.float32)


def set_flat(model: nn.Module, flat: np.ndarray) -> None:
    """Copy `flat` into the parameters (a copy: training must never write into the caller's array)."""
    buffer = _flat_buffer(model)
    total = buffer.numel() if buffer is not None else num_params(model)
    if np.size(flat) != total:
        raise ValueError(f"flat vector has {np.size(flat)} values, the model {total} parameters")
    first = next(model.parameters())
    vec = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32)).to(first.device)  # one transfer
    with torch.no_grad():
        if buffer is not None:
            buffer.copy_(vec)
            return
        offset = 0
        for p in model.parameters():
            p.copy_(vec[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def param_table() -> list[tuple[str, dict[str, int]]]:
    """(model, {dataset: parameters}) for every conf/model/*.yaml on every dataset's input shape."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from fl.data import INPUT_SHAPES

    conf = Path(__file__).resolve().parent.parent / "conf" / "model"
    rows = []
    for name in MODELS:
        cfg = OmegaConf.load(conf / f"{name}.yaml")
        rows.append((name, {ds: num_params(build_model(cfg, shape, 10)) for ds, shape in INPUT_SHAPES.items()}))
    return rows


if __name__ == "__main__":
    from fl.data import INPUT_SHAPES

    print("| model | " + " | ".join(INPUT_SHAPES) + " |")
    print("|---|" + "---:|" * len(INPUT_SHAPES))
    for name, counts in param_table():
        print(f"| `{name}` | " + " | ".join(f"{counts[ds]:,}" for ds in INPUT_SHAPES) + " |")
