"""The report's plots (`experiments.report` writes them beside its table): accuracy against the compress ratio,
against the bytes sent and by round, and where a round's time goes; a crowded panel is split by condition."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
from cycler import cycler

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import ScaledTranslation  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments import hosts  # noqa: E402
from experiments import report  # noqa: E402  (its names are read at call time: report imports this module)


# tab20's strong colours, then its light ones: ten colours repeat within one legend, and tab20's own order puts
# each light shade next to its strong one
PALETTE = plt.get_cmap("tab20").colors[0::2] + plt.get_cmap("tab20").colors[1::2]
# past 20 lines the colours come round again with the next marker, so no two lines of a panel look alike
STYLES = cycler(marker=["o", "s", "^", "D", "v"]) * cycler(color=PALETTE)


NO_RATIO_LINE = "nothing to draw: a line needs a dense run\nor a top-k setting with error feedback"


def plot_accuracy_vs_ratio(runs: pd.DataFrame, out: Path) -> None:
    """One line per data, model, masking, index policy and run length: a masked policy's points are never pooled
    with another policy's (each line starts from the same dense point, so a policy run at one ratio is a line from
    dense to it; a line named for its field width only from a dense run of that width), and masking protocols with
    the same results share one line. The x ticks are the ratios run. Up to MAX_LINES lines share one panel; more
    are a panel per data, partition and model, and a crowded one a panel per condition, as in the other plots."""
    if "field_bits" not in runs:
        runs = runs.assign(field_bits=np.nan)
    runs = envs_apart(runs)
    # clients kept memories
    memory = report._memory(runs["index_policy"]) & ~report._broadcast_only(runs["index_policy"])
    base = runs[(runs["compression"] == "none") | ((runs["compression"] == "topk") &
                                                   (runs["error_feedback"].astype(bool) | memory))]
    base = base.assign(ratio=np.where(base["compression"] == "none", 1.0, base["ratio"]))
    lengths = base["rounds"].nunique() > 1
    base = base.assign(**{c: base[c].fillna("") if c in base else "" for c in ("other", "condition", "codec_other")})
    lines: dict[tuple, tuple[pd.DataFrame, list[str], tuple]] = {}
    # a masked line is labelled with its field where the masked lines of its data, model and length differ in it
    widths = base[(base["ratio"] < 1.0) & (base["secagg"] != "none")].groupby(
        ["dataset", "partition", "model", "rounds"])["field_bits"].nunique().gt(1)
    for (dataset, partition, model, secagg, rounds, other), g in base.groupby(["dataset", "partition", "model",
                                                                                 "secagg", "rounds", "other"]):
        dense, sparse = g[g["ratio"] == 1.0], g[g["ratio"] < 1.0]
        widths_differ = bool(widths.get((dataset, partition, model, rounds), False))
        name = f"{model} ({int(g['n_params'].iloc[0]):,} params), {dataset} {partition}"
        length, codec_other = f", {rounds} rounds" if lengths else "", g["codec_other"].iloc[0]
        run_length = length + (f", {other}" if other else "")
        # its panel: data group, condition, and the label's tail there (the codec's keys alone)
        place = ((dataset, partition, model), g["condition"].iloc[0], length + (f", {codec_other}" if codec_other
                                                                                else ""))
        for (policy, bits), p in sparse.groupby(["index_policy", "field_bits"], dropna=False) if len(sparse) \
                else [((None, None), sparse)]:
            anchor = dense
            if widths_differ and not pd.isna(bits):
                policy = f"{policy}, {bits:.0f}-bit field"
                # a line named for its width starts from a dense run of that width (or of none recorded) only
                anchor = dense[dense["field_bits"].isna() | (dense["field_bits"] == bits)]
            # a run without a final accuracy (NaN) is not a 0; a point of one run has no spread to draw
            s = pd.concat([anchor, p]).groupby("ratio")["final_accuracy"].agg(["mean", "std"]).dropna(subset=["mean"])
            s = s.assign(std=s["std"].fillna(0)).sort_index()
            key = (name, policy if secagg != "none" else None, run_length, secagg == "none", tuple(s.index),
                   tuple(s["mean"].round(6)))
            lines.setdefault(key, (s, [], place))[1].append(secagg)
    drawn = _ratio_panels(lines)
    entries = max((len(v) for v in drawn.values()), default=0)
    if len(drawn) == 1:
        fig, ax = plt.subplots(figsize=(9, 4.5 + 0.12 * min(entries, 40)))  # the legend goes below the axes
        ax.set_prop_cycle(STYLES)
        axes = np.array([[ax]])
    else:
        fig, axes = _panels(len(drawn), entries)
    # across panels a line keeps its look; unmasked lines (the baselines) take the first, strong colours
    order = sorted({(not plain, label) for v in drawn.values() for label, (_, plain), _ in v})
    looks = dict(zip((label for _, label in order), STYLES)) if len(drawn) > 1 else {}
    for ax, (title, panel) in zip(axes.flat, drawn.items()):
        for label, (s, plain), _ in panel:
            # a bar stops at 0 and 1, where accuracy does (the std of seeds of which some blew up exceeds the mean)
            # arrays, not Series: matplotlib floats a one-point Series, which pandas 2 warns is deprecated
            mean, std = s["mean"].to_numpy(), s["std"].to_numpy()
            ax.errorbar(s.index.to_numpy(), mean, yerr=[np.minimum(std, mean), np.minimum(std, 1 - mean)], capsize=3,
                        linestyle="-" if plain else "--", label=label, **looks.get(label, {}))
        ax.set_xscale("log")
        ratios = sorted({r for _, (s, _), _ in panel for r in s.index})
        ax.set_xticks(ratios, [f"{r:g}" for r in ratios])  # under a decade apart, log labels of minor ticks overlap
        ax.minorticks_off()
        ax.set_xlabel("compress ratio (fraction of entries kept; 1 = dense)")
        ax.grid(alpha=0.3)
        if title:
            ax.set_title(title, fontsize=9)
        if panel:
            _legend_below(ax)
        else:  # an empty frame would read as a broken plot
            ax.text(0.5, 0.5, NO_RATIO_LINE, ha="center", va="center", transform=ax.transAxes)
    _share_limits([(*(panel[0][2] if panel else (None, None)), None) for panel in drawn.values()], axes)
    for ax in axes[:, 0]:
        ax.set_ylabel("final test accuracy")
    heading = "Top-k with error feedback: accuracy vs. ratio\n(mean ± std over seeds; dashed: masked)"
    if len(drawn) == 1:
        axes[0, 0].set_title(heading)
        fig.tight_layout()
    else:
        _layout_under_title(fig, heading)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def envs_apart(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs whose environments can give different numbers (another device or torch version) are separate lines, as
    the table keeps them: where the frame holds several, each row's `other` settings (and its codec's, which name a
    line in a panel split by condition) end with them. The backend, the workers and the cores give identical
    results, so their runs are one line here (the table splits them for their seconds)."""
    if "env" not in frame:
        return frame
    numerics = frame["env"].astype(str)
    if "device" in frame and "env_torch" in frame:
        known = frame["device"].notna() & frame["env_torch"].notna()
        numerics = numerics.where(~known, frame["device"].astype(str) + ", torch " + frame["env_torch"].astype(str))
    if numerics.nunique() <= 1:
        return frame
    env = "[" + numerics + "]"

    def ending(column: str):
        before = frame[column].fillna("") if column in frame else pd.Series("", index=frame.index)
        return np.where(before != "", before + " " + env, env)
    return frame.assign(other=ending("other"), codec_other=ending("codec_other"))


