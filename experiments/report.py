"""Turn tidy per-round rows into the top-k result table and plots, from the rows alone.

    python -m experiments.report results/runs [more dirs ...] [--out results] [--target 0.9]
        [--label DIR=NAME ...] [--link UP,DOWN,RTT ...]

Reads every `<dir>/**/rounds.csv` of a finished run (one with a done.json beside it that matches its rows); runs
that have rows but never finished are listed as incomplete, not silently dropped. `--label DIR=NAME` names the data of
the runs under DIR (e.g. the bundled digits written as MNIST files, whose rows say `mnist`; DIR ends at the last '='
that leaves a reported folder, so either may hold one). `--link 10,50,50` adds
the seconds a client would spend on the wire per round over a link of 10 Mbit/s up, 50 down and a 50 ms round trip
(a model applied to the counted bytes and the round's exchanges, not a measurement). Writes under --out:
topk_table.md / .csv, accuracy_vs_ratio.png, accuracy_vs_bytes.png, accuracy_vs_round.png, time_breakdown.png
(the plots: experiments.report_plots).
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fl.results import NEUTRAL as RESULTS_NEUTRAL
import compression
from fl.results import COLUMNS, ID_COLUMNS, codec_options_set, finished, read_rows, run_id_of, unread_index_keys
from experiments.args import accuracy, each_once, summary
from experiments.outputs import check_target, command_line, number_range, together
from experiments import hosts, report_plots
from experiments.grid import accuracy_cell
from fl.scores import collapsed

SETTING = ["env", "dataset", "partition", "model", "n_params", "compression", "ratio", "error_feedback",
           "secagg", "index_policy", "field_bits", "other"]
# config keys that say where or how long a run ran, never what it computed (or that a column above shows)
NEUTRAL = ("seed", "backend", "device", "ray.", "results.", "dataset.root", "dataset.system_dirs", "dataset.cache",
           "dataset.download", "fl.eval_overlap", "fl.rounds")
CODEC = ("compression.", "secagg.")
MASKING_ONLY = ("secagg.", "compression.index_policy", "compression.fresh_summary", "compression.block_size",
                "compression.sketch_", "compression.prev_topk_random")  # inert without masking
CONDITIONS = ("secagg.dropout",)  # under secagg, but what the clients do, masked or not: part of a line's baseline


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return key.startswith(prefixes) and key not in CONDITIONS


BASELINE = ["env", "dataset", "partition", "model"]
# what a key meant in a config.json written before the key existed
BEFORE_KEYS = {f"{group}.{key}": json.dumps(value) for (group, key), value in RESULTS_NEUTRAL.items()}
UNRECORDED = "from before the code's commit was recorded"
STAGES = ["t_train", "t_encode", "t_mask", "t_aggregate", "t_decode", "t_evaluate"]
# shown where a line lost any (or had updates clipped)
LOST = ["dropped_per_round", "rejected_per_round", "clipped_per_round", "aborted_rounds"]
LAST = 5  # the "last 5" column: accuracy averaged over a run's last LAST evaluated rounds
# a masked round's protocol steps, each a call to the clients and their replies: one round trip apiece
STEPS = ["t_step_advertise", "t_step_share_keys", "t_step_masked_sketch", "t_step_unmask_sketch",
         "t_step_masked_input", "t_step_unmask"]


def load(dirs: list[str], labels: dict[str, str] | None = None) -> tuple[pd.DataFrame, list[Path]]:
    """(every finished run's rows, the rounds.csv paths of unfinished or failed runs) under `dirs`; a folder that
    does not exist is an error (a misspelt one would otherwise leave its runs out of the table unnoticed)."""
    missing = [d for d in dirs if not Path(d).is_dir()]
    if missing:
        raise SystemExit(f"no such folder: {', '.join(missing)}")
    frames, incomplete, configs, seen, visited = [], [], {}, {}, set()
    for d in dirs:
        for path in sorted(Path(d).rglob("rounds.csv")):
            folder = path.parent.resolve()
            if folder in visited:  # reached again through a folder given twice, or one inside another
                continue
            visited.add(folder)
            label = _label_of(folder, labels or {})
            if finished(path.parent):
                frame = _numbers(read_rows(path), path)
                run_id = frame["run_id"].iloc[0]
                if run_id in seen:  # the same run copied into two folders: its rows count once
                    print(f"report: run {run_id} is in {seen[run_id]} and {path.parent}; counted once",
                          file=sys.stderr)
                    continue
                seen[run_id] = path.parent
                if label:
                    frame["dataset"] = label
                frames.append(_name_policy(frame, path.parent / "config.json"))
                configs[run_id] = config_settings(path.parent / "config.json")
            else:
                incomplete.append(path)
        # a run that failed before its first round: its failed-*.txt and no rows
        for rows in sorted({f.parent / "rounds.csv" for f in Path(d).rglob("failed-*.txt")
                            if not (f.parent / "rounds.csv").exists()}):
            if rows.parent.resolve() not in visited:
                visited.add(rows.parent.resolve())
                incomplete.append(rows)
    if not frames:
        listed = "".join(f"\n  {p.parent}" for p in incomplete)
        raise SystemExit(f"no finished runs under {', '.join(dirs)}" + (
            f"; {len(incomplete)} unfinished (crashed, killed, cut short or still running; rerun their command to "
            f"resume):{listed}" if incomplete else ""))
    rows = pd.concat(frames, ignore_index=True)
    if "env" not in rows:
        rows["env"] = "unknown"
    rows["env"] = rows["env"].fillna("unknown")
    if "field_bits" not in rows:  # rows kept before the masked field's width was a column: none were masked
        rows["field_bits"] = np.nan
    rows["field_bits"] = pd.to_numeric(rows["field_bits"], errors="coerce")  # blank (not masked) -> NaN
    if "code" not in rows:  # rows kept before the code's commit was a column
        rows["code"] = UNRECORDED
    rows["code"] = rows["code"].astype(object).fillna(UNRECORDED)
    items = other_items(rows, configs)
    rows["other"] = rows["run_id"].map({r: _joined(i) for r, i in items.items()})
    # the part of it outside the codec and the masking (stragglers, server lr, Dirichlet alpha): a crowded plot
    # panel is split by it; codec_other is the rest
    rows["condition"] = rows["run_id"].map({r: _joined(kv for kv in i if not _under(kv[0], CODEC))
                                            for r, i in items.items()})
    rows["codec_other"] = rows["run_id"].map({r: _joined(kv for kv in i if _under(kv[0], CODEC))
                                              for r, i in items.items()})
    # what a line shares with its dense baseline: everything but the codec and the masking (dropouts included); a
    # key a config.json lacks (written before the key existed) as the value runs had before it
    rows["base"] = rows["run_id"].map({r: json.dumps({k: v for k, v in ({**BEFORE_KEYS, **c} if c else c).items()
                                                      if not _under(k, CODEC)}, sort_keys=True)
                                       for r, c in configs.items()})
    return rows, incomplete


def _label_of(run: Path, labels: dict[str, str]) -> str | None:
    """The name `--label` gives the data of `run` (resolved): that of the innermost labelled folder holding it,
    whatever order the folders were given in (a folder reported inside another may carry its own label)."""
    held = [(len(Path(folder).parts), name) for folder, name in labels.items() if run.is_relative_to(folder)]
    return max(held)[1] if held else None


def _folder(d: str) -> str:
    """A folder as given on the command line, however spelt (`./x/`, `x`): what --label matches."""
    return str(Path(d).resolve())


def _config(config: Path) -> dict:
    """A run's config.json; one that does not parse stops the report naming it (its settings decide what the
    run is pooled with, so it is never guessed)."""
    try:
        return json.loads(config.read_text())
    except (ValueError, OSError) as err:
        raise SystemExit(f"report: {config} cannot be read ({err}); restore it (git checkout) or move its run "
                         "folder out of the reported folders") from None


# the rows' columns of names; the others hold numbers, or True/False in FLAGS
TEXT = (*ID_COLUMNS, "dataset", "partition", "model", "compression", "aggregation", "index_policy", "secagg", "env",
        "env_cpu", "env_torch", "device", "backend")
FLAGS = ("client_compression", "server_compression", "error_feedback", "aborted")


def _numbers(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A finished run's rows, or a stop naming the first value that is not a number in a column of numbers (nor
    True/False in one of FLAGS): pandas would compare it as text, add it up as text or read it as True."""
    for column in [c for c in COLUMNS if c in frame and c not in TEXT]:
        values = frame[column].dropna()
        # read as numbers whole: nothing to find, but in a flag column, where a number but 0 or 1 would read as True
        if pd.api.types.is_numeric_dtype(values) and column not in FLAGS:
            continue
        bad = values[~values.isin([True, False, "True", "False"])] if column in FLAGS else \
            values[pd.to_numeric(values, errors="coerce").isna()]
        if len(bad):
            first = bad.iloc[0].item() if isinstance(bad.iloc[0], np.generic) else bad.iloc[0]  # 2, not np.int64(2)
            raise SystemExit(f"report: {path}, line {bad.index[0] + 2}: {column} is {first!r}, not a "
                             f"{'flag (True/False)' if column in FLAGS else 'number'}; restore the file (git "
                             "checkout) or move its run folder out of the reported folders")
    return frame


