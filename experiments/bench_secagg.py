"""Secure aggregation cost per round: client and server seconds and bytes, next to a plain sum.

    python -m experiments.bench_secagg            # writes results/bench_secagg.{csv,md}

Grid: protocol in {dh, secaggplus} x n in {10, 100, 1000} x vector length in {1e4, 1e6} x dropout in {0, 0.1}
(dropout: the fraction of clients that send shares but drop before their masked input, so the server recovers
their masks). Every message is serialized with fl.wire and bytes are len() of it.

Method, per cell:
1. Client: one representative client (id 0, never dropped) runs all four steps for real, each timed with the
   wire decoding of what it receives and the encoding of what it sends. The other n - 1 clients are stubs with
   real key pairs that only encrypt a (random) share pair to the representative, so this costs O(n), not O(n^2).
2. Server: a full round with all n clients simulated, every message through the wire; the server's calls
   (decode, state machine, encode) are timed and its sum is checked against the plain sum. When simulating the
   n clients would exceed the time budget (estimated as n x the representative client's seconds), the server
   side is skipped and the row says so.
3. Plain: decoding and summing the survivors' unmasked vectors as dense ClientUpdates (4 bytes per entry).
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
from cryptography import __version__ as cryptography_version

import secagg
from experiments.args import each_once, positive, positive_int, seed_number, share, summary
from experiments.outputs import check_target, command_line, table_file, together
from fl import wire
from fl.environment import cpu_model
from secagg import shamir
from secagg.keys import encrypt_shares, generate_keypair, transport_keys

STEPS = ("advertise", "share_keys", "masked_input", "unmask")


def _clock() -> float:
    return time.perf_counter()


def cell_setup(protocol: str, n: int, length: int, dropout: float, seed: int):
    ids = list(range(n))
    config = secagg.make_round(protocol, secagg.session_id(f"bench-{seed}", n, ids), ids, length)
    rng = np.random.default_rng(seed)
    dropped = sorted(int(c) for c in rng.choice(ids[1:], int(round(dropout * n)), replace=False))
    return config, dropped


def inputs_for(cid: int, length: int, seed: int) -> np.ndarray:
    return np.random.default_rng((seed, cid)).integers(0, 2**32, length, dtype=np.uint32)


def representative_client(config, dropped, seed):
    """Time client 0 through all four steps against stub peers; per-step (seconds, bytes up, bytes down)."""
    session, rep = config.session, 0
    out = {}
    client = secagg.Client(config, rep)
    x = inputs_for(rep, config.length, seed)

    t = _clock()
    adv = wire.encode_advertise(client.advertise())
    out["advertise"] = [_clock() - t, len(adv), 0]

    peers = {}
    for v in config.participants[1:]:
        c_sk, c_pk = generate_keypair()
        _, s_pk = generate_keypair()
        peers[v] = (c_sk, c_pk, s_pk)
    mine = wire.decode_advertise(adv)
    roster = wire.encode_roster(secagg.KeyRoster(session, ((rep, mine.cipher_public_key, mine.mask_public_key),
                                                           *((v, c, s) for v, (_, c, s) in peers.items()))))
    t = _clock()
    shares = wire.encode_share_keys(client.share_keys(wire.decode_roster(roster)))
    out["share_keys"] = [_clock() - t, len(shares), len(roster)]

    cts = []
    for v in client.graph.neighbours(rep):  # each stub encrypts a well-formed (random) share pair to client 0
        key, _ = transport_keys(peers[v][0], mine.cipher_public_key, session, v, rep)
        payload = shamir.random_field(2 * shamir.CHUNKS).astype("<u4").tobytes()
        cts.append((v, encrypt_shares(key, session, v, rep, payload)))
    bundle = wire.encode_share_bundle(secagg.ShareBundle(session, rep, tuple(cts)))
    t = _clock()
    masked = wire.encode_masked(client.masked_input(wire.decode_share_bundle(bundle), x))
    out["masked_input"] = [_clock() - t, len(masked), len(bundle)]

    survivors = tuple(c for c in config.participants if c not in set(dropped))
    request = wire.encode_unmask_request(secagg.UnmaskRequest(session, survivors, tuple(dropped)))
    t = _clock()
    response = wire.encode_unmask_response(client.unmask(wire.decode_unmask_request(request)))
    out["unmask"] = [_clock() - t, len(response), len(request)]
    return out


def full_round(config, dropped, seed):
    """All n clients and the server through the wire; the server's per-step (seconds, bytes in, bytes out)."""
    length, drop = config.length, set(dropped)
    server = secagg.Server(config)
    clients = {cid: secagg.Client(config, cid) for cid in config.participants}
    out = {step: [0.0, 0, 0] for step in STEPS}

    def serve(step, fn, *args, received=0):
        t = _clock()
        result = fn(*args)
        out[step][0] += _clock() - t
        out[step][1] += received
        return result

    for cid, c in clients.items():
        msg = wire.encode_advertise(c.advertise())
        serve("advertise", lambda m: server.receive_keys(wire.decode_advertise(m)), msg, received=len(msg))
    roster = serve("advertise", lambda: wire.encode_roster(server.roster()))
    out["advertise"][2] += len(roster) * len(clients)

    for cid, c in clients.items():
        msg = wire.encode_share_keys(c.share_keys(wire.decode_roster(roster)))
        serve("share_keys", lambda m: server.receive_shares(wire.decode_share_keys(m)), msg, received=len(msg))
    bundles = serve("share_keys", lambda: {v: wire.encode_share_bundle(b) for v, b in server.bundles().items()})
    out["share_keys"][2] += sum(len(b) for b in bundles.values())

    plain = np.zeros(length, dtype=np.uint32)
    for cid, bundle in bundles.items():
        x = inputs_for(cid, length, seed)
        msg = wire.encode_masked(clients[cid].masked_input(wire.decode_share_bundle(bundle), x))
        if cid in drop:
            continue
        plain += x
        serve("masked_input", lambda m: server.add(wire.decode_masked(m, length)), msg, received=len(msg))
    request = serve("unmask", lambda: wire.encode_unmask_request(server.unmask_request()))
    out["unmask"][2] += len(request) * len(server.survivors)

    for cid in server.survivors:
        msg = wire.encode_unmask_response(clients[cid].unmask(wire.decode_unmask_request(request)))
        serve("unmask", lambda m: server.receive_unmask(wire.decode_unmask_response(m)), msg, received=len(msg))
    total = serve("unmask", server.result)
    if not np.array_equal(total, plain):
        raise AssertionError(f"secure sum differs from the plain sum (n={config.n}, length={length})")
    return out


