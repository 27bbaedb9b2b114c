"""How much of a cohort's summed update each way of choosing k positions keeps: the shared index set that
masking needs, chosen from each `fresh` summary or from a dense one (`exact`, `energy`), against per-client
top-k (which cannot be masked). No training loop of the product runs here: it trains FedAvg (dense) for some
rounds and, at a few of them, measures, one round at a time (no error feedback):

- the relative error |U - U_hat|^2 / |U|^2 of each approximation U_hat of the cohort's summed update U;
- the movement sent: the share of the clients' own squared updates sum_i |u_i|^2 at the positions each client
  sends. With error feedback the rest waits in the client's residual, on shards about ten rounds until its
  next visit; top-k of the summed squares (`energy`) sends the most a shared set can, top-k of the sum less.

`marginals` estimates the summed squares of each weight matrix by a rank-one matrix. Two rows ask whether its
estimate finds the right entries but ranks them wrongly: a third masked exchange of the exact summed squares at its
top 2k or 3k entries, the top k of which is the set. Two more ask what a better low-rank estimate would buy: the
best rank-r approximation of the exact summed squares (an SVD: a bound on any summary of that rank, not itself a
summary), and a two-sided random sketch of them (Tropp et al. 2017), which is linear in the squares and so could
be masked as `marginals` is. The last rows ask whether a low-rank linear
codec would do better than any index set: each weight matrix's share of the update projected on a rank-r subspace
shared by the cohort (PowerSGD's, Vogels et al. 2019: one masked exchange sums P = M Q for a public random Q, a
second sums M^T P after P is orthonormalized; both are linear, so both could be masked), its numbers counted.

    python -m experiments.index_sets          # writes results/index_sets_fmnist.{csv,md}

Fashion-MNIST, lenet, 100 clients / 10 a round, 1 local epoch, lr 0.1, k = ceil(0.01 n), IID and 2-class
shards, seed 0; needs the Debian package dataset-fashion-mnist (or the files under data/).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fl
from experiments.args import ratio, summary
from experiments.codec_bench import machine
from experiments.outputs import check_target, command_line, table_file, together
from compression.blocks import BlockEnergy
from compression.exact_summary import EnergySummary, ExactSummary
from compression.marginals import Marginals
from compression.selection import topk_count, topk_positions
from fl.data import load_dataset
from fl.partitions import partition
from fl.models import build_model, flatten_parameters, get_flat, set_flat
from fl.training import SGD, train_local

ROUNDS = 16
MEASURED = (0, 2, 5, 10, 15)


class LowRankEnergy:
    """Each weight matrix's summed squares estimated at rank r; the top k of the estimate, with CountSketch's
    interface. `sketch_rows` None: the best rank-r approximation (SVD of the exact squares, which the table
    holds in full). Otherwise Y = E Omega (r columns) and W = Psi E (`sketch_rows` rows) from public Gaussian test
    matrices whose first column and row are ones (so Y and W include `marginals`' row and column energies), and
    E ~ Q (Psi Q)^+ W with Q an orthonormal basis of Y; `cols` counts those cells. 1-D tensors: their squares."""

    def __init__(self, shapes, rank: int, sketch_rows: int | None = None, seed: int = 0):
        layout = Marginals(shapes)  # the same matrices: (offset, out, rest), rest 0 for a tensor taken as is
        self.parts, self.length = layout.parts, layout.length
        self.rank, self.sketch_rows, self.seed = rank, sketch_rows, seed
        self.cols = None  # the SVD bound is no summary
        if sketch_rows:
            self.cols = sum(m * min(rank, m, n) + n * min(sketch_rows, m, n) if n else m for _, m, n in self.parts)

    def sketch(self, vector: np.ndarray) -> np.ndarray:
        return np.square(vector, dtype=np.float64)  # the squares; E's sketches are linear in them

    def estimate(self, energy: np.ndarray) -> np.ndarray:
        rng, out = np.random.default_rng(self.seed), np.array(energy, np.float64)
        for offset, m, n in self.parts:
            if not n:
                continue
            e, r = out[offset:offset + m * n].reshape(m, n), min(self.rank, m, n)
            if self.sketch_rows is None:
                u, s, vt = np.linalg.svd(e, full_matrices=False)
                approx = (u[:, :r] * s[:r]) @ vt[:r]
            else:
                omega = np.hstack([np.ones((n, 1)), rng.standard_normal((n, r - 1))])
                psi = np.vstack([np.ones((1, m)), rng.standard_normal((min(self.sketch_rows, m, n) - 1, m))])
                q = np.linalg.qr(e @ omega)[0]
                approx = q @ np.linalg.lstsq(psi @ q, psi @ e, rcond=None)[0]
            out[offset:offset + m * n] = approx.ravel()
        return out

    def heavy_hitters(self, energy: np.ndarray, k: int) -> np.ndarray:
        return topk_positions(self.estimate(energy).astype(np.float32), k)


class CandidateEnergy:
    """`marginals` narrowed by a third masked exchange: the top `c` k of its estimate are candidates, whose exact
    summed squares the clients then mask (c k cells); the top k of those is the set. `cols` counts both tables."""

    def __init__(self, shapes, k: int, c: int):
        self.marginals = Marginals(shapes)
        self.candidates = min(c * k, self.marginals.length)
        self.cols = self.marginals.cols + self.candidates

    def sketch(self, vector: np.ndarray) -> np.ndarray:  # both tables; the energies are read at the candidates only
        return np.concatenate([self.marginals.sketch(vector).ravel(), np.square(vector, dtype=np.float64)])

    def heavy_hitters(self, table: np.ndarray, k: int) -> np.ndarray:
        estimate = self.marginals.estimate(table[:self.marginals.cols])
        candidates = topk_positions(estimate.astype(np.float32), self.candidates)
        energy = table[self.marginals.cols:][candidates]
        return np.sort(candidates[topk_positions(energy.astype(np.float32), k)])


class SharedSubspace:
    """The part of a client's update a shared rank-r subspace of each weight matrix sends: P P^T M. `basis`
    "power": P = U Q of the cohort's summed update U, orthonormalized, one power step from a public Gaussian Q
    (what two masked exchanges compute); "sum": U's top r left singular vectors (the least error of the sum, a
    bound); "movement": the top r eigenvectors of sum_i M_i M_i^T (the most of the clients' movement, a bound).
    1-D tensors go whole. `numbers`: what a client sends in the two exchanges, r (m + n) a matrix."""

    def __init__(self, shapes, rank: int, basis: str = "power", seed: int = 0):
        self.parts, self.rank, self.basis, self.seed = Marginals(shapes).parts, rank, basis, seed
        self.numbers = sum(min(rank, m, n) * (m + n) if n else m for _, m, n in self.parts)
        self.bases: list[np.ndarray | None] = []

    def fit(self, updates: list[np.ndarray]) -> "SharedSubspace":
        rng, self.bases = np.random.default_rng(self.seed), []
        for offset, m, n in self.parts:
            if not n:
                self.bases.append(None)
                continue
            blocks = [u[offset:offset + m * n].reshape(m, n).astype(np.float64) for u in updates]
            u, r = np.sum(blocks, axis=0), min(self.rank, m, n)
            if self.basis == "power":
                self.bases.append(np.linalg.qr(u @ rng.standard_normal((n, r)))[0])
            elif self.basis == "sum":
                self.bases.append(np.linalg.svd(u, full_matrices=False)[0][:, :r])
            else:
                self.bases.append(np.linalg.eigh(sum(b @ b.T for b in blocks))[1][:, ::-1][:, :r])
        return self

    def __call__(self, vector: np.ndarray) -> np.ndarray:
        out = np.array(vector, np.float64)
        for (offset, m, n), p in zip(self.parts, self.bases):
            if p is not None:
                block = out[offset:offset + m * n].reshape(m, n)
                out[offset:offset + m * n] = (p @ (p.T @ block)).ravel()
        return out


def choices(updates: list[np.ndarray], shapes, k: int) -> dict[str, tuple[object, int | None]]:
    """Each way of choosing: (shared positions, None for per-client top-k, or a SharedSubspace's projection;
    cells of its masked summary)."""
    length = updates[0].size
    summaries = {"top-k of the sum (`exact`, a dense summary)": ExactSummary(length),
                 "top-k of the summed squares (`energy`, a dense summary)": EnergySummary(length),
                 "fresh: marginals (the default)": Marginals(shapes),
                 **{f"marginals' top {c}k, then the top k of their exact summed squares (a third exchange)":
                    CandidateEnergy(shapes, k, c) for c in (2, 3)},
                 **{f"fresh: blocks of {b}": BlockEnergy(length, b) for b in (64, 32, 16)},
                 **{f"best rank-{r} approximation of the summed squares (SVD: a bound, not a summary)":
                    LowRankEnergy(shapes, r) for r in (2, 5)},
                 **{f"two-sided sketch of the summed squares, rank {r}": LowRankEnergy(shapes, r, 2 * r)
                    for r in (2, 5, 10)}}
    out = {name: (summary.heavy_hitters(np.sum([summary.sketch(u) for u in updates], 0), k), summary.cols)
           for name, summary in summaries.items()}
    out["per-client top-k (no shared set)"] = (None, None)
    for rank in (1, 2, 4):
        for basis, how in (("sum", "the sum's top singular vectors, a bound"),
                           ("movement", "the clients' top joint singular vectors, a bound"),
                           ("power", "one power step")):
            shared = SharedSubspace(shapes, rank, basis).fit(updates)
            cells = sum(min(rank, m, n) * m for _, m, n in shared.parts if n) if basis == "power" else None
            out[f"shared rank-{rank} subspace of each matrix ({how}; {shared.numbers:,} numbers)"] = (shared, cells)
    return out


def relative_error(updates: list[np.ndarray], positions, k: int) -> float:
    total = np.sum(updates, axis=0).astype(np.float64)
    if callable(positions):
        approx = positions(total)
    elif positions is None:
        approx = np.zeros_like(total)
        for u in updates:
            idx = topk_positions(u, k)
            approx[idx] += u[idx]
    else:
        approx = np.zeros_like(total)
        approx[positions] = total[positions]
    return float(np.sum((total - approx) ** 2) / np.sum(total ** 2))


def movement_sent(updates: list[np.ndarray], positions, k: int) -> float:
    """sum_i |u_i at what client i sends|^2 / sum_i |u_i|^2."""
    if callable(positions):
        sent = sum(float(np.sum(np.square(positions(u)))) for u in updates)
        return sent / sum(float(np.sum(np.square(u, dtype=np.float64))) for u in updates)
    sent = sum(float(np.sum(np.square(u[topk_positions(u, k) if positions is None else positions], dtype=np.float64)))
               for u in updates)
    return sent / sum(float(np.sum(np.square(u, dtype=np.float64))) for u in updates)


def measure(scheme: str, ratio: float, seed: int) -> pd.DataFrame:
    cfg = fl.compose(["dataset=fashion_mnist", "model=lenet"])
    data = load_dataset(cfg.dataset, seed)
    parts = partition(data.y_train, 100, scheme, 0.5, seed, shards_per_client=2)
    torch.manual_seed(seed)
    model = flatten_parameters(build_model(cfg.model, data.input_shape, data.num_classes))
    shapes = [tuple(p.shape) for p in model.parameters()]
    weights = get_flat(model).copy()
    k = topk_count(weights.size, ratio)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train).long()
    rng, rows = np.random.default_rng(seed), []
    for r in range(ROUNDS):
        updates = []
        for cid in rng.choice(100, 10, replace=False):
            set_flat(model, weights)
            train_local(model, SGD(model.parameters(), 0.1), x[parts[cid]], y[parts[cid]], 1, 32, 1000 * r + int(cid))
            updates.append((get_flat(model) - weights) / 10)
        if r in MEASURED:
            for name, (positions, cells) in choices(updates, shapes, k).items():
                rows.append({"partition": scheme, "round": r, "selection": name, "summary_cells": cells,
                             "relative_error": relative_error(updates, positions, k),
                             "movement_sent": movement_sent(updates, positions, k)})
        weights = weights + np.sum(updates, axis=0)
    return pd.DataFrame(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--ratio", type=ratio, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/index_sets_fmnist")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    command = command_line("experiments.index_sets", argv)
    check_target(table_file(args.out, ".md"), command, args.force)
    torch.set_num_threads(1)  # as a Ray worker trains: the figures then depend on the CPU, not its core count
    rows = pd.concat([measure(scheme, args.ratio, args.seed) for scheme in ("iid", "shards")])
    table = rows.pivot_table(index="selection", columns="partition", values=["relative_error", "movement_sent"],
                             aggfunc="mean", sort=False)
    cells = rows.groupby("selection", sort=False)["summary_cells"].first()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Which k positions keep a cohort's summed update", "",
             f"Regenerate: `{command}`", "",
             "Fashion-MNIST, lenet, 100 clients / 10 a round, dense FedAvg (1 local epoch, lr 0.1), "
             f"k = ceil({args.ratio:g} n) "
             f"of 107,786; relative error |U - U_hat|^2 / |U|^2 of each approximation of the cohort's summed update U, "
             f"one round at a time without error feedback, mean over rounds {', '.join(map(str, MEASURED))} of "
             f"0-{ROUNDS - 1} (counted from 0), seed {args.seed}. Shared sets keep U at k positions; per-client "
             f"top-k sums each client's own k. Movement "
             f"sent: the share of the clients' own squared updates at the positions each sends (with error feedback "
             f"the rest waits in its residual). A shared rank-r subspace sends each client's update projected on it, "
             f"for the numbers named (a client sends k = {topk_count(107786, args.ratio):,} values at a shared set; "
             f"its summary cells are P's, the first exchange).", "",
             f"Machine: {machine()}, torch {torch.__version__}, one thread (another CPU rounds the training's float "
             "sums differently, which moves the figures).", "",
             "| selection | masked summary cells | error of the sum: IID | shards (2 classes) | movement sent: IID "
             "| shards |", "|---|---|---|---|---|---|"]
    for name, r in table.iterrows():
        n = cells[name]
        lines.append(f"| {name} | {'' if pd.isna(n) else f'{int(n):,}'} | {r['relative_error', 'iid']:.3f} | "
                     f"{r['relative_error', 'shards']:.3f} | {r['movement_sent', 'iid']:.3f} | "
                     f"{r['movement_sent', 'shards']:.3f} |")
    md = "\n".join(lines) + "\n"
    with together(table_file(out, ".csv"), table_file(out, ".md")) as (csv, markdown):
        rows.to_csv(csv, index=False)
        markdown.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
