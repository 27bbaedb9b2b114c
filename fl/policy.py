"""Which compression runs where, decided once from the config (shared by the server and the workers)."""
from __future__ import annotations

import compression
import secagg
from compression.index_policy import IndexPolicy
from compression.topk import topk_count


def masks(cfg) -> bool:
    return bool(secagg.get(cfg.secagg.name).masks)


def shared_k(cfg, length: int) -> int:
    """Positions every client masks: ceil(ratio * length) with client compression, else all."""
    if cfg.compression.client and cfg.compression.name != "none":
        return topk_count(length, cfg.compression.ratio)
    return length


def make_index_policy(cfg, length: int) -> IndexPolicy | None:
    """The shared index set policy (masking only); None without masking."""
    if not masks(cfg):
        return None
    c = cfg.compression
    return IndexPolicy(c.index_policy, length, shared_k(cfg, length), cfg.seed, c.sketch_rows,
                       c.sketch_cols_per_k, c.prev_topk_random)


def broadcast_codec(cfg) -> compression.Codec:
    if cfg.compression.server and cfg.compression.name != "none":
        return compression.get(cfg.compression.name)(cfg.compression.ratio)
    return compression.get("none")()