def plain_sum(config, dropped, seed):
    """Decode and sum the survivors' vectors sent in the clear: (server seconds, bytes per client)."""
    length, drop = config.length, set(dropped)
    total = np.zeros(length, dtype=np.uint32)
    seconds, size = 0.0, 0
    for cid in config.participants:
        if cid in drop:
            continue
        x = inputs_for(cid, length, seed)
        msg = wire.encode_update(0, cid, "none", length, 1.0, x.astype("<u4").tobytes())
        size = len(msg)
        t = _clock()
        total += np.frombuffer(wire.decode_update(msg, 0, length).payload, dtype="<u4")
        seconds += _clock() - t
    return seconds, size


def machine() -> str:
    model = cpu_model()
    return (f"{os.cpu_count()} CPUs (nproc), {model}; Python {platform.python_version()}, numpy {np.__version__}, "
            f"cryptography {cryptography_version}; single-threaded")


def warm_up() -> None:
    """One small untimed round, so one-time library initialization does not land in the first cell."""
    config, dropped = cell_setup("dh", 4, 16, 0.0, 0)
    representative_client(config, dropped, 0)
    full_round(config, dropped, 0)


def measure(row, cell: dict, config, dropped, seed, repeats, budget) -> None:
    """One cell's rows: the representative client, the full round (or why it was skipped), the plain sum."""
    protocol, n, length, dropout = cell["protocol"], cell["n"], cell["length"], cell["dropout"]
    started = _clock()
    runs = [representative_client(config, dropped, seed) for _ in range(repeats)]
    client = {step: [float(np.median([r[step][0] for r in runs])), *runs[0][step][1:]]
              for step in STEPS}
    method = f"one representative client (median of {repeats}); the other n-1 are stubs"
    for step, (sec, up, down) in client.items():
        row(**cell, side="client", step=step, seconds=sec, bytes_up=up, bytes_down=down, method=method)
    c_total = sum(v[0] for v in client.values())
    row(**cell, side="client", seconds=c_total, bytes_up=sum(v[1] for v in client.values()),
        bytes_down=sum(v[2] for v in client.values()), method=method,
        note=f"degree {config.degree or n - 1}, t={config.threshold}")
    estimate = n * c_total
    if estimate > budget:
        row(**cell, side="server", method="skipped",
            note=f"skipped: simulating all {n} clients would take about {estimate:.0f} s "
                 f"({n} x {c_total:.2f} s per client) > budget {budget:.0f} s")
        print(f"{protocol:10s} n={n:5d} L={length:8d} drop={dropout:g}  client {c_total:7.3f} s  "
              f"server skipped (~{estimate:.0f} s to simulate)", flush=True)
    else:
        server = full_round(config, dropped, seed)
        method = "full round: all n clients simulated, sum checked"
        for step, (sec, up, down) in server.items():
            row(**cell, side="server", step=step, seconds=sec, bytes_up=up, bytes_down=down,
                method=method)
        row(**cell, side="server", seconds=sum(v[0] for v in server.values()),
            bytes_up=sum(v[1] for v in server.values()), bytes_down=sum(v[2] for v in server.values()),
            method=method, note=f"{len(dropped)} dropped before masked input")
        print(f"{protocol:10s} n={n:5d} L={length:8d} drop={dropout:g}  client {c_total:7.3f} s  "
              f"server {sum(v[0] for v in server.values()):7.3f} s  "
              f"(cell {_clock() - started:.0f} s)", flush=True)
    p_sec, p_bytes = plain_sum(config, dropped, seed)
    row(**cell, side="plain", seconds=p_sec, bytes_up=p_bytes, method="decode + sum of dense updates",
        note="bytes per client; seconds for the server's sum of the survivors")


