"""Typed configuration: the schema Hydra composes into, and the checks that run before any work.

The dataclasses are registered with Hydra's ConfigStore as the schema of `conf/config.yaml`, so a
typo'd key fails at composition. `validate` adds the checks a schema cannot express (protocol
names, ratio range, fixed-point overflow) and runs before a single row is written.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

import compression
import secagg
from compression.index_policy import POLICIES as INDEX_POLICIES
from compression.index_policy import SUMMARIES
from fl import seeds
from fl.data import DATASETS, INPUT_SHAPES, check_files
from fl.partitions import PARTITIONS
from fl.errors import ConfigError
from fl.results import SHARED_INDEX_KEYS
from fl.rounds.layout import WEIGHT_BITS


@dataclass
class FLConfig:
    num_clients: int = 10
    clients_per_round: int = 10
    rounds: int = 20
    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 0.1
    momentum: float = 0.0           # local SGD momentum (buffers restart with each client's training)
    weight_decay: float = 0.0       # local SGD L2 weight decay
    prox_mu: float = 0.0            # FedProx: local loss + prox_mu / 2 * |w - global|^2 (0: FedAvg)
    stragglers: float = 0.0         # this fraction of each round's cohort trains 1..all its local steps (uniform)
    straggler_policy: str = "keep"  # keep: their partial work is aggregated (FedProx) | drop: they miss the round
    server_lr: float = 1.0          # the server's step on the mean update (1 with no momentum: FedAvg)
    server_momentum: float = 0.0    # FedAvgM: the server's momentum over rounds' mean updates
    aggregation: str = "cohort"     # cohort: the mean of this round's updates | memory: of every client's latest
    max_update_norm: Optional[float] = None  # clip each client's update to this L2 norm before it is encoded
    eval_every: int = 1
    eval_overlap: bool = True       # evaluate round r in round r+1's training call (fl.evaluation): same figures


@dataclass
class DatasetConfig:
    name: str = "digits"            # digits | mnist | fashion_mnist | cifar10
    partition: str = "iid"          # iid | dirichlet | shards | labels
    alpha: float = 0.5              # Dirichlet concentration (smaller = more skewed)
    shards_per_client: int = 2      # shards: label-sorted shards per client (about that many classes each)
    labels_per_client: int = 2      # labels: exactly this many classes per client (NIID-Bench's #C=k)
    test_fraction: float = 0.2      # digits only; the others use their own test split
    root: str = "data"              # mnist/fashion_mnist/cifar10 files live here (torchvision's layout)
    system_dirs: list[str] = field(default_factory=list)  # then here, flat (Debian: /usr/share/datasets/<name>)
    cache: Optional[str] = None     # unpacked copies go here; null: $XDG_CACHE_HOME/fedsqueeze or ~/.cache/fedsqueeze
    download: bool = False          # download into root when missing (needs a network)
    max_train: Optional[int] = None  # null: all; else a seeded subsample (quick runs)
    max_test: Optional[int] = None


@dataclass
class ModelConfig:
    name: str = "mlp_large"
    hidden: list[int] = field(default_factory=lambda: [1024, 420])  # dense widths (after the convolutions)
    channels: list[int] = field(default_factory=list)  # convolution / ResNet stage widths (CNNs only)
    norm: str = "group"             # resnet_small: group (GroupNorm) | batch (BatchNorm, batch statistics)
    padding: str = "same"           # lenet, cnn_wide: 5x5 convolutions keep the size (same) or not (valid)


@dataclass
class CompressionConfig:
    name: str = "topk"
    ratio: float = 0.5
    client: bool = True
    server: bool = True
    error_feedback: bool = True
    index_policy: str = "fresh"     # fresh | sketch | randk | prev_topk (only with masking and client compression)
    sketch_rows: int = 1
    sketch_cols_per_k: float = 2.0  # sketch columns as a multiple of k
    prev_topk_random: float = 0.1   # prev_topk: share of k drawn at random
    # fresh: what clients mask first: marginals (row and column energies) | blocks | sketch | exact | energy
    # (bounds, dense uploads: the update itself, its squares)
    fresh_summary: str = "marginals"
    block_size: int = 64            # fresh with blocks: entries per block
    sketch_quant_bits: Optional[int] = None  # fresh: bits of the masked summary's cells (null: secagg.quant_bits)
    residual_dtype: str = "float32"  # float32 | float16: storage of error-feedback residuals between rounds
    options: dict[str, Any] = field(default_factory=dict)  # codec options, e.g. {levels: 8} for qsgd
    per_layer: bool = False         # select / scale per layer (topk, ternary, qsgd, int8) instead of globally


@dataclass
class SecAggConfig:
    name: str = "dh"
    clip: float = 0.5               # fixed-point clip of the (weighted) update values
    sketch_clip: float = 4.0        # clip of the count-sketch cells
    max_weight: float = 8.0         # FedAvg weight (local samples / mean samples) is capped here
    threshold: Optional[int] = None  # t of t-of-n Shamir; null: a strict majority (of each neighbourhood)
    neighbours: Optional[int] = None  # secaggplus graph degree; null: 2*ceil(log2 n), even, capped at n-1
    dropout: float = 0.0            # per-step probability that a client vanishes (injected; seeded; also unmasked)
    quant_bits: int = 16            # fixed-point bits of each client's masked value (signed)
    bits: Optional[int] = None      # the field Z_2^bits of the masked vector; null: the smallest that cannot wrap


@dataclass
class ResultsConfig:
    dir: str = "results/runs"
    save_model: bool = False  # write the final global weights to model.npy beside the rows


@dataclass
class RayConfig:
    address: Optional[str] = None   # null: start a local Ray; "auto": join a running cluster
    num_workers: Optional[int] = None  # null: one per CPU core
    num_cpus_per_worker: float = 1.0
    num_gpus_per_worker: float = 0.0
    call_timeout_s: Optional[float] = None  # a worker silent this long in a round is killed as hung; null: wait


@dataclass
class Config:
    seed: int = 0
    backend: str = "ray"            # ray | inline
    device: str = "cpu"
    fl: FLConfig = field(default_factory=FLConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    secagg: SecAggConfig = field(default_factory=SecAggConfig)
    results: ResultsConfig = field(default_factory=ResultsConfig)
    ray: RayConfig = field(default_factory=RayConfig)


def register_schema() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="fedsqueeze_schema", node=Config)


# The true/false keys. OmegaConf reads any integer given one as a bool (compression.client=2 is true, -1 too), so
# the values given are checked before they reach the schema (check_switches).
def _switches(schema, prefix: str = "") -> set[str]:
    """Every true/false key of the schema, sections included: a switch added anywhere is checked."""
    found = set()
    for f in fields(schema):
        if f.type == "bool":
            found.add(prefix + f.name)
        elif f.default_factory is not MISSING and is_dataclass(f.default_factory):
            found |= _switches(f.default_factory, f"{prefix}{f.name}.")
    return found


SWITCHES = _switches(Config)


def check_switch(key: str, value: Any) -> None:
    """Refuses a number other than 0 and 1 (or its string) given to a switch, which OmegaConf would read as true."""
    if key not in SWITCHES or isinstance(value, bool):
        return
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # words, nan, inf: OmegaConf's own check (yes, on: true)
        return
    if number not in (0, 1):
        raise ConfigError(f"{key} is a switch: true or false, got {value!r}")


def check_switches(overrides: list[str]) -> None:
    """check_switch for each `key=value` of a command line (Hydra's override syntax), and check_group_name."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for o in OverridesParser.create().parse_overrides(list(overrides)):
        if not o.is_delete():
            check_switch(o.key_or_group, o.value())
            check_group_name(o.key_or_group, o.value())


def check_group_name(key: str, value: Any) -> None:
    """Refuses `model.name=` and `dataset.name=`: they rename the chosen option and keep its keys (mlp_large's widths
    under the name mlp_small, digits' folders for mnist), where `model=` and `dataset=` choose the option whole."""
    if key in ("model.name", "dataset.name"):
        group = key.split(".")[0]
        raise ConfigError(f"{key}={value}: choose it with {group}={value} ({key} renames the chosen {group} and "
                          "keeps its other keys)")


def _check_switches_in(tree) -> None:
    """check_switch for each switch a config-shaped dict sets (a hand-built or loaded config's own values)."""
    for key in SWITCHES if isinstance(tree, dict) else ():
        *sections, name = key.split(".")
        node = functools.reduce(lambda d, k: d.get(k) if isinstance(d, dict) else None, sections, tree)
        if isinstance(node, dict) and name in node:
            check_switch(key, node[name])


def check_preset_switches(choices: dict, config_dirs: list[str], config_name: str = "config") -> None:
    """_check_switches_in for the YAML files a composed config was made of (the primary config and each chosen
    group option, `choices` as Hydra records them, found under `config_dirs`), each placed at its package: the
    schema reads `client: 2` in a preset as true, as it does on the command line. Read as written: an
    interpolation is left to the schema."""
    files = [("", f"{config_name}.yaml")] + [(group, f"{group}/{option}.yaml") for group, option in choices.items()
                                             if isinstance(option, str) and not group.startswith("hydra")]
    for group, name in files:
        path = next((Path(d) / name for d in config_dirs if (Path(d) / name).is_file()), None)
        if path is None:
            continue
        text = path.read_text()
        header = re.search(r"^#\s*@package\s+(\S+)", text, re.M)
        package = header.group(1) if header else "_group_"
        package = {"_group_": group.replace("/", "."), "_global_": ""}.get(package, package)
        tree = OmegaConf.to_container(OmegaConf.create(text or "{}"), resolve=False)
        for section in reversed(package.split(".") if package else []):
            tree = {section: tree}
        try:
            _check_switches_in(tree)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None


def check_composed_switches(runtime) -> None:
    """check_preset_switches for a composed config, from its Hydra runtime (`hydra.runtime`): the chosen group
    options and the config folders read from disk."""
    check_preset_switches(runtime.choices, [s.path for s in runtime.config_sources if s.schema == "file"])


MASKABLE = ("topk", "randk")  # sparsifiers that masking turns into a shared index set
MODELS = ("mlp_small", "mlp_large", "lenet", "cnn_wide", "resnet_small")  # = fl.models.MODELS, without importing torch
CONV_MODELS = ("lenet", "cnn_wide")  # read model.padding (fl.models.convnet)
NORM_MODELS = ("resnet_small",)      # read model.norm (fl.models.resnet)


def missing_linear_methods(codec) -> list[str]:
    """What masking asks of a linear codec and `codec` lacks: its table (`table_size`, `masked_table`) and a way
    back from the cohort's mean table, `from_table`, or for a count sketch (`hashes`) the server's error feedback's
    `hashes` and `k_for` (compression.countsketch.SketchAccumulator)."""
    back = ("hashes", "k_for") if hasattr(codec, "hashes") else ("from_table",)
    return [m for m in ("table_size", "masked_table", *back) if not callable(getattr(codec, m, None))]


AGGREGATIONS = ("cohort", "memory")
STRAGGLER_POLICIES = ("keep", "drop")  # fl.straggler_policy
RAY_ADDRESS = re.compile(r"[\w.\-\[\]:]+:\d+|[a-z][\w+.\-]*://.+")  # host:port (IPv6 in brackets) or scheme://...


def _check_aggregation(c) -> None:
    """`memory` keeps, on each client and in one sum on the server, what the server holds of the client's update;
    that sum must equal the clients' memories, so each client must know exactly what the server added."""
    f = c.fl
    if f.aggregation not in AGGREGATIONS:
        raise ConfigError(f"unknown fl.aggregation {f.aggregation!r}; available: {', '.join(AGGREGATIONS)}")
    if f.aggregation != "memory":
        return
    if c.compression.residual_dtype != "float32":
        raise ConfigError("fl.aggregation=memory keeps each client's memory in compression.residual_dtype, and the "
                          "server's sum of memories must equal them: float16 rounding would set them apart; use "
                          "compression.residual_dtype=float32")


def _has_layers(codec: str) -> bool:
    """Whether the codec takes a per-layer layout (compression.per_layer)."""
    return "layout" in inspect.signature(compression.get(codec)).parameters


def validate(cfg: DictConfig | Config) -> DictConfig:
    """Refuse a configuration before any work: returns the typed config with canonical protocol names."""
    c = _typed(cfg)
    _check_names(c)
    _check_run(c)
    _check_dataset(c)
    _check_model(c)
    _check_runtime(c)
    _check_fl(c)
    _check_secagg(c, _check_compression(c))
    return canonical_settings(c)


def _typed(cfg: DictConfig | Config) -> DictConfig:
    """The config merged into the schema: unknown keys and wrong types refused, switches given as themselves."""
    schema = OmegaConf.structured(Config)
    OmegaConf.set_struct(schema, True)
    OmegaConf.set_struct(schema.compression.options, False)  # codec options: checked by the codec itself
    try:  # unknown keys (even ones forced in with `+key=`) and wrong types raise here
        # a Config as a dict (merged as a dataclass, a wrong field was named without its section: 'clip')
        plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else \
            asdict(cfg) if is_dataclass(cfg) else cfg
        typed = OmegaConf.merge(schema, plain)
    except Exception as err:  # OmegaConf names the key on a later line, dropped here: put it first
        key, first = getattr(err, "full_key", ""), str(err).splitlines()[0]
        raise ConfigError(f"{key}: {first}" if key else first) from None
    _check_switches_in(plain)  # a Config's fields hold what they were given
    if isinstance(cfg, DictConfig):
        _check_interpolated_switches(cfg)
    return typed


def _check_interpolated_switches(cfg: DictConfig) -> None:
    """check_switch for each switch set by an interpolation (`${oc.env:EF}`, `${fl.eval_every}`), at the value it
    names: resolved in the typed config it would already read as true. One that cannot resolve here is left to
    the schema."""
    untyped = None
    for key in sorted(SWITCHES):
        parent, _, name = key.rpartition(".")
        node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
        if not isinstance(node, DictConfig) or name not in node or not OmegaConf.is_interpolation(node, name):
            continue
        untyped = untyped if untyped is not None else OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
        try:
            value = OmegaConf.select(untyped, key, throw_on_resolution_failure=True)
        except Exception:  # e.g. Hydra's own resolvers outside a Hydra run
            continue
        check_switch(key, value)


def _check_names(c) -> None:
    """Protocol names (made canonical here) and the compression ratio."""
    try:
        c.compression.name = compression.canonical(c.compression.name)
        c.secagg.name = secagg.canonical(c.secagg.name)
    except (compression.UnknownProtocolError, secagg.UnknownProtocolError) as err:
        raise ConfigError(str(err)) from None
    r = c.compression.ratio
    if not (isinstance(r, (int, float)) and math.isfinite(r) and 0 < r <= 1):
        raise ConfigError(f"compression.ratio must be in (0, 1], got {r}")


def _check_run(c) -> None:
    """Where the run executes and where its rows go."""
    if c.backend not in ("ray", "inline"):
        raise ConfigError(f"backend must be 'ray' or 'inline', got {c.backend!r}")
    if c.backend == "ray" and compression.get(c.compression.name).__module__ == "__main__":  # Ray ships such a class
        # by value: its register() never runs in a worker
        raise ConfigError(f"codec {c.compression.name!r} is defined in __main__ (a notebook or a script), which Ray "
                          "workers do not import, so they would not know it: put it in a file in compression/ "
                          "(docs/adding_a_codec.md), or run with backend=inline")
    if not 0 <= c.seed < 2**32:  # numpy's and torch's seeds
        raise ConfigError(f"seed must be in [0, 2**32), got {c.seed}")
    if not c.results.dir.strip():  # '' would scatter run folders over the working directory
        raise ConfigError("results.dir is empty: name a folder (the default is results/runs; '.' for here)")
    existing = next((p for p in (Path(c.results.dir), *Path(c.results.dir).parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():  # the folder, or a folder it would be made in, is a file
        raise ConfigError(f"results.dir={c.results.dir}: {existing} is a file: name a folder")
    paths = {"results.dir": c.results.dir} | ({"dataset.root": c.dataset.root} if c.dataset.name != "digits" else {})
    for key, path in paths.items():  # nothing expands '~' (fl.run_server(results={'dir': '~/x'}), a quoted override)
        if path.startswith("~"):
            raise ConfigError(f"{key}={path} is not expanded (it names a folder '~' in the working directory): "
                              "write the path out, e.g. $HOME/...")


def _check_dataset(c) -> None:
    """The dataset, its split and partition, and (unless downloaded) its files."""
    if not 0 < c.dataset.test_fraction < 1:
        raise ConfigError(f"dataset.test_fraction must be in (0, 1), got {c.dataset.test_fraction}")
    if c.dataset.name not in DATASETS:
        raise ConfigError(f"unknown dataset {c.dataset.name!r}; available: {', '.join(DATASETS)}")
    if c.dataset.partition not in PARTITIONS:
        raise ConfigError(
            f"dataset.partition must be one of {', '.join(PARTITIONS)}; got {c.dataset.partition!r}")
    if c.dataset.partition == "dirichlet" and not 0 < c.dataset.alpha < math.inf:
        raise ConfigError(f"dataset.alpha must be > 0 and finite, got {c.dataset.alpha}")
    if c.dataset.partition == "shards" and c.dataset.shards_per_client < 1:
        raise ConfigError(f"dataset.shards_per_client must be >= 1, got {c.dataset.shards_per_client}")
    if c.dataset.partition == "labels":
        if not 1 <= c.dataset.labels_per_client <= 10:  # every dataset here has 10 classes
            raise ConfigError(f"dataset.labels_per_client must be in 1..10, got {c.dataset.labels_per_client}")
        if c.fl.num_clients < 10:
            raise ConfigError(f"dataset.partition=labels needs at least 10 clients (one per class), "
                              f"got fl.num_clients={c.fl.num_clients}")
    for key in ("max_train", "max_test"):
        if getattr(c.dataset, key) is not None and getattr(c.dataset, key) < 1:
            raise ConfigError(f"dataset.{key} must be >= 1 or null (all), got {getattr(c.dataset, key)}")
    if not c.dataset.download:  # missing files are refused here, in one line (DatasetNotFoundError is a ConfigError)
        check_files(c.dataset.name, c.dataset.root, c.dataset.system_dirs)


def _check_model(c) -> None:
    """The model and the shapes its stages need from the dataset."""
    if c.model.name not in MODELS:
        raise ConfigError(f"unknown model {c.model.name!r}; available: {', '.join(MODELS)}")
    if any(w < 1 for w in c.model.hidden) or any(w < 1 for w in c.model.channels):
        raise ConfigError(f"model.hidden and model.channels widths must be >= 1, got {list(c.model.hidden)} and "
                          f"{list(c.model.channels)}")
    if not c.model.name.startswith("mlp") and not c.model.channels:
        raise ConfigError(f"model {c.model.name!r} needs model.channels (its convolution stage widths), got []")
    if c.model.padding not in ("same", "valid"):
        raise ConfigError(f"model.padding must be 'same' or 'valid', got {c.model.padding!r}")
    if c.model.norm not in ("group", "batch"):
        raise ConfigError(f"model.norm must be 'group' or 'batch', got {c.model.norm!r}")
    check_feature_maps(c.model, c.dataset.name)


def _check_runtime(c) -> None:
    """The device and the Ray workers' resources."""
    if c.device != "cpu":  # any other device is checked with torch, slow to import
        from fl.models import check_device

        try:
            check_device(c.device)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if c.ray.address not in (None, "", "auto") and not RAY_ADDRESS.fullmatch(str(c.ray.address)):
        raise ConfigError(f"ray.address must be null (start a local Ray), auto (join the cluster this machine is in) "
                          f"or host:port (ray://host:port for Ray Client, or another client's scheme://), got "
                          f"{c.ray.address!r}")
    if c.ray.num_workers is not None and c.ray.num_workers < 1:
        raise ConfigError(f"ray.num_workers must be >= 1 or null (one per CPU core), got {c.ray.num_workers}")
    if not 0 < c.ray.num_cpus_per_worker < math.inf or not 0 <= c.ray.num_gpus_per_worker < math.inf:
        raise ConfigError(f"need 0 < ray.num_cpus_per_worker and 0 <= ray.num_gpus_per_worker, both finite, got "
                          f"{c.ray.num_cpus_per_worker} and {c.ray.num_gpus_per_worker}")
    for key in ("num_cpus_per_worker", "num_gpus_per_worker"):  # Ray counts resources in units of 1e-4
        if 0 < c.ray[key] < 1e-4:
            raise ConfigError(f"ray.{key}={c.ray[key]} is below 0.0001, the smallest share Ray takes")
    if c.ray.call_timeout_s is not None and not 0 < c.ray.call_timeout_s < math.inf:
        raise ConfigError(f"ray.call_timeout_s must be a positive number of seconds or null (wait for ever), got "
                          f"{c.ray.call_timeout_s}")
    if c.device.startswith("cuda") and c.backend == "ray" and not c.ray.num_gpus_per_worker > 0:
        raise ConfigError("device=cuda with backend=ray needs ray.num_gpus_per_worker > 0 (e.g. 0.25: four workers "
                          "share one GPU); Ray hides the GPUs from actors that reserve none")


def _check_fl(c) -> None:
    """The rounds: cohort, local training, the server's step and aggregation."""
    f = c.fl
    if f.num_clients < 1 or not 1 <= f.clients_per_round <= f.num_clients:
        raise ConfigError(
            f"need 1 <= fl.clients_per_round <= fl.num_clients, got {f.clients_per_round} and {f.num_clients}")
    for key in ("rounds", "local_epochs", "batch_size", "eval_every"):
        if getattr(f, key) < 1:
            raise ConfigError(f"fl.{key} must be >= 1, got {getattr(f, key)}")
    if not 0 < f.lr < math.inf:
        raise ConfigError(f"fl.lr must be > 0 and finite, got {f.lr}")
    if not 0 <= f.momentum < 1 or not 0 <= f.weight_decay < math.inf:
        raise ConfigError(f"need 0 <= fl.momentum < 1 and 0 <= fl.weight_decay (finite), got {f.momentum} and "
                          f"{f.weight_decay}")
    if not 0 <= f.prox_mu < math.inf:
        raise ConfigError(f"fl.prox_mu (FedProx's proximal weight) must be >= 0 and finite, got {f.prox_mu}")
    if not 0 <= f.stragglers <= 1:
        raise ConfigError(f"fl.stragglers (the fraction of each round's cohort that does partial local work) must be "
                          f"in [0, 1], got {f.stragglers}")
    if f.straggler_policy not in STRAGGLER_POLICIES:
        raise ConfigError(f"unknown fl.straggler_policy {f.straggler_policy!r}; available: "
                          f"{', '.join(STRAGGLER_POLICIES)}")
    if f.straggler_policy == "drop" and seeds.straggler_count(f.stragglers, f.clients_per_round) >= f.clients_per_round:
        raise ConfigError(f"fl.stragglers={f.stragglers} of a {f.clients_per_round}-client cohort is every client, "
                          f"and fl.straggler_policy=drop drops them all: no round would train anything. Need fewer "
                          f"than {(f.clients_per_round - 0.5) / f.clients_per_round:g}, or straggler_policy=keep")
    if not 0 < f.server_lr < math.inf or not 0 <= f.server_momentum < 1:
        raise ConfigError(f"need 0 < fl.server_lr (finite) and 0 <= fl.server_momentum < 1, got {f.server_lr} and "
                          f"{f.server_momentum}")
    _check_aggregation(c)
    bound = f.get("max_update_norm")
    if bound is not None and not 0 < bound < math.inf:
        raise ConfigError(f"fl.max_update_norm must be > 0 and finite (or null: no clipping), got {bound}")


def _check_compression(c):
    """The codec and its options, alone and beside masking and aggregation; returns the codec
    (built with the run's ratio and options)."""
    f = c.fl
    if c.compression.index_policy not in INDEX_POLICIES:
        raise ConfigError(
            f"unknown compression.index_policy {c.compression.index_policy!r}; available: {', '.join(INDEX_POLICIES)}")
    per_layer = c.compression.per_layer and c.compression.name != "none"
    if per_layer and not _has_layers(c.compression.name):
        layered = [n for n in compression.names() if _has_layers(n)]
        raise ConfigError(f"compression.per_layer=true: {c.compression.name!r} has no per-layer form; "
                          f"{', '.join(layered)} have (selection or scales per layer)")
    if "layout" in c.compression.options:  # the model's layer sizes (a wrong one fails the first upload)
        raise ConfigError("compression.options.layout is the model's layer sizes, which compression.per_layer=true "
                          "gives the codec; leave it out")
    try:  # the codec accepts its options (a typo'd option name fails here)
        extra = {"layout": [1]} if per_layer else {}
        codec = compression.get(c.compression.name)(c.compression.ratio, **c.compression.options, **extra)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"compression {c.compression.name!r}: {err}") from None
    if "seed" in c.compression.options and c.compression.options.seed is None:  # OS entropy: for codecs used alone
        raise ConfigError(f"compression.options.seed=null draws the {c.compression.name!r} codec's randomness from "
                          "the OS: a run would not repeat under its config hash (and a rerun is skipped as finished); "
                          "give a non-negative integer")
    uploads, linear = _client_codec(c, codec)
    if f.aggregation == "memory" and linear and secagg.get(c.secagg.name).masks:
        raise ConfigError(f"fl.aggregation=memory cannot run with the linear codec {c.compression.name!r} under "
                          "masking: the server decodes the summed table, and no client knows its own share of what "
                          f"was decoded; use {', '.join(MASKABLE)} (a shared index set) or secagg=none")
    if secagg.get(c.secagg.name).masks and uploads and c.compression.name not in MASKABLE and not linear:
        raise ConfigError(
            f"compression {c.compression.name!r} cannot be combined with masking: pairwise masks cancel only "
            f"position by position; use {', '.join(MASKABLE)} (a shared index set) or a linear codec "
            f"({', '.join(n for n in compression.names() if getattr(compression.get(n), 'linear', False))}), or "
            "compression.client=false")
    if secagg.get(c.secagg.name).masks and uploads and c.compression.name in MASKABLE and not codec.biased:
        raise ConfigError(
            f"compression {c.compression.name!r} with unbiased values cannot be masked: masked values travel at the "
            "shared index set as they are (no n/k scaling) and clients keep their residuals, so the run would be the "
            "biased codec without error feedback under another name; leave the option out, or use secagg=none")
    # The broadcast sends the codec of (global - what clients hold): an entry drawn comes back scaled by n/k, so the
    # part left multiplies by (1 - n/k), and in mean square the difference grows by (1 - ratio) / ratio a round.
    if c.compression.server and getattr(codec, "unbiased", False) and c.compression.ratio <= 0.5:
        raise ConfigError(
            f"compression {c.compression.name!r} with unbiased values on the broadcast (compression.server=true) at "
            f"ratio {c.compression.ratio} <= 0.5 diverges: the server keeps what it has not sent, and each entry sent "
            "is scaled by n/k, so what clients hold drifts from the model by (1 - ratio) / ratio more each round; "
            "use compression.server=false, leave the option out, or a ratio above 0.5")
    # A client's memory is kept as the broadcast's view is: memory += codec(update - memory), the same growth.
    if f.aggregation == "memory" and uploads and getattr(codec, "unbiased", False) and c.compression.ratio <= 0.5:
        raise ConfigError(
            f"fl.aggregation=memory with compression {c.compression.name!r} with unbiased values at ratio "
            f"{c.compression.ratio} <= 0.5 diverges: each client's memory takes the codec of (update - memory), and "
            "each entry sent is scaled by n/k, so what the server holds of its update drifts from it by "
            "(1 - ratio) / ratio more each round; leave the option out, or use a ratio above 0.5")
    if secagg.get(c.secagg.name).masks and linear and (missing := missing_linear_methods(codec)):
        raise ConfigError(f"compression {c.compression.name!r} is linear (masked as a table) but has no "
                          f"{', '.join(missing)}: see docs/adding_a_codec.md, 'Under masking'")
    if c.compression.residual_dtype not in ("float32", "float16"):
        raise ConfigError(f"compression.residual_dtype must be float32 or float16, got "
                          f"{c.compression.residual_dtype!r}")
    if c.compression.sketch_rows < 1 or not 0 < c.compression.sketch_cols_per_k < math.inf:
        raise ConfigError(f"compression.sketch_rows must be >= 1 and sketch_cols_per_k > 0 and finite, got "
                          f"{c.compression.sketch_rows} and {c.compression.sketch_cols_per_k}")
    if not 0 <= c.compression.prev_topk_random <= 1:
        raise ConfigError(f"compression.prev_topk_random (a share of k) must be in [0, 1], got "
                          f"{c.compression.prev_topk_random}")
    if c.compression.fresh_summary not in SUMMARIES or c.compression.block_size < 1:
        raise ConfigError(f"compression.fresh_summary must be one of {', '.join(SUMMARIES)} and block_size >= 1, got "
                          f"{c.compression.fresh_summary!r} and {c.compression.block_size}")
    sq = c.compression.sketch_quant_bits
    if sq is not None and not 2 <= sq <= secagg.MAX_FIELD_BITS - 1:
        raise ConfigError(f"compression.sketch_quant_bits must be in [2, {secagg.MAX_FIELD_BITS - 1}] or null, "
                          f"got {sq}")
    return codec


def _client_codec(c, codec) -> tuple[bool, bool]:
    """Whether clients compress their updates, and whether with a linear codec (masked as a table)."""
    uploads = c.compression.client and c.compression.name != "none"
    return uploads, bool(uploads and getattr(codec, "linear", False))


def _check_secagg(c, codec) -> None:
    """Masking: the cohort, the field widths and scales the masked parts need, threshold and degree."""
    f = c.fl
    uploads, linear = _client_codec(c, codec)
    sq = c.compression.sketch_quant_bits
    if not 0 <= c.secagg.dropout < 1:  # every protocol: a plain round's clients vanish before their upload
        raise ConfigError(f"secagg.dropout must be in [0, 1), got {c.secagg.dropout}")
    if secagg.get(c.secagg.name).masks:
        if f.clients_per_round < 2:
            raise ConfigError("secure aggregation needs fl.clients_per_round >= 2 (one client's sum is its input)")
        # widths of their own (fl.plan.Plan.field_for): the `fresh` summary's cells, a linear codec's table
        fresh = uploads and not linear and c.compression.index_policy == "fresh"
        own = {"compression.sketch_quant_bits": sq if fresh else None,
               f"compression {c.compression.name!r}'s bits": getattr(codec, "bits", None) if linear else None}
        for key, bits in own.items():
            safe = secagg.smallest_safe_bits(bits, f.clients_per_round) if bits is not None else 0
            if safe > secagg.MAX_FIELD_BITS:
                raise ConfigError(f"{f.clients_per_round} clients of {bits}-bit values ({key}) need a {safe}-bit "
                                  f"field, over {secagg.MAX_FIELD_BITS}; lower {key}")
        for key in ("clip", "sketch_clip", "max_weight"):
            if not 0 < getattr(c.secagg, key) < math.inf:
                raise ConfigError(f"secagg.{key} must be > 0 and finite, got {getattr(c.secagg, key)}")
        if c.secagg.max_weight < 1:  # the heaviest client holds at least the mean: check_weights refuses every split
            raise ConfigError(f"secagg.max_weight must be at least 1 (a client of mean size weighs 1, and the "
                              f"heaviest client at least that), got {c.secagg.max_weight}")
        if c.secagg.max_weight > 2**WEIGHT_BITS - 1:  # a client of mean size (weight 1) under one step of precision
            raise ConfigError(f"secagg.max_weight must be at most {2**WEIGHT_BITS - 1} (the weight travels in "
                              f"{WEIGHT_BITS} bits of steps max_weight / {2**WEIGHT_BITS - 1}, so a client of mean "
                              f"size would be under one step: rounded at random to 0 or a step), got "
                              f"{c.secagg.max_weight}")
        try:  # the field sum of clients_per_round inputs must not wrap: checked here, not mid-run
            secagg.FixedPointQuantizer(c.secagg.clip, f.clients_per_round, field_bits(c), c.secagg.quant_bits)
        except ValueError as err:
            raise ConfigError(f"secagg: {err}") from None
        # the other masked parts' scales (summary and sketch cells, a linear codec's table), built mid-round
        for key, clip, bits in (("secagg.sketch_clip", c.secagg.sketch_clip, max(sq or 0, c.secagg.quant_bits)),
                                ("compression.options.clip", getattr(codec, "clip", None) if linear else None,
                                 getattr(codec, "bits", None))):
            try:
                if clip is not None:
                    secagg.FixedPointQuantizer(clip, 1, secagg.MAX_FIELD_BITS, bits)
            except ValueError as err:
                raise ConfigError(f"{key}: {err}") from None
        try:  # threshold and graph degree (the protocol's names for these keys) for this cohort size
            secagg.make_round(c.secagg.name, bytes(32), range(f.clients_per_round), 1, c.secagg.threshold,
                              c.secagg.neighbours)
        except ValueError as err:
            keys = ", ".join(f"secagg.{k}={'null' if v is None else v}" for k, v in
                             (("neighbours", c.secagg.neighbours), ("threshold", c.secagg.threshold)))
            raise ConfigError(f"{keys} with {f.clients_per_round} clients a round: {err}") from None


def check_weights(c, samples, total: int) -> None:
    """Refuses a split that masking would weigh otherwise than FedAvg: a masked client's weight (local samples /
    mean samples) is capped at secagg.max_weight, so a heavier client would count for less than its samples."""
    if not secagg.get(c.secagg.name).masks:
        return
    samples = [int(n) for n in samples]
    heaviest = max(range(len(samples)), key=samples.__getitem__)
    weight = samples[heaviest] / (total / c.fl.num_clients)  # the mean as the workers compute it
    if weight > c.secagg.max_weight:
        raise ConfigError(f"client {heaviest} holds {samples[heaviest]} samples, {weight:.2f} times the mean: "
                          f"masked, its FedAvg weight would be capped at secagg.max_weight={c.secagg.max_weight:g}; "
                          f"set secagg.max_weight >= {math.ceil(weight * 100) / 100:g}")


def check_feature_maps(model, dataset: str) -> None:
    """Refuse, before any work, convolution stages the dataset's images are too small for (torch would fail
    building the model): a 5x5 `valid` convolution on a map under 5 pixels; and a resnet_small stage that
    reaches 1x1 with GroupNorm groups of one channel (gcd(32, width) = width), whose every value normalizes to 0,
    so the stage outputs its bias whatever the input. The sizes follow fl.models (digits: one 8x8 channel)."""
    if model.name.startswith("mlp") or dataset not in INPUT_SHAPES:
        return
    shape = INPUT_SHAPES[dataset]
    size = math.isqrt(shape[0]) if len(shape) == 1 else shape[-1]
    for stage, width in enumerate(int(w) for w in model.channels):
        if model.name != "resnet_small":  # lenet, cnn_wide
            if model.padding == "valid" and size < 5:
                raise ConfigError(f"model.channels={list(model.channels)} with model.padding=valid: stage {stage + 1} "
                                  f"gets {size}x{size} maps of {dataset}, under its 5x5 kernel; use fewer stages or "
                                  "model.padding=same")
            size = -(-(size - (4 if model.padding == "valid" else 0)) // 2)  # the convolution, then 2x2 pooling
        else:
            size = size if stage == 0 else -(-size // 2)  # stride 2 from the second stage on
            if model.norm == "group" and size == 1 and math.gcd(32, width) == width:
                raise ConfigError(f"model.channels={list(model.channels)}: resnet_small's stage {stage + 1} is 1x1 on "
                                  f"{dataset} and GroupNorm puts each of its {width} channels in a group of its own, "
                                  "so it outputs its bias whatever the input; use a width 32 does not divide there, "
                                  "or model.norm=batch")


def field_bits(c) -> int:
    """secagg.bits, or (null) the narrowest field in which clients_per_round values of quant_bits cannot wrap."""
    q = c.secagg.quant_bits
    if not 2 <= q <= secagg.MAX_FIELD_BITS - 1:
        raise ConfigError(f"secagg.quant_bits must be in [2, {secagg.MAX_FIELD_BITS - 1}], got {q}")
    if c.secagg.bits is not None:
        return int(c.secagg.bits)
    safe = secagg.smallest_safe_bits(c.secagg.quant_bits, c.fl.clients_per_round)
    if safe > secagg.MAX_FIELD_BITS:
        raise ConfigError(f"{c.fl.clients_per_round} clients of {c.secagg.quant_bits}-bit values need a "
                          f"{safe}-bit field, over {secagg.MAX_FIELD_BITS}; lower secagg.quant_bits")
    return safe


# Sparsifiers that keep every entry at ratio 1.0: that is no compression, and is recorded as such.
_LOSSLESS_AT_ONE = ("topk", "randk")


def canonical_settings(c: DictConfig) -> DictConfig:
    """One spelling per experiment, so equal settings share a config hash and a sweep never runs a
    cell twice: ratio 1.0 of a sparsifier is `compression=none`; switches that cannot act (codec
    options without a codec, index policies and fixed point without masking, error feedback where no client
    keeps a residual (an unbiased codec, a linear codec under masking, the broadcast only), per-layer selection
    of masked uploads without a compressed broadcast, a partition's parameter under another partition, digits'
    test fraction on a dataset with its own test split, where digits would be found, the straggler policy without
    stragglers, a model key its model does not read: `model.norm` but for resnet_small, `model.padding` but for
    lenet and cnn_wide, `model.channels` of an MLP) are reset to defaults, as are error feedback under
    `fl.aggregation=memory` (the memory replaces the residual) and the residuals' dtype where no client keeps
    residuals; a dense codec's ratio, which it ignores, is 1.0, and masked rand-k's index policy is `randk`; an
    evaluation period past the last round is the last round;
    mask settings at what null stands for (threshold, degree, field width) are null, and a float codec option
    written as an integer is a float."""
    data, data_defaults = c.dataset, DatasetConfig()
    for key, read_by in (("alpha", "dirichlet"), ("shards_per_client", "shards"), ("labels_per_client", "labels")):
        if data.partition != read_by:
            setattr(data, key, getattr(data_defaults, key))
    if data.name != "digits":
        data.test_fraction = data_defaults.test_fraction
    else:  # scikit-learn's bundled file: no folder is read, nothing is downloaded
        data.root, data.download = data_defaults.root, data_defaults.download
    model, model_defaults = c.model, ModelConfig()
    if model.name not in CONV_MODELS:
        model.padding = model_defaults.padding  # only lenet's and cnn_wide's 5x5 convolutions pad
    if model.name not in NORM_MODELS:
        model.norm = model_defaults.norm  # only resnet_small has normalization layers
    if model.name not in CONV_MODELS + NORM_MODELS:
        model.channels = []  # an MLP has no convolution stages
    if c.fl.stragglers == 0:
        c.fl.straggler_policy = FLConfig().straggler_policy  # no straggler to keep or drop
    last = max(c.fl.rounds - 1, 1)  # rounds 0 and rounds - 1 are always evaluated: every larger period is this one
    c.fl.eval_every = min(c.fl.eval_every, last)
    comp, defaults = c.compression, CompressionConfig()
    masks = secagg.get(c.secagg.name).masks
    if comp.name in _LOSSLESS_AT_ONE and comp.ratio == 1.0:
        comp.name = "none"
    if comp.name != "none" and not getattr(compression.get(comp.name), "uses_ratio", True):
        comp.ratio = 1.0  # a dense codec (fp16, int8, qsgd, rotation) ignores the ratio: one spelling
    if comp.name == "randk" and comp.client and secagg.get(c.secagg.name).masks:
        comp.index_policy = "randk"  # masked rand-k is the public random shared set
    if comp.name == "none" or not (comp.client or comp.server):
        comp.name, comp.ratio, comp.client, comp.server, comp.error_feedback = "none", 1.0, False, False, False
        comp.options, comp.per_layer = {}, False
    feedback = False  # whether clients keep residuals, as fl.plan.Plan.build decides
    if comp.name != "none":
        params = inspect.signature(compression.get(comp.name)).parameters
        for key, value in comp.options.items():  # a float option written as an integer (clip=1): one spelling
            default = params[key].default if key in params else None
            if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                comp.options[key] = float(value)
        codec = compression.get(comp.name)(comp.ratio, **comp.options)
        linear_masked = comp.client and masks and getattr(codec, "linear", False)
        feedback = comp.client and comp.error_feedback and codec.biased and not linear_masked
        if not comp.client or not codec.biased or linear_masked:
            comp.error_feedback = defaults.error_feedback  # no client residual: the switch cannot act
        if comp.client and masks and not linear_masked and not comp.server:
            comp.per_layer = defaults.per_layer  # masked values go at the shared index set: no codec selects
    if comp.name == "none" or not comp.client or not masks:
        for key in SHARED_INDEX_KEYS:
            setattr(comp, key, getattr(defaults, key))
    if c.fl.aggregation == "memory" and comp.name != "none":  # a memory replaces the residual: the switch cannot act
        comp.error_feedback = defaults.error_feedback
    if not feedback:
        comp.residual_dtype = defaults.residual_dtype
    if not masks:
        c.secagg = SecAggConfig(name=c.secagg.name, dropout=c.secagg.dropout)  # the one key a plain round reads
    else:
        n = c.fl.clients_per_round
        if c.secagg.bits is not None and c.secagg.bits == secagg.smallest_safe_bits(c.secagg.quant_bits, n):
            c.secagg.bits = None  # the automatic width, spelled out: one spelling
        if c.secagg.neighbours is not None and \
                _resolved(c.secagg.name, n, None, c.secagg.neighbours) == _resolved(c.secagg.name, n, None, None):
            c.secagg.neighbours = None  # the default degree, spelled out: one spelling
        if c.secagg.threshold is not None and _resolved(c.secagg.name, n, c.secagg.threshold, c.secagg.neighbours) \
                == _resolved(c.secagg.name, n, None, c.secagg.neighbours):
            c.secagg.threshold = None  # the default threshold (a strict majority), spelled out: one spelling
    return c


def _resolved(protocol: str, n: int, threshold: int | None, neighbours: int | None) -> tuple[int, int | None]:
    """(t, degree) as every round of `n` clients resolves them (validate has checked both)."""
    r = secagg.make_round(protocol, bytes(32), range(n), 1, threshold, neighbours)
    return r.threshold, r.degree


def as_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
