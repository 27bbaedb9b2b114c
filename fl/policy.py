"""Which compression runs where, decided once from the config (shared by the server and the workers)."""
from __future__ import annotations

import compression
import secagg
from compression.index_policy import IndexPolicy
from compression.topk import topk_count


def make_codec(cfg, layer_sizes: list[int] | None = None) -> compression.Codec:
    """The configured codec with its options (`compression.options`); with `compression.per_layer`,
    selection and scales per layer (the model's parameter tensors, in flat-vector order)."""
    options = dict(cfg.compression.options)
    if cfg.compression.get("per_layer", False) and layer_sizes is not None:
        options["layout"] = list(layer_sizes)
    return compression.get(cfg.compression.name)(cfg.compression.ratio, **options)


def linear_codec(cfg) -> compression.Codec | None:
    """The client codec when it is linear (count sketch): under masking its table itself is masked."""
    if cfg.compression.client and cfg.compression.name != "none":
        codec = make_codec(cfg)
        if getattr(codec, "linear", False):
            return codec
    return None


def masks(cfg) -> bool:
    return bool(secagg.get(cfg.secagg.name).masks)


def shared_k(cfg, length: int) -> int:
    """Positions every client masks: ceil(ratio * length) with client compression, else all."""
    if linear_codec(cfg) is not None:
        return 0  # no values at positions: the sketch table carries the update
    if cfg.compression.client and cfg.compression.name != "none":
        return topk_count(length, cfg.compression.ratio)
    return length


def make_index_policy(cfg, length: int) -> IndexPolicy | None:
    """The shared index set policy (masking only); None without masking."""
    if not masks(cfg) or linear_codec(cfg) is not None:
        return None
    c = cfg.compression
    return IndexPolicy(c.index_policy, length, shared_k(cfg, length), cfg.seed, c.sketch_rows,
                       c.sketch_cols_per_k, c.prev_topk_random)


def broadcast_codec(cfg, layer_sizes: list[int] | None = None) -> compression.Codec:
    if cfg.compression.server and cfg.compression.name != "none":
        return make_codec(cfg, layer_sizes)
    return compression.get("none")()
