"""How alive a saved model's features are, for runs made with `results.save_model=true`: the share of each ReLU's
outputs that are positive on the test split, how many of its units (channels or features) are ever positive, how
much the logits vary across test images, and the largest share of the images given one class. A model whose
features died (a first round that blew up) gives nearly the same logits for every image and sits at chance,
however ordinary its later updates look in the rows.

    python -m experiments.activations <run dirs or results dirs> [--max-test N] [--out results/...]

Each run's model is rebuilt from its config.json and model.npy (read without pickle) and scored on the run's test
split: its accuracy must be the run's last row's (within MATCH, said where it differs: another CPU rounds float sums
differently), else the weights are not the ones the rows describe and the command stops.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from experiments.args import positive_int, summary
from experiments.outputs import check_target, command_line, table_file, write_table
from fl.results import MODEL_NAME, read_rows


MATCH = 0.01  # the most a saved model's accuracy here may differ from its last row's and still be that model


def activity(model, x, batch: int = 500) -> tuple[list[dict], np.ndarray]:
    """(one dict per ReLU call in forward order: the layer that feeds it, the share of its outputs above 0 and its
    units ever above 0 over the images `x`; the logits). A unit is a channel of a convolution's output, a
    feature of a linear layer's. nn.ReLU modules are seen (every model of fl.models applies its ReLUs as modules;
    a block's second ReLU is named for its last normalization, though the shortcut feeds it too). `batch` images
    at a time: a wide model's activations over a whole test split would take gigabytes."""
    import torch

    feeding, last = {}, None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ReLU):
            feeding[module] = last
        elif not list(module.children()) and any(True for _ in module.parameters(recurse=False)):
            last = f"{name} {type(module).__name__}"
    calls: list[list] = []  # per ReLU call in forward order: [layer, positive outputs, outputs, units ever positive]
    seen = [0]  # calls recorded in this batch

    def record(module, _inputs, out):
        on = (out > 0).reshape(out.shape[0], out.shape[1], -1)  # images x units x positions
        if seen[0] == len(calls):
            calls.append([feeding[module] or "input", 0, 0, torch.zeros(out.shape[1], dtype=torch.bool)])
        call = calls[seen[0]]
        call[1] += int(on.sum())
        call[2] += on.numel()
        call[3] |= on.any(2).any(0)
        seen[0] += 1

    hooks = [m.register_forward_hook(record) for m in feeding]
    logits = []
    try:
        model.eval()
        with torch.inference_mode():
            for first in range(0, len(x), batch):
                seen[0] = 0
                logits.append(model(torch.as_tensor(np.asarray(x[first:first + batch], np.float32))).numpy())
    finally:
        for hook in hooks:
            hook.remove()
    rows = [{"layer": layer, "positive": positive / total, "units_alive": f"{int(alive.sum())}/{len(alive)}"}
            for layer, positive, total, alive in calls]
    return rows, np.concatenate(logits)


def load(run: Path):
    """(config, final weights, rows) of a run folder; SystemExit naming what is missing."""
    model_path = run / MODEL_NAME
    if not model_path.exists():
        raise SystemExit(f"{run} has no {MODEL_NAME}: only a run made with results.save_model=true keeps its model")
    cfg = OmegaConf.create(json.loads((run / "config.json").read_text()))
    return cfg, np.load(model_path, allow_pickle=False), read_rows(run / "rounds.csv")


def runs_in(paths, needs: str | None = MODEL_NAME, script: str = "activations") -> list[Path]:
    """The run folders named, and those in a results dir named, in path order; with `needs`, of a results dir's
    only those holding that file (the others are said and skipped; a run folder named without it is refused by
    `load`)."""
    runs = []
    for path in paths:
        if (path / "rounds.csv").exists():
            runs.append(path)
            continue
        found = sorted(p.parent for p in path.glob("*/rounds.csv"))
        if not found:
            raise SystemExit(f"{path} is neither a run folder (rounds.csv) nor a folder of runs")
        for run in found:
            if needs is None or (run / needs).exists():
                runs.append(run)
            else:
                print(f"{script}: skipping {run}: no {needs}", file=sys.stderr)
    return runs