def run(protocols, sizes, lengths, dropouts, budget, seed, repeats):
    warm_up()
    rows = []

    def row(**kw):
        base = {"protocol": None, "n": None, "length": None, "dropout": None, "side": None, "step": "total",
                "seconds": float("nan"), "bytes_up": 0, "bytes_down": 0, "method": "", "note": ""}
        base.update(kw)
        base["bytes"] = base["bytes_up"] + base["bytes_down"]
        rows.append(base)

    for protocol in protocols:
        for n in sizes:
            for length in lengths:
                for dropout in dropouts:
                    config, dropped = cell_setup(protocol, n, length, dropout, seed)
                    cell = dict(protocol=protocol, n=n, length=length, dropout=dropout)
                    mark = len(rows)
                    try:
                        measure(row, cell, config, dropped, seed, repeats, budget)
                    except secagg.RoundAborted as err:  # a neighbourhood (secaggplus) kept too few survivors
                        del rows[mark:]
                        row(**cell, side="client", method="aborted", note=f"the round aborted: {err}")
                        print(f"{protocol:10s} n={n:5d} L={length:8d} drop={dropout:g}  aborted: {err}", flush=True)
    return pd.DataFrame(rows)


def _exp(x: int) -> str:
    return f"{x:.0e}".replace("e+0", "e").replace("e+", "e")


