"""The run's plan: every decision the config implies, made once on the driver and handed to the workers.

Which codec runs on clients and in the broadcast, whether the round is masked, whether the codec is linear
(its table is masked), the shared k, the index policy, the fixed-point quantizers and the per-client
training settings. Nothing downstream re-derives any of it from the config.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from omegaconf import OmegaConf

import compression
import secagg
from compression.index_policy import IndexPolicy
from compression.topk import topk_count
from fl import seeds
from fl.config import field_bits
from fl.partitions import partition_args


@dataclass(frozen=True)
class Training:
    """Per-client local training, as plain values: read for every client, where an OmegaConf lookup costs."""
    seed: int
    device: str
    local_epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    prox_mu: float
    max_update_norm: float | None = None  # clip each client's update to this L2 norm (None: never)
    stragglers: float = 0.0                # the fraction of each round's cohort that stops early (fl.stragglers)
    num_clients: int = 0                   # with clients_per_round: the round's cohort (fl.seeds.cohort)
    clients_per_round: int = 0


@dataclass(frozen=True)
class Plan:
    length: int                                  # parameters in the flat model vector
    layer_sizes: tuple[int, ...]
    layer_shapes: tuple[tuple[int, ...], ...]    # each parameter tensor's shape (the `marginals` summary's matrices)
    model: SimpleNamespace                       # the model section (fl.models.build_model reads it)
    partitions: dict                             # fl.partitions.partition's arguments for the run's clients
    training: Training
    client_codec: compression.Codec              # the clients' codec ("none" without client compression)
    broadcast_codec: compression.Codec           # the server's codec for broadcasts after round 0
    error_feedback: bool                         # clients keep residuals (biased codec; not masked linear, not memory)
    residual_dtype: str
    masked: bool
    linear: compression.Codec | None             # under masking, a linear codec whose table is masked
    k: int                                       # positions every client masks (0: a linear codec's table)
    policy_args: tuple | None                    # IndexPolicy(*policy_args); None: no shared index set
    secagg: str
    threshold: int | None
    neighbours: int | None
    dropout: float
    clip: float
    sketch_clip: float
    max_weight: float
    max_clients: int                             # the cohort size the fixed-point bounds are sized for
    field_bits: int = 32                         # the masked vector's field Z_2^field_bits
    sketch_bits: int | None = None               # `fresh`: quantization bits of the masked sketch (None: quant_bits)
    linear_bits: int | None = None               # a linear codec's own quantization bits (None: quant_bits)
    linear_clip: float | None = None             # ... and the clip of its table's cells (None: sketch_clip)
    quant_bits: int | None = None                # fixed-point bits per client value (secagg.quant_bits; None: unmasked)
    server_lr: float = 1.0                       # the server's step (fl.server.ServerStep)
    server_momentum: float = 0.0
    memory: bool = False                         # fl.aggregation=memory: clients keep memories, not residuals
    drop_stragglers: bool = False                # fl.straggler_policy=drop: a round's stragglers miss its upload

    @classmethod
    def build(cls, cfg, layer_sizes, layer_shapes=None) -> Plan:
        """The plan of a validated config for a model with these parameter tensors (flat-vector order; without
        shapes each tensor is taken as 1-D)."""
        c, f, s = cfg.compression, cfg.fl, cfg.secagg
        layer_sizes = tuple(int(n) for n in layer_sizes)
        shapes = tuple(tuple(int(d) for d in shape) for shape in layer_shapes) if layer_shapes is not None else \
            tuple((n,) for n in layer_sizes)
        if tuple(math.prod(shape) for shape in shapes) != layer_sizes:
            raise ValueError(f"layer shapes {shapes} do not match layer sizes {layer_sizes}")
        length = sum(layer_sizes)
        compressing = c.client and c.name != "none"
        seed = int(cfg.seed)
        client_codec = _codec(c, seed, layer_sizes) if c.client else compression.get("none")()
        masked = bool(secagg.get(s.name).masks)
        linear = None
        if masked and compressing and getattr(client_codec, "linear", False):
            linear = _codec(c, seed)  # its table is masked whole: no per-layer layout
        memory = f.get("aggregation", "cohort") == "memory"  # clients keep memories in place of residuals
        k = 0 if linear is not None else topk_count(length, c.ratio) if compressing else length
        policy_args = None
        if masked and linear is None:
            policy_args = (str(c.index_policy), length, k, int(cfg.seed), int(c.sketch_rows),
                           float(c.sketch_cols_per_k), float(c.prev_topk_random), str(c.fresh_summary),
                           int(c.block_size), shapes)
        return cls(
            length=length, layer_sizes=layer_sizes, layer_shapes=shapes, model=model_section(cfg),
            partitions=partition_args(cfg),
            training=Training(int(cfg.seed), str(cfg.device), int(f.local_epochs), int(f.batch_size), float(f.lr),
                              float(f.momentum), float(f.weight_decay), float(f.prox_mu),
                              None if f.get("max_update_norm") is None else float(f.max_update_norm),
                              float(f.get("stragglers", 0.0)), int(f.num_clients), int(f.clients_per_round)),
            client_codec=client_codec,
            broadcast_codec=(_codec(c, seed, layer_sizes) if c.server and c.name != "none"
                             else compression.get("none")()),
            error_feedback=bool(c.error_feedback and c.client and client_codec.biased and linear is None
                                and not memory),
            residual_dtype=str(c.residual_dtype), masked=masked, linear=linear, k=k, policy_args=policy_args,
            secagg=str(s.name), threshold=s.threshold, neighbours=s.neighbours, dropout=float(s.dropout),
            clip=float(s.clip), sketch_clip=float(s.sketch_clip), max_weight=float(s.max_weight),
            max_clients=int(f.clients_per_round), field_bits=field_bits(cfg) if masked else 32,
            quant_bits=int(s.quant_bits) if masked else None,
            sketch_bits=c.sketch_quant_bits, linear_bits=getattr(linear, "bits", None),
            linear_clip=getattr(linear, "clip", None), server_lr=float(f.get("server_lr", 1.0)),
            server_momentum=float(f.get("server_momentum", 0.0)), memory=memory,
            drop_stragglers=f.get("straggler_policy", "keep") == "drop")

    def stragglers(self, round: int) -> frozenset[int]:
        """The round's stragglers (fl.stragglers), from the seed alone: the driver and every worker name the same."""
        t = self.training
        if not t.stragglers:
            return frozenset()
        return seeds.stragglers(t.seed, round, seeds.cohort(t.seed, round, t.num_clients, t.clients_per_round),
                                t.stragglers)

    def client_steps(self, cid: int, round: int, samples: int, stragglers: frozenset[int]) -> int:
        """The minibatch steps client `cid` trains in `round` (`stragglers`: the round's): its whole local work
        (fl.local_epochs passes of its batches), a kept straggler's drawn share of it, none for a dropped one."""
        t = self.training
        full = t.local_epochs * -(-samples // t.batch_size)
        if cid not in stragglers:
            return full
        return 0 if self.drop_stragglers else seeds.straggler_steps(t.seed, round, cid, full)

    def plain_dropouts(self, round: int, clients) -> frozenset[int]:
        """A plain round's injected dropouts (`secagg.dropout`) among `clients`: each vanishes before its one upload
        with that probability (neither trains nor sends), drawn from the seed a masked round's first step draws
        from, so the driver knows them before the round as the round does."""
        if self.dropout <= 0:
            return frozenset()
        rng = np.random.default_rng(np.random.SeedSequence([self.training.seed, round, 17]))
        return frozenset(c for c in sorted(clients) if rng.random() < self.dropout)

    def dropped_stragglers(self, round: int) -> frozenset[int]:
        """The round's stragglers where they miss the round (fl.straggler_policy=drop): they never upload their
        update (under masking, after they shared their keys, so the server unmasks without them)."""
        return self.stragglers(round) if self.drop_stragglers else frozenset()

    def index_policy(self) -> IndexPolicy | None:
        """A fresh index policy: the server's keeps state across rounds; a worker's only draws sketch hashes."""
        return IndexPolicy(*self.policy_args) if self.policy_args is not None else None

    def field_for(self, quant_bits: int) -> int:
        """The field width of a masked vector whose parts have quant_bits: secagg.bits (or its automatic width)
        for secagg.quant_bits, the narrowest that cannot wrap for another width (a low-bit linear codec's)."""
        if quant_bits == self.quant_bits:
            return self.field_bits
        return secagg.smallest_safe_bits(quant_bits, self.max_clients)

    def round_config(self, session: bytes, cohort, masked_length: int):
        """The mask protocol's public configuration of one round."""
        if len(cohort) > self.max_clients:  # the fixed-point bound holds for at most max_clients inputs
            raise ValueError(f"a cohort of {len(cohort)} exceeds the {self.max_clients} the field is sized for")
        return secagg.make_round(secagg.get(self.secagg), session, cohort, masked_length, self.threshold,
                                 self.neighbours)

    @property
    def masked_field_bits(self) -> int:
        """The width of the masked values' field (a low-bit linear codec's own)."""
        return self.field_for(self.linear_bits) if self.linear_bits is not None else self.field_bits

    @property
    def index_policy_name(self) -> str:
        """What the result rows call the way positions were chosen."""
        if self.policy_args is not None:
            return self.index_policy().name
        if self.linear is not None:
            if hasattr(self.linear, "hashes"):
                return "sketch-codec (server top-k)"
            return f"{self.linear.name}-codec (dense)"
        return "per-client" if self.client_codec.name != "none" else "dense"


def _codec(c, seed: int, layer_sizes: tuple[int, ...] | None = None) -> compression.Codec:
    """The configured codec with its options; with `compression.per_layer`, selection and scales per layer. A
    randomized codec's `seed` option defaults to the run's seed, so that seeds of a sweep also vary its randomness
    (a rotation's signs, a count sketch's hashes, rounding noise): one public value, the same for every client."""
    options = dict(c.options)
    if "seed" in inspect.signature(compression.get(c.name)).parameters:
        options.setdefault("seed", seed)
    if c.get("per_layer", False) and layer_sizes is not None:
        options["layout"] = list(layer_sizes)
    return compression.get(c.name)(c.ratio, **options)


def model_section(cfg) -> SimpleNamespace:
    """The model section as plain values (fl.models.build_model reads it; it travels to Ray workers)."""
    return SimpleNamespace(**OmegaConf.to_container(cfg.model))