def config_settings(config: Path) -> dict[str, str]:
    """A run's config.json as {dotted key: JSON value}, less the keys that cannot change its results (among them
    the shared-index keys it does not read, as its config hash leaves them out)."""
    def flat(d: dict, prefix: str = ""):
        for key, value in d.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}.")
            elif not f"{prefix}{key}".startswith(NEUTRAL):
                yield f"{prefix}{key}", json.dumps(value)
    if not config.exists():
        return {}
    cfg = _config(config)
    codec = cfg.get("compression", {})
    if isinstance(codec.get("options"), dict):
        codec["options"] = codec_options(codec.get("name"), codec["options"])
    settings = dict(flat(cfg))
    for key in unread_index_keys(cfg):
        settings.pop(f"compression.{key}", None)
    if settings.get("compression.sketch_quant_bits") == settings.get("secagg.quant_bits"):
        settings["compression.sketch_quant_bits"] = "null"  # the summary at the values' bits: the default
    return settings


def codec_options(name: str, options: dict) -> dict:
    """Every option the codec takes, at the value the run used: one left to the codec and one given at its default
    read alike, so runs that differ in an option given to some only are told apart. `seed` is as given (left out,
    the run's seed stands in); an option at a whole number reads as an int (16 and 16.0 alike)."""
    if name not in compression.names():
        return options
    params = inspect.signature(compression.get(name)).parameters
    taken = {k: p.default for k, p in params.items()
             if k not in ("ratio", "layout", "seed") and p.default is not inspect.Parameter.empty}
    given = {**taken, **codec_options_set(name, options)}
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in given.items()}


