"""Seconds of evaluating a model on its test split as a round does (`fl.training.evaluate_batches`: accuracy, loss
and the logits' spread and predicted classes, whose float64 copy of each batch's logits tells a collapsed model
from a poor one) against the same batches scored for accuracy and loss only (what a round recorded before the
spread). Both run here, alternated, on the same model and batches: compare their ratio, not absolute seconds.

    python -m experiments.bench_eval      # Fashion-MNIST's 10,000 test images, lenet and cnn_wide, untrained
                                          # weights of seed 0; results/bench_eval.{md,csv}
    python -m experiments.bench_eval --dataset digits --models lenet --out /tmp/bench_eval   # offline, seconds
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd
import torch
from torch import nn

import fl
from experiments.args import each_once, positive_int, summary
from experiments.codec_bench import machine
from experiments.outputs import check_target, command_line, table_file, write_table
from fl.data import load_dataset
from fl.models import build_model
from fl.plan import model_section
from fl.scores import batch_rows, combine, n_batches
from fl.training import as_tensor, evaluate_batches

MODELS = ("lenet", "cnn_wide")


@torch.inference_mode()
def accuracy_and_loss(model: nn.Module, x, y, batches: int, size: int) -> tuple[float, float]:
    """The baseline: the round's batches scored for accuracy and summed loss only."""
    model.eval()
    correct, loss = 0, 0.0
    for b in range(batches):
        xb, yb = as_tensor(x[b * size:(b + 1) * size]), as_tensor(y[b * size:(b + 1) * size])
        logits = model(xb)
        loss += float(nn.functional.cross_entropy(logits, yb, reduction="sum").double())
        correct += int((logits.argmax(1) == yb).sum())
    return correct / len(y), loss / len(y)


def measure(dataset: str, model_name: str, reps: int) -> dict:
    cfg = fl.compose([f"dataset={dataset}", f"model={model_name}"])
    data = load_dataset(cfg.dataset, 0)
    torch.manual_seed(0)
    model = build_model(model_section(cfg), data.input_shape, data.num_classes)
    x, y = data.x_test, data.y_test
    batches, size = n_batches(len(y)), batch_rows(len(y))
    scores = combine(evaluate_batches(model, x, y, 0, batches), len(y))
    plain = accuracy_and_loss(model, x, y, batches, size)
    if scores.accuracy != plain[0] or not np.isclose(scores.loss, plain[1], rtol=1e-12):
        raise AssertionError(f"{model_name}: the two evaluations disagree: {scores[:2]} against {plain}")
    seconds = {"round's evaluation": [], "accuracy and loss only": []}
    for _ in range(reps):  # alternated, so a change in the host's load falls on both
        for name, call in (("round's evaluation", lambda: evaluate_batches(model, x, y, 0, batches)),
                           ("accuracy and loss only", lambda: accuracy_and_loss(model, x, y, batches, size))):
            t0 = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - t0)
    ours, base = (float(np.median(seconds[k])) for k in seconds)
    return {"dataset": dataset, "model": model_name, "test_images": len(y), "batches": batches, "reps": reps,
            "evaluation_s": ours, "accuracy_loss_only_s": base, "ratio": ours / base,
            "spread_share": (ours - base) / ours}


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--dataset", choices=("fashion_mnist", "digits"), default="fashion_mnist")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--reps", type=positive_int, default=7, help="repetitions of each (median)")
    ap.add_argument("--out", default="results/bench_eval")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    each_once(ap, "--models", args.models)
    command = command_line("experiments.bench_eval", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    torch.set_num_threads(1)  # as a Ray worker evaluates: one core each
    load = os.getloadavg()[0]
    table = pd.DataFrame([measure(args.dataset, m, args.reps) for m in args.models])
    md = table.to_markdown(index=False, floatfmt=".4f")
    print(md)
    about = (f"Machine: {machine()}, torch {torch.__version__}, one thread; load average {load:.1f} at the start. "
             "Medians over the repetitions, the two evaluations alternated on the same model and batches: their "
             "ratio is the figure. spread_share: the share of a round's evaluation seconds that the spread and the "
             "predicted-class counts add.")
    write_table(args.out, "Evaluation seconds: the round's scores against accuracy and loss only", command, about,
                table, md)
    return table


if __name__ == "__main__":
    main()
