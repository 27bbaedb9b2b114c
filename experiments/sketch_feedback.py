"""How a client's error-feedback residual grows under each codec, round after round.

    python -m experiments.sketch_feedback [--n 20000] [--rounds 800] [--seed 0]

Each round a client adds a fresh seeded standard-normal update (n entries, float32) to its residual, encodes
the sum with the codec and keeps what the server did not receive (compression.ErrorFeedback). Printed: the
residual's norm over sqrt(n), an update's expected norm, at rounds 10, 50, 100, ... 1600 up to `rounds` and at
`rounds`, and the same for a client that sends nothing (its residual is every update so far: sqrt(round), not
simulated). A contraction (top-k) settles; a codec whose decoded values
carry an estimation error (the count sketch's heavy hitters) puts that error back into the residual each round,
so its residual keeps growing. Prints a markdown table; writes nothing.
"""
from __future__ import annotations

import argparse

import numpy as np

import compression
from experiments.args import positive_int
from compression.countsketch import CountSketchCompression

CHECKPOINTS = (10, 50, 100, 200, 400, 800, 1600)


def growth(codec, n: int, rounds: int, seed: int) -> dict[int, float]:
    """Residual norm / sqrt(n) (a standard-normal update's expected norm) at each checkpoint up to `rounds`, and
    at `rounds`."""
    rng, feedback, residual, out = np.random.default_rng(seed), compression.ErrorFeedback(codec), None, {}
    for r in range(1, rounds + 1):
        _, residual = feedback.encode(rng.standard_normal(n).astype(np.float32), residual)
        if r in CHECKPOINTS or r == rounds:
            out[r] = float(np.linalg.norm(residual) / np.sqrt(n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=positive_int, default=20_000)
    ap.add_argument("--rounds", type=positive_int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    codecs = {"countsketch 0.1 (5 rows, k = cols/16)": CountSketchCompression(0.1),
              "countsketch 0.01 (5 rows, k = cols/16)": CountSketchCompression(0.01),
              "topk 0.01": compression.get("topk")(0.01)}
    table = {name: growth(codec, args.n, args.rounds, args.seed) for name, codec in codecs.items()}
    rounds = list(next(iter(table.values())))
    table["nothing sent"] = {r: float(np.sqrt(r)) for r in rounds}
    print(f"Residual norm / update norm, n = {args.n}, seed {args.seed}\n")
    print("| codec | " + " | ".join(f"round {r}" for r in rounds) + " |")
    print("|---|" + "---|" * len(rounds))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{row[r]:.1f}" for r in rounds) + " |")


if __name__ == "__main__":
    main()