def _joined(items) -> str:
    return ", ".join(f"{k}={v}" for k, v in items)


def other_items(rows: pd.DataFrame, configs: dict[str, dict[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """run_id -> the config keys (as (key, value) pairs) in which it differs from runs the other columns would pool
    with it (an lr or a cohort size swept at one seed would otherwise read as seeds of one setting), in whichever
    environment each ran (two environments' lines then differ in nothing else); none where none. A key found so is
    named on every run of the same data, model and length, so a setting run at one value of it only (alone in its
    pool) still says which; so is a key outside the codec and the masking in which runs of the same data, model
    and length differ (top-k run at another lr or dropout than its dense runs). A key a run's config.json lacks
    (written before the key existed) reads as the value runs had before it (fl.results.NEUTRAL), and a codec option
    as the codec's default (`codec_options`); one without such a value is not compared. A run without a config.json
    is left out of the comparison and named by no key, so it pools only with runs named by none. Masking's keys are
    not named for unmasked runs."""
    runs = _first_rows(rows).reset_index()
    configs = {r: {**BEFORE_KEYS, **c} if c else c for r, c in configs.items()}  # no config.json: nothing known
    found: dict[str, set[str]] = {}
    for _, g in runs.groupby([c for c in SETTING if c not in ("other", "env")] + ["length"], dropna=False):
        cfgs = [c for r in g["run_id"] if (c := configs.get(r))] or [{}]  # runs with no config.json: unknown
        masked = g["secagg"].iloc[0] != "none"
        keys = {k for k in set.intersection(*(set(c) for c in cfgs))
                if len({c[k] for c in cfgs}) > 1 and (masked or not _under(k, MASKING_ONLY))}
        found.update(dict.fromkeys(g["run_id"], keys))
    other = {}
    for _, g in runs.groupby(["dataset", "partition", "model", "length"], dropna=False):
        cfgs = [c for r in g["run_id"] if (c := configs.get(r))] or [{}]
        apart = {k for k in set.intersection(*(set(c) for c in cfgs))
                 if len({c[k] for c in cfgs}) > 1 and not _under(k, CODEC)}
        keys = sorted(apart.union(*(found[r] for r in g["run_id"])))
        for run_id, masked in zip(g["run_id"], g["secagg"] != "none"):
            cfg = configs.get(run_id, {})
            other[run_id] = [(k, plain_value(cfg[k])) for k in keys
                             if k in cfg and (masked or not _under(k, MASKING_ONLY))]
    return other


def _first_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Each run's first row, indexed by run_id, with its number of rounds as `length`."""
    return rows.assign(length=rows.groupby("run_id")["round"].transform("size")).groupby("run_id").first()


def plain_value(value: str) -> str:
    """A `config_settings` value as a label shows it: a string without its quotes, anything else as JSON."""
    v = json.loads(value)
    return v if isinstance(v, str) else json.dumps(v)


BROADCAST_ONLY = ", compressed broadcast"
MEMORY = ", memory"  # fl.aggregation=memory: clients keep memories (the EF column says so), the server their sum


def _name_policy(frame: pd.DataFrame, config: Path) -> pd.DataFrame:
    """A run's index_policy as tables and legends name it. `fresh` with the count-sketch summary, recorded as plain
    `fresh` (every other summary names itself), is `fresh(sketch)`, never read as the default policy; a run whose
    codec compressed only the broadcast (clients sent every entry, the server kept the error) says so beside its
    recorded `dense` or `all`, never read as the dense baseline's uploads under another codec's name; a `fresh` run
    whose first exchange's summary had bits of its own (compression.sketch_quant_bits, not the values'
    secagg.quant_bits) says so, so that it is never pooled with, nor read as, the same policy at the default; and a
    run under fl.aggregation=memory says so last."""
    if "index_policy" not in frame:
        return frame
    frame.loc[frame["index_policy"].astype(str) == "fresh", "index_policy"] = "fresh(sketch)"
    if {"client_compression", "server_compression"} <= set(frame):  # columns older rows may lack
        only = ((frame["compression"] != "none") & ~frame["client_compression"].astype(bool)
                & frame["server_compression"].astype(bool))
        frame.loc[only, "index_policy"] = frame.loc[only, "index_policy"].astype(str) + BROADCAST_ONLY
    if not config.exists():
        return frame
    cfg = _config(config)
    bits = cfg.get("compression", {}).get("sketch_quant_bits")
    if bits is not None and bits != cfg.get("secagg", {}).get("quant_bits"):
        fresh = frame["index_policy"].astype(str).str.startswith("fresh")
        frame.loc[fresh, "index_policy"] = frame.loc[fresh, "index_policy"].astype(str) + f", summary {bits} bits"
    if cfg.get("fl", {}).get("aggregation") == "memory":
        frame["index_policy"] = frame["index_policy"].astype(str) + MEMORY
    return frame


def _memory(policy: pd.Series) -> pd.Series:
    return policy.astype(str).str.endswith(MEMORY)


def code_versions(rows: pd.DataFrame) -> str:
    """Which code the runs came from (commit: runs), or '' when none recorded it (older rows)."""
    counts = rows.groupby("code")["run_id"].nunique()
    if set(counts.index) <= {UNRECORDED}:
        return ""
    return "; ".join(f"`{code}` {n} run{'s' * (n > 1)}" if code != UNRECORDED else f"{n} run{'s' * (n > 1)} {code}"
                     for code, n in counts.sort_index().items())


def stage_seconds(run: pd.DataFrame, stage: str) -> pd.Series:
    """A stage's seconds per round; evaluation's include what the workers spent on it inside the next round's
    training call (`t_evaluate_carried`, rows since fl.eval_overlap), as the client stages count workers' time."""
    if stage == "t_evaluate" and "t_evaluate_carried" in run:
        return run["t_evaluate"] + run["t_evaluate_carried"].fillna(0)
    # a round where a stage of the run had nothing to do (every client lost, or aborted before it) spent 0 s on it:
    # averaged over the rounds that did, it would not be per round as t_round is; a stage the run never has (t_mask
    # without masking) stays blank
    return run[stage].fillna(0) if run[stage].notna().any() else run[stage]


def per_run(rows: pd.DataFrame, target: float) -> pd.DataFrame:
    """One line per run: final accuracy and its mean over the last LAST evaluated rounds, rounds to target,
    per-round bytes and stage seconds."""
    rows = rows.assign(**{c: rows[c] if c in rows else "" for c in ("other", "base", "condition", "codec_other")})

    def summarize(run: pd.DataFrame) -> pd.Series:
        run = run.sort_values("round")
        reached = run.loc[run["accuracy"] >= target, "round"]
        out = {k: run[k].iloc[0] for k in SETTING + ["seed", "base", "condition", "codec_other"]}
        out["host"] = hosts.of(run)
        out.update({k: run[k].iloc[0] for k in ("device", "env_torch") if k in run})  # what of env moves the numbers
        # all clients' upload until the target is first reached, per client of the population
        upload = run.loc[run["round"] <= reached.iloc[0], "bytes_up"].sum() / run["num_clients"].iloc[0] \
            if len(reached) else np.nan
        evaluated = run["accuracy"].dropna()
        # a run with no evaluated round (rows edited by hand: the simulator evaluates the last) has no accuracy
        out.update(final_accuracy=evaluated.iloc[-1] if len(evaluated) else np.nan,
                   ended_collapsed=ended_collapsed(run.loc[evaluated.index]),
                   last_accuracy=evaluated.iloc[-LAST:].mean(),
                   rounds_to_target=int(reached.iloc[0]) + 1 if len(reached) else np.nan,
                   upload_to_target=upload,
                   up_per_client=run["bytes_up_per_client"].mean(), down_per_client=run["bytes_down_per_client"].mean(),
                   upload_total_per_client=run["bytes_up"].sum() / run["num_clients"].iloc[0],
                   round_trips=round_trips(run).mean(),
                   # rows written before the column have none: NaN, and the tables leave the column out
                   steps_per_round=run["local_steps"].mean() if "local_steps" in run else np.nan,
                   **{f"{c}_per_round": run[c].fillna(0).mean() if c in run else 0.0
                      for c in ("dropped", "rejected", "clipped")},
                   aborted_rounds=run["aborted"].isin([True, "True"]).sum() if "aborted" in run else 0,
                   rounds=len(run), **{s: stage_seconds(run, s).mean() for s in STAGES + ["t_round"]})
        return pd.Series(out)

    return rows.groupby("run_id").apply(summarize, include_groups=False).reset_index(drop=True)


def ended_collapsed(evaluated: pd.DataFrame) -> float:
    """1.0 where the run's last evaluated model collapsed (fl.scores.collapsed), 0.0 where it did not, NaN where its
    rows have no `top_class_share` (written before the column existed)."""
    if "top_class_share" not in evaluated or evaluated.empty or pd.isna(evaluated["top_class_share"].iloc[-1]):
        return np.nan
    return float(collapsed(evaluated["top_class_share"].iloc[-1], evaluated["logit_std"].iloc[-1]))


def round_trips(run: pd.DataFrame) -> pd.Series:
    """Each round's exchanges between the server and a client: a plain round is one (the model down, the update
    up); a masked round one per protocol step it ran (4; 6 with `fresh`'s first exchange; fewer if it aborted),
    the model travelling with a step's call. NaN for masked rows kept before the steps were timed."""
    steps = [c for c in STEPS if c in run]
    if steps:
        return run[steps].notna().sum(axis=1).clip(lower=1)
    return pd.Series(np.where(run["secagg"] == "none", 1.0, np.nan), index=run.index)


def wire_seconds(t: pd.DataFrame, link: tuple[float, float, float]) -> pd.Series:
    """A client's seconds on the wire per round over `link` (Mbit/s up, Mbit/s down, round trip in ms): its bytes
    at the link's rates plus a round trip per exchange. The server's link and the cohort's clients are taken as no
    bottleneck: a model of the counted bytes, not a measurement."""
    up, down, rtt = link
    return (t["up_per_client"] * 8 / (up * 1e6) + t["down_per_client"] * 8 / (down * 1e6)
            + t["round_trips"] * rtt / 1e3)


def parse_link(text: str) -> tuple[float, float, float]:
    """'10,50,50' -> (10.0, 50.0, 50.0): Mbit/s up, Mbit/s down, round trip in ms; all positive and finite."""
    try:
        link = tuple(float(x) for x in text.split(","))
    except ValueError:
        link = ()
    if len(link) != 3 or not all(np.isfinite(x) and x > 0 for x in link):
        raise argparse.ArgumentTypeError(f"--link {text!r}: expected UP,DOWN,RTT (Mbit/s, Mbit/s, ms), all > 0")
    return link


def parse_label(text: str) -> tuple[str, str]:
    """'DIR=NAME' -> (DIR, NAME), both non-empty, split at the first '=' (`label_folder` picks another where a
    reported folder's name holds one)."""
    folder, _, name = text.partition("=")
    if not folder or not name:
        raise argparse.ArgumentTypeError(f"--label {text!r}: expected DIR=NAME")
    return folder, name


def label_folder(label: tuple[str, str], reported: set[str]) -> tuple[str, str]:
    """(DIR, NAME) split at the last '=' whose left side is a reported folder (`runs/alpha=0.1=Dirichlet`), so a
    folder's name and a label may each hold one; the first '=' where none is (refused as not reported)."""
    text = "=".join(label)
    for cut in reversed([i for i, ch in enumerate(text) if ch == "="]):
        if text[cut + 1:] and _folder(text[:cut]) in reported:
            return text[:cut], text[cut + 1:]
    return label


def link_name(link: tuple[float, float, float]) -> str:
    return f"{link[0]:g}/{link[1]:g} Mbit/s, {link[2]:g} ms"


def wire_column(link: tuple[float, float, float]) -> str:
    """The table's column for a link's wire seconds: wire_s_10_50_50."""
    return "wire_s_" + "_".join(f"{x:g}" for x in link)


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """One line per setting and run length (runs of different lengths are never averaged as seeds)."""
    g = runs.groupby(SETTING + ["rounds"], dropna=False, sort=True)
    t = g.agg(base=("base", "first"), seeds=("seed", "nunique"), seed_set=("seed", number_range), runs=("seed", "size"),
              accuracy=("final_accuracy", "mean"),
              accuracy_std=("final_accuracy", "std"), accuracy_last=("last_accuracy", "mean"),
              up_per_client=("up_per_client", "mean"), down_per_client=("down_per_client", "mean"),
              encode_s=("t_encode", "mean"), decode_s=("t_decode", "mean"), mask_s=("t_mask", "mean"),
              round_s=("t_round", "mean"), round_trips=("round_trips", "mean"),
              steps_per_round=("steps_per_round", "mean"),
              rounds_to_target=("rounds_to_target", "mean"),
              reached=("rounds_to_target", "count"), upload_to_target=("upload_to_target", "mean"),
              hosts=("host", hosts.pooled),
              ended_collapsed=("ended_collapsed", lambda runs: runs.sum(min_count=1)),  # blank: no run knows
              **{c: (c, "mean") for c in LOST}).reset_index()
    base = _dense_baseline(t)
    t["up_vs_dense"] = t["up_per_client"].to_numpy() / base["up_per_client"].to_numpy()
    t["down_vs_dense"] = t["down_per_client"].to_numpy() / base["down_per_client"].to_numpy()
    t["accuracy_change"] = t["accuracy"].to_numpy() - base["accuracy"].to_numpy()
    t["dense_seed_set"] = base["seed_set"].to_numpy()
    return t


def _other_seeds(r) -> bool:
    """Whether a line's Δ vs dense compares means over different seeds (its dense baseline ran others)."""
    return isinstance(r.dense_seed_set, str) and r.dense_seed_set != r.seed_set


def _dense_baseline(t: pd.DataFrame) -> pd.DataFrame:
    """Each line's dense baseline (same environment, data, model and run length): the dense line whose config
    differs from it only in the codec and the masking, else the only dense line there where their configs differ
    only in keys one of them lacks (written before the key existed); NaN where neither exists (several dense
    lines, none alike; or a dense run at another lr, dropout, momentum ...)."""
    keys, values = BASELINE + ["rounds"], ["up_per_client", "down_per_client", "accuracy", "seed_set"]
    dense = t[(t["compression"] == "none") & (t["secagg"] == "none")]
    alike = t[keys + ["base"]].merge(dense[keys + ["base"] + values].drop_duplicates(keys + ["base"]),
                                     on=keys + ["base"], how="left")
    only = dense[dense.groupby(keys, dropna=False)["other"].transform("size") == 1]
    sole = t[keys + ["base"]].merge(only[keys + values].assign(dense_base=only["base"]), on=keys, how="left")
    sole.loc[[not _agree(a, b) for a, b in zip(sole["base"], sole["dense_base"])], values] = np.nan
    return alike[values].fillna(sole[values])


def _agree(base: str, other: str) -> bool:
    """Whether two lines' `base` settings (JSON; '' or NaN where unknown) hold the same value in every key both
    have."""
    a, b = (json.loads(x) if isinstance(x, str) and x else {} for x in (base, other))
    return all(a[k] == b[k] for k in a.keys() & b.keys())


LINK_NOTE = (" Wire s: a client's seconds on the wire per round over the link named (Mbit/s up / down, round-trip "
             "time): its bytes at those rates plus one round trip per exchange with the server (round trips: 1 for "
             "a plain round, one per protocol step for a masked one); the server's link is taken as no bottleneck. "
             "A model applied to the counted bytes, not a measurement.")
REPEATS_NOTE = " (over runs where a seed ran more than once, say on two machines: the seeds column says how many)"
OTHER_SEEDS_NOTE = ("; a difference of means, so where the baseline ran other seeds than the line (its seeds named "
                    "in the cell) it mixes the seeds' spread into Δ: compare such lines seed by seed")
OTHERS_NOTE = ("Other settings: the config keys in which a line's runs differ from runs the other columns would "
               "pool with them, named on every line of the same data, model and run length. ")
STEPS_NOTE = (" Steps / round: the minibatch steps the round's clients trained, summed (the rows' `local_steps`: "
              "the work in a unit no CPU changes; stragglers train part of theirs), mean over rounds and seeds; "
              "blank for runs recorded before the column.")
COLLAPSED_NOTE = ("Ended collapsed: runs whose final model gave one class to at least 99% of the test images, its "
                  "logits varying by less than 0.01 across them (dead features; `python -m experiments.health` says "
                  "from which round); blank where the runs' rows have no `top_class_share`. ")
LOST_NOTE = ("Dropped, rejected / round: clients lost per round (dropouts; updates refused as invalid); clipped / "
             "round: updates scaled down to `fl.max_update_norm`; aborted rounds: rounds not applied (too few "
             "survivors, or a failed protocol check); means over seeds. ")


BROADCAST_NOTE = ("EF: the clients' residuals; `server` on a line whose positions say `compressed broadcast`: the "
                  "codec compressed only the broadcast (clients sent every entry) and the server kept what it did "
                  "not send. ")


MEMORY_NOTE = ("EF `memory` (positions `..., memory`): fl.aggregation=memory, each client kept a memory of what the "
               "server held of its update and sent the codec of the difference; the server stepped by the mean of "
               "every client's memory it held, not of the round's cohort. ")


def _is_broadcast_only(policy) -> bool:
    """A line whose codec compressed only the broadcast (as `_name_policy` names it, `, memory` after it): the server
    kept the error."""
    return str(policy).removesuffix(MEMORY).endswith(BROADCAST_ONLY)


def _broadcast_only(policies: pd.Series) -> pd.Series:
    return policies.map(_is_broadcast_only).astype(bool)


def _has_broadcast_only(t: pd.DataFrame) -> bool:
    return bool(_broadcast_only(t["index_policy"]).any())


def _has_lost(t: pd.DataFrame) -> bool:
    return all(c in t for c in LOST) and bool((t[LOST].fillna(0) > 0).any(axis=None))


def _has_collapsed(t: pd.DataFrame) -> bool:
    return "ended_collapsed" in t and bool((t["ended_collapsed"].fillna(0) > 0).any())


def _has_steps(t: pd.DataFrame) -> bool:
    return "steps_per_round" in t and bool(t["steps_per_round"].notna().any())


def _has_others(t: pd.DataFrame) -> bool:
    return "other" in t and bool((t["other"].fillna("") != "").any())


def scope(rows: pd.DataFrame) -> str:
    """What the runs cover, for the title: data (partitions), models, population and cohort, run lengths and
    seeds, so a table says at a glance whether it is a demo or evidence at federated scale."""
    def listed(values) -> str:
        return ", ".join(str(v) for v in sorted(set(values)))

    runs = _first_rows(rows)
    data = "; ".join(f"{d} ({listed(g['partition'])})" for d, g in runs.groupby("dataset"))
    people = "; ".join(f"{n} clients, {c} a round" if c < n else f"{n} clients, all every round"
                       for n, c in sorted(set(zip(runs["num_clients"], runs["clients_per_round"])))) \
        if {"num_clients", "clients_per_round"} <= set(runs) else ""  # rows written before the cohort was a column
    seeds = f"seed{'s' * (runs['seed'].nunique() > 1)} {number_range(runs['seed'])}"
    return " · ".join(part for part in (data, listed(runs["model"]), people, f"{number_range(runs['length'])} rounds",
                                        seeds) if part)


def markdown(t: pd.DataFrame, incomplete: list[Path], target: float, command: str, code: str = "",
             title: str = "", links: tuple = ()) -> str:
    repeated = (t["runs"] != t["seeds"]).any()  # a seed run twice (two machines' folders reported together)
    lines = ["# Top-k results" + (f": {title}" if title else ""), "", f"Regenerate: `{command}`", "",
             "Final test accuracy: mean ± std over seeds" + (REPEATS_NOTE if repeated else "")
             + f"; last {LAST}: each run's accuracy averaged over its last "
             f"{LAST} evaluated rounds, mean over seeds (steadier where accuracy swings from round to round, as on "
             "shards). Field bits: the masked field's width (blank: not masked); "
             "runs that differ in it are never pooled. " + (OTHERS_NOTE if _has_others(t) else "")
             + (COLLAPSED_NOTE if _has_collapsed(t) else "") + (LOST_NOTE if _has_lost(t) else "")
             + (BROADCAST_NOTE if _has_broadcast_only(t) else "")
             + (MEMORY_NOTE if _memory(t["index_policy"]).any() else "")
             + "Bytes: per client per round, counted from the serialized messages. Δ vs dense, x dense: "
             "relative to the dense baseline (no compression, no masking) of the same environment, data, model and "
             "run length, alike in every key but the codec's and the masking's (a dropout rate must match too; "
             "blank where there is no such run)" + (OTHER_SEEDS_NOTE if any(map(_other_seeds, t.itertuples())) else "")
             + ". Seconds: per round "
             "(client-side stages summed over the cohort; decode s: a masked round's server work on what it "
             "unmasked, choosing the index set and applying the sum; an unmasked round decodes each update as it "
             f"adds it, inside round s). Rounds to target: rounds up to the first with accuracy >= {target} (the "
             "first round counts 1), mean over the runs that reached it (their count after the slash; blank = none "
             "did); upload to target: every client's upload until then, per client of the population (cumulative "
             "bytes, mean over those runs)."
             + (STEPS_NOTE if _has_steps(t) else "") + (LINK_NOTE if links else ""), ""]
    envs = sorted(t["env"].unique())
    lines += ["Environments: " + "; ".join(f"`{e}`" for e in envs), ""]
    tag = hosts.letters(t["hosts"])
    lines += ["Hosts (the CPU a line's runs ran on, in the host column; seconds compare only between lines of one "
              "host, and a line over two averages them): " + hosts.legend(tag), ""]
    if code:
        lines += ["Code (commit; `+modified`: with changes not committed): " + code, ""]
    # these columns only where a line has some
    others, lost, steps, down = _has_others(t), _has_lost(t), _has_steps(t), _has_collapsed(t)
    header = ("| env | data | model | params | codec | ratio | EF | secagg | positions | field bits "
              f"{'| other settings ' if others else ''}| seeds | accuracy "
              f"| last {LAST} {'| ended collapsed ' if down else ''}| Δ vs dense "
              "| up B/client | up x dense | down B/client | down x dense | encode s | decode s | mask s | round s "
              f"{'| steps / round ' if steps else ''}| host "
              f"| rounds to {target} | upload to {target} |"
              + "".join(f" wire s, {link_name(k)} |" for k in links) + (" round trips |" if links else "")
              + (" dropped / round | rejected / round | clipped / round | aborted rounds |" if lost else ""))
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    lengths = t["rounds"].nunique() > 1  # say each line's run length where they differ
    for r in t.itertuples():
        data = f"{r.dataset} ({r.partition}{f', {r.rounds:.0f} rounds' if lengths else ''})"
        lines.append(
            f"| {r.env} | {data} | {r.model} | {int(r.n_params):,} | {r.compression} | {r.ratio:g} "
            f"| {_ef(r)} | {r.secagg} | {r.index_policy} | {_num(r.field_bits, '.0f')} "
            f"{f'| {r.other} ' if others else ''}| {r.seeds}{f' ({r.runs} runs)' if r.runs != r.seeds else ''} "
            f"| {accuracy_cell(r.accuracy, r.accuracy_std, r.runs)} | {r.accuracy_last:.3f} "
            f"{'| ' + _num(r.ended_collapsed, 'g') + ' ' if down else ''}"
            f"| {_num(r.accuracy_change, '+.3f')}{f' (dense: seeds {r.dense_seed_set})' if _other_seeds(r) else ''} "
            f"| {r.up_per_client:,.0f} | {_num(r.up_vs_dense)} | {r.down_per_client:,.0f} | {_num(r.down_vs_dense)} "
            f"| {_num(r.encode_s)} | {_num(r.decode_s)} | {_num(r.mask_s)} | {r.round_s:.3f} "
            f"{'| ' + _num(r.steps_per_round, ',.0f') + ' ' if steps else ''}| {hosts.lettered(r.hosts, tag)} "
            f"| {'' if np.isnan(r.rounds_to_target) else f'{r.rounds_to_target:.1f} / {r.reached}'} "
            f"| {'' if np.isnan(r.upload_to_target) else f'{r.upload_to_target:,.0f}'} |"
            + "".join(f" {_num(getattr(r, wire_column(k)), '.3f')} |" for k in links)
            + (f" {_num(r.round_trips, 'g')} |" if links else "")
            + (f" {r.dropped_per_round:.2f} | {r.rejected_per_round:.2f} | {r.clipped_per_round:.2f} "
               f"| {r.aborted_rounds:g} |" if lost else ""))
    if len(envs) > 1:
        lines += ["", "## Environments compared (seconds per round)", "", _environments_compared(t)]
    if incomplete:
        lines += ["", "## Incomplete runs (rows without a done.json that matches them: crashed, killed, cut short or "
                  "still running)", ""]
        for p in incomplete:
            failure = failure_of(p)
            lines.append(f"- `{p}`" + (f": {failure}" if failure else ""))
    return "\n".join(lines) + "\n"


def failure_of(rows: Path) -> str | None:
    """The error the run of these rows recorded (its own `failed-<run_id>.txt`: an earlier attempt's error in the
    same folder is not this run's, which may have been killed or be running). Rows without a first row, or none
    at all (a run that failed before its first round): the latest note written since, an earlier one may have
    been fixed."""
    run_id = run_id_of(rows) if rows.exists() else None
    if run_id:
        note = rows.parent / f"failed-{run_id}.txt"
        return note.read_text().strip() if note.exists() else None
    since = rows.stat().st_mtime if rows.exists() else -np.inf
    notes = [f for f in rows.parent.glob("failed-*.txt") if f.stat().st_mtime >= since]
    return max(notes, key=lambda f: (f.stat().st_mtime, f.name)).read_text().strip() if notes else None


def _environments_compared(t: pd.DataFrame) -> str:
    """Seconds per round of each setting that ran in more than one environment on one host, an environment a
    column: a setting as the table's lines are (data, partition, model, every setting, length), never pooled
    across them, and its host (lettered as in the table), since seconds compare only between runs of one host."""
    tag = hosts.letters(t["hosts"])
    lines = t.assign(setting=setting_names(t), host=[hosts.lettered(h, tag) for h in t["hosts"]])
    setting = ["dataset", "partition", "model", "setting", "rounds"]
    seconds = lines.pivot_table(index=setting + ["host"], columns="env", values="round_s")
    seconds = seconds[seconds.count(axis=1) > 1]
    if seconds.empty:
        apart = lines.groupby(setting)["env"].nunique().gt(1).any()  # in two environments, each on its own host
        return "No setting ran in more than one environment" + (" on one host" if apart else "") + "."
    return seconds.round(4).reset_index().to_markdown(index=False, floatfmt="g", missingval="")


def _ef(line) -> str:
    """Who kept the error: the clients (`on`; `memory`: what the server holds of their updates), the server (a codec
    on the broadcast only) or nobody."""
    broadcast = _is_broadcast_only(line.index_policy)
    if str(line.index_policy).endswith(MEMORY) and not broadcast:  # clients that send every entry keep nothing
        return "memory"
    return "on" if line.error_feedback else "server" if broadcast else "off"


def _num(x: float, spec: str = ".4f") -> str:
    """Blank where there is no figure (no dense baseline to compare with: `_dense_baseline`)."""
    return "" if pd.isna(x) else format(x, spec)


def setting_names(frame: pd.DataFrame, ratio: bool = True) -> pd.Series:
    """Each row's setting in words: codec (and ratio), masking with its index policy, the field's width where the
    frame's masked rows differ in it, 'no EF', other settings. Rows with equal names are one setting (seeds)."""
    frame = frame.assign(other=frame["other"].fillna("") if "other" in frame else "",
                         field_bits=frame["field_bits"] if "field_bits" in frame else np.nan)
    masked = frame["secagg"] != "none"
    widths = frame.loc[masked, "field_bits"].nunique() > 1
    bits = frame["field_bits"].map(lambda b: "" if pd.isna(b) or not widths else f", {b:.0f}-bit field")
    name = frame["compression"].astype(str)
    if ratio:
        name = name + np.where(frame["compression"] == "none", "", " " + frame["ratio"].map("{:g}".format))
    name = name + np.where(masked, " + " + frame["secagg"].astype(str) + " (" + frame["index_policy"].astype(str)
                           + bits + ")", "")
    broadcast = _broadcast_only(frame["index_policy"])
    name = name + np.where(~masked & broadcast, " on the broadcast only", "")
    kept = frame["error_feedback"].astype(bool) | _memory(frame["index_policy"])
    name = name + np.where(kept | (frame["compression"] == "none") | broadcast, "", " no EF")
    return name + np.where(frame["other"] != "", ", " + frame["other"], "")


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", default="results")
    ap.add_argument("--target", type=accuracy, default=0.9, help="accuracy in (0, 1] for the rounds-to-target "
                    "column")
    ap.add_argument("--label", action="append", default=[], metavar="DIR=NAME", type=parse_label,
                    help="name the data of the runs under DIR (repeatable)")
    ap.add_argument("--link", action="append", default=[], type=parse_link, metavar="UP,DOWN,RTT",
                    help="add a client's wire seconds per round over a link of UP and DOWN Mbit/s and an RTT in ms "
                         "(repeatable)")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    reported = {_folder(d) for d in args.dirs}
    labels: dict[str, str] = {}  # resolved folder -> name
    unknown = set()
    for folder, name in (label_folder(label, reported) for label in args.label):
        if _folder(folder) not in reported:
            unknown.add(folder)
        elif labels.setdefault(_folder(folder), name) != name:
            ap.error(f"--label names {folder} twice: {labels[_folder(folder)]} and {name}")
    if unknown:
        raise SystemExit(f"--label names a folder not reported: {', '.join(sorted(unknown))} (folders: "
                         f"{', '.join(args.dirs)})")
    each_once(ap, "--link", map(link_name, args.link))
    above = next((p for p in [Path(args.out), *Path(args.out).parents] if p.exists()), None)
    if above is not None and not above.is_dir():
        where = "" if above == Path(args.out) else f": {above}"
        ap.error(f"--out {args.out}{where} is a file: the report writes a folder of tables and plots")
    command = command_line("experiments.report", argv)
    check_target(Path(args.out) / "topk_table.md", command, args.force)
    rows, incomplete = load(args.dirs, labels)
    runs = per_run(rows, args.target)
    t = table(runs)
    for link in args.link:
        t[wire_column(link)] = wire_seconds(t, link)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    hidden = (["base", "seed_set", "dense_seed_set"] + ([] if _has_others(t) else ["other"])
              + ([] if _has_lost(t) else LOST) + ([] if _has_steps(t) else ["steps_per_round"])
              + ([] if _has_collapsed(t) else ["ended_collapsed"]))
    names = ("topk_table.csv", "topk_table.md", "accuracy_vs_ratio.png", "accuracy_vs_bytes.png",
             "accuracy_vs_round.png", "time_breakdown.png")
    with together(*(out / name for name in names)) as (csv, md, by_ratio, by_bytes, by_round, breakdown):
        t.drop(columns=hidden).to_csv(csv, index=False)
        md.write_text(markdown(t, incomplete, args.target, command, code_versions(rows), scope(rows),
                               tuple(args.link)))
        report_plots.plot_accuracy_vs_ratio(runs, by_ratio)
        report_plots.plot_accuracy_vs_bytes(runs, by_bytes)
        report_plots.plot_accuracy_vs_round(rows, by_round)
        report_plots.plot_time_breakdown(runs, breakdown)
    print(f"report: {len(runs)} runs, {len(t)} settings, {len(incomplete)} incomplete -> {out}")
    return t


if __name__ == "__main__":
    main()