def _ratio_panels(lines: dict) -> dict[str, list]:
    """title -> [(label, (points, plain), (group, condition or None))]: every line on one untitled panel while
    they are at most MAX_LINES; else a panel per data, partition and model, and a panel per condition of a group
    of more than MAX_LINES lines under several conditions (its lines named by their codec settings alone)."""
    def masked(policy, plain, protocols) -> str:
        return "" if plain else f", {'/'.join(protocols)}" + (f" {policy}" if policy is not None else " (dense)")
    if len(lines) <= MAX_LINES:
        return {"": [(f"{name}{masked(policy, plain, protocols)}{run_length}", (s, plain), (None, None))
                     for (name, policy, run_length, plain, _, _), (s, protocols, _) in lines.items()]}
    groups: dict[tuple, list] = {}
    for key, (s, protocols, place) in lines.items():
        groups.setdefault(place[0], []).append((key, s, protocols, place))
    out: dict[str, list] = {}
    for group, members in groups.items():
        split = len(members) > MAX_LINES and len({place[1] for *_, place in members}) > 1
        for (name, policy, run_length, plain, _, _), s, protocols, (_, condition, codec_other) in \
                sorted(members, key=lambda m: m[3][1] if split else ""):
            what = "no masking" if plain else f"masked{masked(policy, plain, protocols)}"
            title = _panel_title(name, condition if split else None)
            out.setdefault(title, []).append((f"{what}{codec_other if split else run_length}", (s, plain),
                                              (group, condition if split else None)))
    return out