def markdown(df: pd.DataFrame, cmd: str, budget: float) -> str:
    tot = df[df["step"] == "total"].set_index(["protocol", "n", "length", "dropout", "side"])
    steps = df[(df["side"] == "client") & (df["step"] != "total")]
    per_step = steps.pivot_table(index=["protocol", "n", "length", "dropout"], columns="step", values="seconds")
    out = ["# Secure aggregation: seconds and bytes per round", "",
           f"Regenerate: `{cmd}`", "",
           f"Machine: {machine()}.", "",
           "Client: one representative client timed through all four steps (wire decode + state machine +",
           "wire encode; each step the median of several runs, client s their sum), against n - 1 stub peers that",
           "only encrypt a share pair for it",
           "(timing all n clients at n = 1000 would cost minutes per cell and measure the same code); client bytes",
           "are its own upload (up) and what the server sends it (down). Server: a full round with all n clients",
           "simulated in one process, only the server's calls timed (decode, state machine, encode), its sum checked",
           "against the plain sum; bytes are totals over all clients. Server cells whose simulation would exceed",
           f"the budget ({budget:.0f} s, estimated as n x one client's time) are skipped. Plain: decoding and summing",
           "the survivors' vectors as dense ClientUpdates. Dropout: that fraction of the clients sends shares but no",
           "masked input, so the server rebuilds their mask keys and removes their pairwise masks. One server run",
           "per cell.", "",
           "| protocol | n | length | dropout | client s | advertise | share keys | masked input | unmask "
           "| client KB up | client KB down | protocol B up | server s | server MB in | plain s | plain KB up |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (protocol, n, length, dropout), steps_row in per_step.iterrows():
        key = (protocol, n, length, dropout)
        c = tot.loc[key + ("client",)]
        s = tot.loc[key + ("server",)]
        p = tot.loc[key + ("plain",)]
        masked_up = df[(df["protocol"] == protocol) & (df["n"] == n) & (df["length"] == length)
                       & (df["dropout"] == dropout) & (df["side"] == "client") & (df["step"] == "masked_input")]
        protocol_up = int(c["bytes_up"] - masked_up["bytes_up"].iloc[0])
        server_s = "skipped" if s["method"] == "skipped" else f"{s['seconds']:.3f}"
        server_mb = "" if s["method"] == "skipped" else f"{s['bytes_up'] / 1e6:.2f}"
        out.append(f"| {protocol} | {n} | {_exp(length)} | {dropout:g} | {c['seconds']:.3f} | "
                   f"{steps_row['advertise']:.4f} | {steps_row['share_keys']:.4f} | {steps_row['masked_input']:.4f} | "
                   f"{steps_row['unmask']:.4f} | {c['bytes_up'] / 1e3:.1f} | {c['bytes_down'] / 1e3:.1f} | "
                   f"{protocol_up} | {server_s} | {server_mb} | {p['seconds']:.3f} | {p['bytes_up'] / 1e3:.1f} |")
    for method, title in (("skipped", "Skipped server cells:"), ("aborted", "Cells whose round aborted (not timed):")):
        cells = df[df["method"] == method]
        if len(cells):
            out += ["", title, ""]
            out += [f"- {r.protocol}, n={r.n}, length={_exp(r.length)}, dropout={r.dropout:g}: {r.note}"
                    for r in cells.itertuples()]
    clients = df[(df["protocol"] == "dh") & (df["side"] == "client") & (df["dropout"] == 0)]
    out += ["", "'protocol B up' is the client's upload other than the masked vector (AdvertiseKeys, ShareKeys,",
            "UnmaskResponse); the full graph's target is about 64 + 150 (n - 1)."
            + (" Measured (dh, no dropout):" if len(clients) else ""), ""]
    previous = None  # (n, bytes) of the last line: the cost of each peer added since is their slope
    for n in sorted(clients["n"].unique()):
        c = clients[clients["n"] == n]
        up = int(c[c["step"] == "total"]["bytes_up"].iloc[0] - c[c["step"] == "masked_input"]["bytes_up"].iloc[0])
        target = 64 + 150 * (n - 1)
        added = f"; {(up - previous[1]) / (n - previous[0]):.1f} bytes per peer added since n = {previous[0]}" \
            if previous else ""
        out.append(f"- n = {n}: {up} bytes, target {target} ({up / target:.2f}x){added}")
        previous = (n, up)
    out += ["",
            "Goals (n = 100, length 1e6, full graph): server <= 1 s and each client <= 0.6 s per round without",
            "dropout; server <= 6 s with 10% dropout."]
    for dropout, goal in ((0.0, 1.0), (0.1, 6.0)):
        key = ("dh", 100, 1_000_000, dropout)
        if key + ("server",) in tot.index and key + ("client",) in tot.index:
            s, c = tot.loc[key + ("server",)], tot.loc[key + ("client",)]
            out.append(f"- dropout {dropout:g}: server {s['seconds']:.3f} s (goal <= {goal:g} s), "
                       f"client {c['seconds']:.3f} s (goal <= 0.6 s).")
    return "\n".join(out) + "\n"


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--protocols", nargs="+", default=["dh", "secaggplus"])
    ap.add_argument("--sizes", type=positive_int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--lengths", type=positive_int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--dropouts", type=share, nargs="+", default=[0.0, 0.1])
    ap.add_argument("--budget", type=positive, default=240.0, help="seconds a full simulation of one cell may take")
    ap.add_argument("--seed", type=seed_number, default=0)
    ap.add_argument("--repeats", type=positive_int, default=3, help="representative-client runs per cell (median)")
    ap.add_argument("--out", default="results/bench_secagg")
    ap.add_argument("--force", action="store_true", help="replace a table another command made")
    args = ap.parse_args(argv)
    for i, protocol in enumerate(args.protocols):  # an alias (DHProtocol) is its protocol: each once
        try:
            args.protocols[i] = secagg.canonical(protocol)
        except ValueError as err:
            ap.error(f"--protocols {protocol}: {err}")
    for option in ("protocols", "sizes", "lengths", "dropouts"):
        each_once(ap, f"--{option}", getattr(args, option))
    if min(args.sizes) < 2:
        ap.error(f"--sizes: secure aggregation needs at least 2 clients, got {min(args.sizes)}")
    for protocol in args.protocols:
        for n in args.sizes:
            try:
                needed = cell_setup(protocol, n, 1, 0.0, args.seed)[0].threshold  # client 0 never drops
            except ValueError as err:  # a registered protocol that does not mask (none)
                ap.error(f"--protocols {protocol}: {err}")
            for dropout in args.dropouts:
                if int(round(dropout * n)) > n - needed:
                    ap.error(f"--dropouts {dropout:g}: {protocol} with {n} clients needs {needed} survivors, so at "
                             f"most {n - needed} of them ({(n - needed) / n:.3g}) can drop")
    cmd = command_line("experiments.bench_secagg", argv)
    check_target(table_file(args.out, ".md"), cmd, args.force)
    print(f"machine: {machine()}", flush=True)
    df = run(args.protocols, args.sizes, args.lengths, args.dropouts, args.budget, args.seed, args.repeats)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with together(table_file(out, ".csv"), table_file(out, ".md")) as (csv, md):
        df.to_csv(csv, index=False)
        md.write_text(markdown(df, cmd, args.budget))
    print(f"wrote {table_file(out, '.csv')} and {table_file(out, '.md')}")
    return df


if __name__ == "__main__":
    main()