def setting_of(cfg) -> str:
    """A run's setting in a table's words, from its config."""
    fl, data = cfg["fl"], cfg["dataset"]
    split = data["partition"] + (f" {data['alpha']:g}" if data["partition"] == "dirichlet" else "")
    return (f"{split}, secagg={cfg['secagg']['name']}, ratio {cfg['compression']['ratio']:g}, "
            f"fl.lr={fl['lr']:g}, fl.max_update_norm={fl.get('max_update_norm') or 'null'}, seed {cfg['seed']}")


def describe(run: Path, max_test: int | None) -> list[dict]:
    """One row per ReLU of the run's saved model, each with the run's setting, accuracy and logit spread."""
    from fl.data import load_dataset
    from fl.models import build_model, set_flat
    from fl.plan import model_section
    from fl.training import evaluate

    cfg, weights, rows = load(run)
    data = load_dataset(cfg.dataset, int(cfg.seed))
    model = build_model(model_section(cfg), data.input_shape, data.num_classes)
    set_flat(model, weights)
    accuracy, _ = evaluate(model, data.x_test, data.y_test)
    recorded = float(rows["accuracy"].iloc[-1])
    if abs(accuracy - recorded) > MATCH:
        raise SystemExit(f"{run}: the saved model scores {accuracy:.6f} on the test split, its last row "
                         f"{recorded:.6f}: {MODEL_NAME} is not the model of these rows")
    if accuracy != recorded:  # a few images on the edge: float sums round differently on another CPU or device
        print(f"activations: {run}: the saved model scores {accuracy:.6f} here, {recorded:.6f} where it ran",
              file=sys.stderr)
    x = data.x_test if max_test is None else data.x_test[:max_test]
    layers, logits = activity(model, x)
    setting = setting_of(cfg)
    spread = float(logits.std(axis=0).mean())
    top = np.bincount(logits.argmax(1), minlength=logits.shape[1]).max() / len(logits)
    return [{"run": run.name, "setting": setting, "rounds": len(rows), "accuracy": accuracy, "logit_std": spread,
             "top_class_share": top, "relu": i, **layer} for i, layer in enumerate(layers)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("runs", nargs="+", type=Path, help="run folders holding model.npy, or folders of runs")
    ap.add_argument("--max-test", type=positive_int, default=None,
                    help="the first N test images for the activity (accuracy always on the whole split)")
    ap.add_argument("--out", default=None, help="also write <out>.md and <out>.csv")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    command = command_line("experiments.activations", argv)
    if args.out:
        check_target(table_file(args.out, ".md"), command, args.force)
    runs = runs_in(args.runs)
    if not runs:
        raise SystemExit(f"activations: no run under {', '.join(map(str, args.runs))} holds model.npy (only a run "
                         "made with results.save_model=true keeps its model)")
    table = pd.DataFrame([row for run in runs for row in describe(run, args.max_test)])
    table = table.sort_values(["setting", "rounds", "relu"], kind="stable", ignore_index=True)
    lines = ["| run | setting | rounds | accuracy | logit std | top class | layer | positive | units alive |",
             "|---" * 9 + "|"]
    for r in table.itertuples():
        lines.append(f"| {r.run} | {r.setting} | {r.rounds} | {r.accuracy:.3f} | {r.logit_std:.4f} "
                     f"| {r.top_class_share:.2f} | {r.layer} | {r.positive:.4f} | {r.units_alive} |")
    md = "\n".join(lines) + "\n"
    print(md)
    if args.out:
        write_table(args.out, "Feature activity of saved models", command, summary(__doc__), table, md)
    return table


if __name__ == "__main__":
    main()