def _panels(count: int, entries: int):
    """(figure, axes) for `count` panels three to a row, each row tall enough for a legend of up to `entries`
    lines below its panels (a legend inside hid the curves; beside them it ran off the figure)."""
    cols = min(count, 3)
    grid_rows = -(-count // cols)
    fig, axes = plt.subplots(grid_rows, cols, figsize=(5.5 * cols, (4.2 + 0.12 * min(entries, 40)) * grid_rows),
                             squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    for ax in axes.flat:
        ax.set_prop_cycle(STYLES)
    return fig, axes


def _legend_below(ax) -> None:
    """A fixed distance under the axes, clear of the axis label whatever the panel's height."""
    below = ax.transAxes + ScaledTranslation(0, -0.5, ax.figure.dpi_scale_trans)  # 0.5 inch under the axes
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below, frameon=False)


MAX_LINES = 12  # a panel of more lines whose runs ran under several conditions is split, one panel per condition


def _data_panels(frame: pd.DataFrame, names, length: str) -> list[tuple[tuple, str | None, pd.DataFrame]]:
    """(dataset, partition, model), condition, rows with each row's line as `setting` (`names(rows)`) and `length`:
    a panel per data, partition and model; one of more than MAX_LINES lines whose runs differ in settings outside the
    codec and the masking (stragglers, server momentum, Dirichlet alpha: the `condition` column) is a panel per
    condition, whose lines are named by their codec's settings alone (32 lines on one panel could not be told apart),
    named over the whole group so that a line reads the same in each of its panels."""
    frame = frame.assign(**{c: frame[c].fillna("") if c in frame else "" for c in ("condition", "codec_other")})
    out = []
    for key, g in frame.groupby(["dataset", "partition", "model"]):
        g = g.assign(setting=names(g))
        if len(set(zip(g["setting"], g[length]))) > MAX_LINES and g["condition"].nunique() > 1:
            g = g.assign(setting=names(g.assign(other=g["codec_other"])))
            out += [(key, condition, c) for condition, c in g.groupby("condition")]
        else:
            out.append((key, None, g))
    return out


def _panel_title(name: str, condition: str | None) -> str:
    return name if condition is None else f"{name}\n" + "\n".join(textwrap.wrap(condition or "(none)", 70))


def _split_styles(panels, length: str) -> dict[tuple, dict[tuple, dict]]:
    """For each data group split into panels: each line's look, the same in every panel of the group (each panel's
    own cycle would give one setting a new colour per condition)."""
    lines: dict[tuple, set] = {}
    for key, condition, g in panels:
        if condition is not None:
            lines.setdefault(key, set()).update(zip(g["setting"], g[length]))
    return {key: dict(zip(sorted(found), STYLES)) for key, found in lines.items()}


def _share_limits(panels, axes, x: bool = False) -> None:
    """One y range (and with `x`, one x range) over the panels of a split group, so its conditions compare by
    eye."""
    groups: dict[tuple, list] = {}
    for (key, condition, _), ax in zip(panels, axes.flat):
        if condition is not None:
            groups.setdefault(key, []).append(ax)
    for group in groups.values():
        for get, set_ in [("get_ylim", "set_ylim")] + ([("get_xlim", "set_xlim")] if x else []):
            limits = [getattr(ax, get)() for ax in group]
            for ax in group:
                getattr(ax, set_)(min(lo for lo, _ in limits), max(hi for _, hi in limits))


def _finish(fig, axes, panels, ylabel: str, title: str, out: Path, share_x: bool = False) -> None:
    """A panelled figure's shared ranges (_share_limits), its row labels and title, saved and closed."""
    _share_limits(panels, axes, x=share_x)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    _layout_under_title(fig, title)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _layout_under_title(fig, title: str) -> None:
    """The figure's title over its panels, laid out again below it where the first row's titles reach into it:
    tight_layout leaves room for the title's height but not for the 2% of the figure that its default place keeps
    above it, more than its padding in a tall figure (three or four rows of panels under two-line titles)."""
    heading = fig.suptitle(title)
    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    bottom = heading.get_window_extent(renderer).y0
    if any(ax.title.get_window_extent(renderer).y1 > bottom for ax in fig.axes if ax.get_visible() and ax.get_title()):
        heading.set_in_layout(False)  # the rectangle below it leaves it out already
        fig.tight_layout(rect=(0, 0, 1, bottom / fig.bbox.height))


def _line_count(panel) -> int:
    return len(set(zip(panel[2]["setting"], panel[2]["length"])))


def plot_accuracy_vs_bytes(runs: pd.DataFrame, out: Path) -> None:
    """One panel per data, partition and model (three to a row; a crowded one per condition, _data_panels): each
    setting's final accuracy against its cumulative upload per client of the population (every client's bytes over
    the run / num_clients, as the table's upload to target), a point per ratio; runs of different lengths are
    separate lines."""
    panels = _data_panels(envs_apart(runs).assign(length=runs["rounds"]),
                          lambda g: report.setting_names(g, ratio=False), "length")
    styles = _split_styles(panels, "length")
    fig, axes = _panels(len(panels), max(map(_line_count, panels)))
    for ax, ((dataset, partition, model), condition, g) in zip(axes.flat, panels):
        several = g["rounds"].nunique() > 1
        for (name, rounds), c in g.groupby(["setting", "rounds"]):
            s = c.groupby("ratio")[["upload_total_per_client", "final_accuracy"]].mean().sort_values(
                "upload_total_per_client")
            ax.plot(s["upload_total_per_client"], s["final_accuracy"],
                    label=f"{name} ({rounds} rounds)" if several else name,
                    **styles.get((dataset, partition, model), {}).get((name, rounds), {}))
        ax.set_xscale("log")
        ax.set_title(_panel_title(f"{model} ({int(g['n_params'].iloc[0]):,} params), {dataset} ({partition})",
                                  condition), fontsize=9)
        ax.set_xlabel("cumulative upload per client of the population (bytes)")
        ax.grid(alpha=0.3)
        _legend_below(ax)
    _finish(fig, axes, panels, "final test accuracy", "Accuracy vs. bytes sent, every codec\n(points: ratios, mean "
            "over seeds)", out, share_x=True)


def plot_accuracy_vs_round(rows: pd.DataFrame, out: Path) -> None:
    """One panel per data, partition and model (three to a row; a crowded one per condition, _data_panels): test
    accuracy each round, mean over seeds, per setting."""
    rows = envs_apart(rows.dropna(subset=["accuracy"]))
    length = rows.groupby("run_id")["round"].transform("max") + 1
    panels = _data_panels(rows.assign(length=length), report.setting_names, "length")
    styles = _split_styles(panels, "length")
    fig, axes = _panels(len(panels), max(map(_line_count, panels)))
    for ax, ((dataset, partition, model), condition, g) in zip(axes.flat, panels):
        several = g["length"].nunique() > 1  # runs of different lengths are never averaged as seeds
        for (name, rounds), c in g.groupby(["setting", "length"]):
            curve = c.groupby("round")["accuracy"].mean()
            ax.plot(curve.index + 1, curve.to_numpy(), label=f"{name} ({rounds} rounds)" if several else name,
                    linewidth=1.2, linestyle="--" if "+" in name else "-", markersize=3,
                    markevery=max(1, len(curve) // 8),
                    **styles.get((dataset, partition, model), {}).get((name, rounds), {}))
        ax.set_title(_panel_title(f"{model}, {dataset} ({partition})", condition), fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        _legend_below(ax)
    _finish(fig, axes, panels, "test accuracy (mean over seeds)", "Accuracy vs. round (dashed: masked)", out)


def plot_time_breakdown(t_runs: pd.DataFrame, out: Path) -> None:
    """One bar per setting, environment, host and run length (seconds are never averaged across machines, backends
    or lengths of run); a black tick marks the round's wall time, which stages summed over the cohort can exceed."""
    t_runs = t_runs.assign(setting=report.setting_names(t_runs), env=t_runs["env"] if "env" in t_runs else "",
                           host=t_runs["host"] if "host" in t_runs else "")
    # a stage a setting has not (no masking: t_mask is blank) is 0 s; a blank would stop the stack there
    keys = ["dataset", "partition", "model", "setting", "env", "host", "rounds"]
    g = t_runs.groupby(keys)[report.STAGES + ["t_round"]].mean().fillna(0.0)
    g["other"] = (g["t_round"] - g[report.STAGES].sum(axis=1)).clip(lower=0)
    envs, several, lengths = (g.index.get_level_values(k).nunique() > 1 for k in ("env", "host", "rounds"))
    tag = hosts.letters(g.index.get_level_values("host"))  # as the table letters them
    names = [f"{d} ({p}) {m} {s}" + (f", {r:g} rounds" if lengths else "") + (f" [{e}]" if envs else "")
             + (f" [host {tag[h]}]" if several else "") for d, p, m, s, e, h, r in g.index]
    # horizontal bars, so the settings' names read level however long or many they are; the figure is widened to
    # the names below, laid out at the dpi it is saved at (text does not scale exactly with the dpi)
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.26 * len(g)), dpi=120)
    left = np.zeros(len(g))
    for stage in report.STAGES + ["other"]:
        ax.barh(range(len(g)), g[stage], left=left, label=stage.removeprefix("t_"))
        left += g[stage].to_numpy()
    ax.scatter(g["t_round"], range(len(g)), marker="|", s=200, color="black", zorder=3, label="round (wall)")
    ax.set_yticks(range(len(g)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()  # the first setting by name on top
    ax.set_xlabel("\n".join(["seconds per round", *(textwrap.wrap(f"hosts: {hosts.legend(tag)}", 100) if several
                                                     else [])]), fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("Where a round's time goes, by stage\n(client stages summed over the cohort, a carried evaluation "
                 "over the workers;\nother = the rest of the round; unmask, broadcast and sync are in it)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.canvas.draw()  # the names' widths as drawn: the bars get 7 inches beside the longest, the legend 1.5
    widest = max(t.get_window_extent().width for t in ax.get_yticklabels()) / fig.dpi
    fig.set_size_inches(widest + 8.5, fig.get_size_inches()[1])
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
