"""The masked round's server half, without Ray: the server's sum is exactly the plain sum."""
import copy

import numpy as np
import pytest

import fl
import fl.seeds
import secagg
from compression.index_policy import IndexPolicy
from fl import wire
from fl.config import validate
from fl.plan import Plan
from fl.rounds import masked as masked_round
from fl.rounds.layout import MaskedLayout
from fl.rounds.masked import MaskedAggregator
from fl.runtime.worker import Worker


def _plan(n, name="dh", length=20_000, field=()):
    cfg = validate(fl.compose([f"secagg={name}", f"fl.num_clients={n}", f"fl.clients_per_round={n}",
                               "compression.ratio=0.02", *field]))
    return Plan.build(cfg, [length])


def _low(x, bits):
    """x mod 2^bits (the field's representative)."""
    return x & np.uint32((1 << bits) - 1) if bits < 32 else x


def _round(n_clients, drop_before_input=(), drop_before_unmask=(), name="dh", seed=0, field=()):
    """Drive one masked round through the wire; returns (aggregator, plain sum of the survivors, floats)."""
    length, rng = 20_000, np.random.default_rng(seed)
    policy = IndexPolicy("sketch", length, 400, root_seed=1, sketch_rows=1, sketch_cols_per_k=2.0)
    positions, _ = policy.positions(0)
    sketch = policy.sketch(0)
    plan, cohort = _plan(n_clients, name, length, field), list(range(10, 10 + n_clients))
    layout = MaskedLayout(plan, len(positions), sketch.rows * sketch.cols)
    agg = MaskedAggregator(plan, secagg.session_id("test-run", 0, cohort), cohort, layout)
    clients = {c: secagg.Client(agg.config, c) for c in cohort}
    for c in cohort:
        agg.add_keys(wire.encode_advertise(clients[c].advertise()), c)
    roster = wire.decode_roster(agg.roster())
    for c in cohort:
        agg.add_shares(wire.encode_share_keys(clients[c].share_keys(roster)), c)
    bundles = agg.bundles()
    plain = np.zeros(agg.length, np.uint32)
    float_values, float_weight = np.zeros(len(positions)), 0.0
    for c in cohort:
        update = rng.normal(scale=0.05, size=length).astype(np.float32)
        w = float(np.float32(rng.uniform(0.5, 2.0)))  # the weight travels as float32
        q_weight = layout.weight(w, rng)
        qv, sent = layout.values(update[positions] * w, rng)
        vector = layout.join(qv, q_weight, layout.table(sketch.sketch(update), rng))
        if c in drop_before_input:
            continue
        masked = clients[c].masked_input(wire.decode_share_bundle(bundles[c]), vector)
        assert not np.array_equal(masked.masked, vector)
        agg.add(wire.encode_masked(masked, layout.bits), c)
        plain += vector  # uint32 arithmetic wraps mod 2^32, as the field does
        float_values += sent
        float_weight += w
    request, survivors = agg.unmask_request()
    for c in survivors:
        if c not in drop_before_unmask:
            agg.add_unmask(wire.encode_unmask_response(clients[c].unmask(wire.decode_unmask_request(request))), c)
    return agg, plain, float_values, float_weight


FIELDS = [(), ("secagg.quant_bits=8",), ("secagg.quant_bits=12", "secagg.bits=30"), ("secagg.quant_bits=24",),
          ("secagg.quant_bits=16", "secagg.bits=32")]


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: ",".join(f) or "default")
@pytest.mark.parametrize("n_clients,name", [(2, "dh"), (5, "dh"), (12, "dh"), (12, "secaggplus")])
def test_masked_sum_of_quantized_compressed_vectors_equals_the_plain_sum_exactly(n_clients, name, field):
    """At every field width b: the unmasked sum is the plain sum mod 2^b, and reads back as the exact signed sum."""
    agg, plain, float_values, float_weight = _round(n_clients, name=name, field=field)
    values, weight, table = agg.result()
    bits = agg.layout.bits
    np.testing.assert_array_equal(_low(agg.total, bits), _low(plain, bits))
    assert bits == (32 if "secagg.bits=32" in field else 30 if "secagg.bits=30" in field
                    else secagg.smallest_safe_bits(agg.layout.quant_bits, n_clients))
    assert weight == pytest.approx(float_weight, abs=n_clients * 8.0 / (2**15 - 1))
    step = agg.layout.q_values.step
    np.testing.assert_allclose(values, float_values / weight, rtol=1e-5, atol=step / weight)
    assert table.shape == (agg.layout.cells,)


@pytest.mark.parametrize("field", FIELDS[:3], ids=lambda f: ",".join(f) or "default")
def test_clients_dropping_before_input_and_before_unmask_are_recovered_exactly(field):
    agg, plain, _, _ = _round(9, drop_before_input=(11, 15), drop_before_unmask=(12,), field=field)
    agg.result()
    np.testing.assert_array_equal(_low(agg.total, agg.layout.bits), _low(plain, agg.layout.bits))  # the 7 survivors
    assert agg.state.dropped_by_step["masked_input"] == [11, 15]


def test_a_message_under_another_clients_id_is_refused_at_every_step():
    """As in a plain round: the id a message names must be the client whose transport delivered it, else one
    client could stand in for (or lock out) another."""
    length, cohort = 1000, [3, 4, 5]
    plan = _plan(3, "dh", length, ())
    layout = MaskedLayout(plan, 10, 0)
    agg = MaskedAggregator(plan, secagg.session_id("test-run", 0, cohort), cohort, layout)
    clients = {c: secagg.Client(agg.config, c) for c in cohort}
    adverts = {c: wire.encode_advertise(clients[c].advertise()) for c in cohort}
    with pytest.raises(wire.WireError, match="AdvertiseKeys: from client 3, but sent by client 4"):
        agg.add_keys(adverts[3], 4)
    for c in cohort:
        agg.add_keys(adverts[c], c)
    roster = wire.decode_roster(agg.roster())
    shares = {c: wire.encode_share_keys(clients[c].share_keys(roster)) for c in cohort}
    with pytest.raises(wire.WireError, match="ShareKeys: from client 5, but sent by client 3"):
        agg.add_shares(shares[5], 3)
    for c in cohort:
        agg.add_shares(shares[c], c)
    bundles = agg.bundles()
    vector = layout.join(*layout.values(np.zeros(10, np.float32), np.random.default_rng(0))[:1],
                         layout.weight(1.0, np.random.default_rng(0)), None)
    masked = {c: wire.encode_masked(clients[c].masked_input(wire.decode_share_bundle(bundles[c]), vector), layout.bits)
              for c in cohort}
    with pytest.raises(wire.WireError, match="MaskedInput: from client 4, but sent by client 5"):
        agg.add(masked[4], 5)
    for c in cohort:
        agg.add(masked[c], c)
    request, survivors = agg.unmask_request()
    response = wire.encode_unmask_response(clients[3].unmask(wire.decode_unmask_request(request)))
    with pytest.raises(wire.WireError, match="UnmaskResponse: from client 3, but sent by client 4"):
        agg.add_unmask(response, 4)


def test_fewer_than_t_survivors_abort_the_round():
    with pytest.raises(secagg.RoundAborted):
        agg, *_ = _round(6, drop_before_input=(10, 11, 12))  # 3 of 6 left, t = 4
        agg.result()


@pytest.mark.parametrize("k,cells", [(400, 800), (400, 0), (0, 64)])
def test_the_layout_packs_and_unpacks_both_ways(k, cells):
    """Packed parts sum in the field and unpack to the weighted mean, the summed weight and the summed cells;
    a vector or sum of the wrong length is refused."""
    layout = MaskedLayout(_plan(4), k, cells)
    rng = np.random.default_rng(3)
    total, weights, values, tables = np.zeros(layout.length, np.uint32), 0.0, np.zeros(k), np.zeros(cells)
    for _ in range(4):
        w = float(np.float32(rng.uniform(0.5, 2.0)))
        q_weight = layout.weight(w, rng)
        q_values, sent = layout.values(rng.normal(scale=0.05, size=k).astype(np.float32) * w, rng) if k else (None, 0)
        table = rng.uniform(-1, 1, size=cells).astype(np.float32)  # inside the sketch clip
        vector = layout.join(q_values, q_weight, layout.table(table, rng) if cells else None)
        assert vector.dtype == np.uint32 and len(vector) == k + layout.digits + cells
        total += vector
        weights, values, tables = weights + w, values + sent, tables + table
    mean, weight, summed = layout.unpack(total)
    assert weight == pytest.approx(weights, abs=4 * 8.0 / (2**15 - 1))
    np.testing.assert_allclose(mean, values / weight, rtol=1e-5, atol=1e-7)
    if cells:
        np.testing.assert_allclose(summed, tables, rtol=1e-6, atol=4 * layout.q_table.step)
    else:
        assert summed is None
    with pytest.raises(ValueError, match="layout has"):
        layout.unpack(total[:-1])
    with pytest.raises(ValueError, match="layout has"):
        layout.join(None, layout.weight(1.0, rng), None) if k or cells else layout.join(np.zeros(1, np.uint32),
                                                                                           q_weight, None)


class Spy:
    """What a masked run's clients masked, which survivors the server summed, and what it applied."""

    def __init__(self, monkeypatch):
        import secagg.dh_client
        from fl.server import Server

        self.vectors, self.sums, self.applied = {}, [], []
        client_input, unmask_request, apply_masked = (secagg.dh_client.Client.masked_input,
                                                      MaskedAggregator.unmask_request, Server.apply_masked)
        spy = self

        def masked_input(self, bundle, vector):
            spy.vectors[(self.config.session, self.client_id)] = vector.copy()
            return client_input(self, bundle, vector)

        def request(self):
            out = unmask_request(self)
            plain = np.zeros(self.length, np.uint32)
            for cid in out[1]:
                plain += spy.vectors[(self.config.session, cid)]  # wraps mod 2^32, as the field does
            spy.sums.append((self.layout.unpack(plain), out[1]))
            return out

        def apply(self, r, values, weight, cells):
            before = self.weights.copy()
            apply_masked(self, r, values, weight, cells)
            spy.applied.append((before, self.weights.copy(), self.positions.copy(), values, weight))

        monkeypatch.setattr(secagg.dh_client.Client, "masked_input", masked_input)
        monkeypatch.setattr(MaskedAggregator, "unmask_request", request)
        monkeypatch.setattr(Server, "apply_masked", apply)

    def check_exact(self, without=()):
        """Each applied update is the dequantized plain sum of its survivors' vectors (none of `without`),
        applied at the round's index set and nowhere else; returns the survivors of each applied round."""
        rounds = []
        for before, after, positions, values, weight in self.applied:
            (plain_values, plain_weight, _), survivors = next(s for s in self.sums if np.array_equal(s[0][0], values))
            assert plain_weight == weight and not set(survivors) & set(without)
            expected = before.copy()
            expected[positions] += plain_values
            np.testing.assert_array_equal(after, expected)
            rounds.append(survivors)
        return rounds


def _masked_run(tmp_path, *overrides):
    return fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=dh",
                              "compression.ratio=0.1", "fl.num_clients=12", "fl.clients_per_round=8", *overrides]))


def test_the_update_a_masked_run_applies_is_the_plain_weighted_mean_of_its_survivors(tmp_path, monkeypatch):
    """End to end, with partial participation and dropouts at every step of a one-exchange round (`fresh`'s two
    exchanges: below): each applied update is exactly the dequantized plain (unmasked) field sum of the survivors'
    vectors, applied at the round's index set."""
    spy = Spy(monkeypatch)
    rows = _masked_run(tmp_path, "secagg.dropout=0.1", "fl.rounds=5", "compression.index_policy=sketch")
    assert rows["dropped"].sum() > 0 and len(spy.applied) == (~rows["aborted"]).sum() >= 3
    assert all(len(survivors) >= 5 for survivors in spy.check_exact())


def test_a_malformed_message_rejects_its_client_and_the_round_goes_on_with_the_exact_sum_of_the_rest(
        tmp_path, monkeypatch):
    """A corrupted advertisement (client 4's) and a corrupted masked input (the first client of each round
    after it): each is rejected at the server, counted, and the others' round completes."""
    from fl import wire as fl_wire

    advertise, masked = fl_wire.encode_advertise, fl_wire.encode_masked
    first = {}

    def bad_advertise(m):
        out = advertise(m)
        return out[:-1] + bytes([out[-1] ^ 1]) if m.client_id == 4 else out  # the checksum no longer matches

    def bad_masked(m, bits):
        out = masked(m, bits)
        if first.setdefault(m.session, m.client_id) == m.client_id:
            return out[:-1] + bytes([out[-1] ^ 1])
        return out

    keep, kept = masked_round.keep_residual, []

    def spy_keep(worker, cid, residual):
        kept.append((worker.staged_round, cid))
        return keep(worker, cid, residual)

    monkeypatch.setattr(fl_wire, "encode_advertise", bad_advertise)
    monkeypatch.setattr(fl_wire, "encode_masked", bad_masked)
    monkeypatch.setattr(masked_round, "keep_residual", spy_keep)
    spy = Spy(monkeypatch)
    rows = _masked_run(tmp_path, "fl.rounds=4", "compression.index_policy=sketch")  # one masked exchange a round
    cohorts = [fl.seeds.cohort(0, r, 12, 8) for r in range(4)]
    assert rows["rejected"].tolist() == [1 + (4 in c) for c in cohorts] and not rows["aborted"].any()
    survivors = spy.check_exact(without=(4,))
    assert [len(s) for s in survivors] == [7 - (4 in c) for c in cohorts]
    # a refused client's residual (its update less values the sum never held) is not kept; the others' are
    victims = list(first.values())
    assert kept and all(cid != victims[r] for r, cid in kept)
    assert {(r, c) for r in range(3) for c in cohorts[r] if c not in (4, victims[r])} <= set(kept)


def test_a_finite_update_too_large_to_quantize_is_refused_by_its_client_and_the_run_goes_on(tmp_path, monkeypatch):
    """3e38 in every entry is finite, but its residual sketch's cells overflow float32: the client sends
    nothing, the row counts it as rejected, and the others' sum is applied."""
    from fl.runtime.worker import Worker

    train = Worker.train

    def huge(self, cid, round):
        update, n = train(self, cid, round)
        return (np.full_like(update, 3e38) if cid == 2 else update), n

    monkeypatch.setattr(Worker, "train", huge)
    spy = Spy(monkeypatch)
    rows = _masked_run(tmp_path, "fl.rounds=4", "fl.num_clients=8")
    assert (rows["rejected"] == 1).all() and (rows["dropped"] == 0).all() and not rows["aborted"].any()
    assert [len(s) for s in spy.check_exact(without=(2,))] == [7] * 4
    assert rows["accuracy"].iloc[-1] > 0.5


def test_a_masked_input_replayed_from_an_earlier_run_of_the_same_configuration_is_rejected(tmp_path, monkeypatch):
    """Each run binds its sessions to a nonce of its own: client 3's masked inputs from the first run, sent
    again in a second run of the same configuration, are refused there; nothing else changes."""
    from fl import wire as fl_wire

    encode, sent = fl_wire.encode_masked, {}

    def record(m, bits):
        out = encode(m, bits)
        sent.setdefault(m.client_id, []).append(out)
        return out

    monkeypatch.setattr(fl_wire, "encode_masked", record)
    first = _masked_run(tmp_path / "a", "fl.rounds=2", "fl.num_clients=8")
    old = iter(sent[3])

    def replay(m, bits):
        out = encode(m, bits)
        return next(old) if m.client_id == 3 else out

    monkeypatch.setattr(fl_wire, "encode_masked", replay)
    second = _masked_run(tmp_path / "b", "fl.rounds=2", "fl.num_clients=8")
    assert first["rejected"].tolist() == [0, 0] and second["rejected"].tolist() == [1, 1]
    assert not second["aborted"].any()


def test_a_client_advertising_a_low_order_key_is_refused_and_the_others_sum_exactly(tmp_path, monkeypatch):
    import dataclasses

    from fl import wire as fl_wire

    advertise = fl_wire.encode_advertise

    def zero_key(m):  # client 5 advertises the all-zero X25519 point
        return advertise(dataclasses.replace(m, mask_public_key=bytes(32)) if m.client_id == 5 else m)

    monkeypatch.setattr(fl_wire, "encode_advertise", zero_key)
    spy = Spy(monkeypatch)
    rows = _masked_run(tmp_path, "fl.rounds=3", "fl.num_clients=8")
    assert rows["rejected"].tolist() == [1, 1, 1] and not rows["aborted"].any()
    assert [len(s) for s in spy.check_exact(without=(5,))] == [7, 7, 7]


@pytest.mark.parametrize("summary", ["blocks", "marginals", "exact", "energy"])
def test_fresh_masks_a_summary_then_values_and_applies_the_exact_sum_at_the_heaviest_entries(
        tmp_path, monkeypatch, summary):
    """Index policy `fresh`, with partial participation and dropouts at each of its six steps: the server's
    summed summary (block energies; row and column energies) is the plain sum of the survivors' quantized
    summaries, this round's index set is the heaviest blocks (entries of largest estimated or exact energy, of
    largest summed update) of that sum,
    and the applied update is the exact plain sum of the second exchange's survivors at that set (two protocol
    instances, each summing exactly)."""
    spy, chosen = Spy(monkeypatch), []
    choose = IndexPolicy.choose

    def spy_choose(self, r, cells):
        (_, _, plain_cells), _ = spy.sums[-1]  # this round's first exchange
        np.testing.assert_array_equal(cells, plain_cells)
        out = choose(self, r, cells)
        if summary == "blocks":
            order = np.argsort(-plain_cells, kind="stable")
            heaviest = set(order[:len(out) // self.summary.block].tolist())
            assert heaviest <= set((out // self.summary.block).tolist())
        elif summary in ("exact", "energy"):  # the summed update (its squares) itself: its exact top k
            magnitude = np.abs(plain_cells.reshape(-1))
            assert magnitude[out].min() >= np.delete(magnitude, out).max()
        else:
            energy = self.summary.estimate(plain_cells)
            assert energy[out].min() >= np.delete(energy, out).max()
        chosen.append(out)
        return out

    monkeypatch.setattr(IndexPolicy, "choose", spy_choose)
    rows = _masked_run(tmp_path, "secagg.dropout=0.04", "fl.rounds=8", "compression.index_policy=fresh",
                       f"compression.fresh_summary={summary}", "compression.block_size=16")
    assert rows["index_policy"].iloc[0] == ("fresh(blocks of 16)" if summary == "blocks" else f"fresh({summary})")
    assert rows["dropped"].sum() > 0 and len(spy.applied) == (~rows["aborted"]).sum() >= 3
    assert {c for c in rows.columns if c.startswith("dropped_") and rows[c].sum() > 0} >= {"dropped_masked_sketch"}
    # under the summary linear in the update (`exact`), a client summed in the first exchange and gone from the
    # second aborts the round (the difference of the two sums would be its values); under energies the round goes
    # on with the second's survivors. Drops before the first sum or after the second's inputs abort neither.
    between = rows["dropped_unmask_sketch"] + rows["dropped_masked_input"]
    assert between.sum() > 0 and (rows.loc[~rows["aborted"], "dropped"] > 0).any()
    assert (rows["aborted"] == ((between > 0) if summary == "exact" else False)).all()
    firsts = [(weight, survivors) for (values, weight, _), survivors in spy.sums if not len(values)]
    assert len(firsts) == 8  # the first exchange's weight slot counts its survivors, whatever their weights
    assert all(weight == pytest.approx(len(s), abs=len(s) * 8.0 / (2**15 - 1)) for weight, s in firsts)
    assert all(len(s) >= 5 for s in spy.check_exact())
    applied_sets = [positions for _, _, positions, _, _ in spy.applied]
    assert all(any(np.array_equal(p, c) for c in chosen) for p in applied_sets)
    k = rows["n_params"].iloc[0] // 10 + (rows["n_params"].iloc[0] % 10 > 0)
    assert all(len(p) == k for p in applied_sets)
    # bytes: the first exchange's masked messages are the sketch share of the payload, at b bits per element
    assert (rows["bytes_up_sketch"] > 0).all() and (rows["bytes_up_sketch"] < rows["bytes_up_payload"]).all()


def test_fresh_learns_faster_than_the_stale_sketch_on_non_iid_digits_with_partial_participation(tmp_path):
    """The stale policy picks this round's positions from the previous cohort's residuals, `fresh` from this
    round's updates. Digits, mlp_large, 20 Dirichlet(0.5) clients, 8 a round, ratio 0.02 (seed 0): fresh first
    reaches 0.6 at round 2, the stale sketch at round 8 (measured), with less upload."""
    base = [f"results.dir={tmp_path}", "backend=inline", "secagg=dh", "model=mlp_large", "dataset.partition=dirichlet",
            "fl.num_clients=20", "fl.clients_per_round=8", "compression.ratio=0.02", "fl.rounds=8"]
    fresh = fl.run(fl.compose([*base, "compression.index_policy=fresh"]))
    stale = fl.run(fl.compose([*base, "compression.index_policy=sketch"]))
    def first(rows):
        return int((rows["accuracy"] >= 0.6).idxmax()) if (rows["accuracy"] >= 0.6).any() else 99
    assert first(fresh) <= 3 < 6 <= first(stale)
    assert fresh["bytes_up"].sum() < stale["bytes_up"].sum()


@pytest.mark.parametrize("quant", [8, 12, 16])
def test_the_weight_travels_in_digits_and_its_sum_is_exact_at_every_width(quant):
    """The summed weight is exactly the sum of the clients' WEIGHT_BITS-rounded weights, whatever quant_bits:
    its digits' sums are lifted as integers and recombined, never through floating point."""
    from fl.rounds.layout import WEIGHT_BITS

    layout = MaskedLayout(_plan(10, field=(f"secagg.quant_bits={quant}",)), 0, 0)
    assert layout.digits == -(-WEIGHT_BITS // (quant - 1))
    rng, total, whole = np.random.default_rng(quant), np.zeros(layout.length, np.uint32), 0
    for _ in range(10):
        digits = layout.weight(float(rng.uniform(0, 8.0)), rng)
        whole += sum(int(d) << ((quant - 1) * j) for j, d in enumerate(digits))
        total += digits
    _, weight, _ = layout.unpack(total)
    assert weight == whole / layout.weight_scale


def test_a_weight_at_max_weight_never_rounds_past_15_bits():
    """max_weight / (32767 / max_weight) * ... can land an ulp above 32767 (here by 3.6e-12): a draw below that
    fraction must not make the weight 32768, whose single 15-bit digit is 0 (the client would weigh nothing)."""
    max_weight = 4.428571428571429
    layout = MaskedLayout(_plan(4, field=(f"secagg.max_weight={max_weight}",)), 0, 0)

    class LowestDraw:
        def random(self):
            return 0.0

    digits = layout.weight(max_weight, LowestDraw())
    _, weight, _ = layout.unpack(digits.copy())
    assert weight == pytest.approx(max_weight)


def test_a_roster_or_unmask_request_that_does_not_decode_drops_the_clients_given_it_not_the_run(tmp_path, monkeypatch):
    """The server's roster (step 2) and unmask request (step 4) are checked by each client as any message: one
    that does not decode is that worker's clients' refusal, counted as dropouts at that step, and the run goes
    on (it escaped the worker's call before)."""
    from fl import wire as fl_wire

    calls = {"roster": 0, "unmask": 0}

    def once(name, decode):
        def broken(data, *args):
            calls[name] += 1
            if calls[name] == 1:
                raise fl_wire.WireError(f"{name}: a corrupted message")
            return decode(data, *args)
        return broken

    monkeypatch.setattr(fl_wire, "decode_roster", once("roster", fl_wire.decode_roster))
    monkeypatch.setattr(fl_wire, "decode_unmask_request", once("unmask", fl_wire.decode_unmask_request))
    rows = _masked_run(tmp_path, "fl.rounds=3", "compression.index_policy=sketch", "fl.num_clients=8",
                       "ray.num_workers=2", "secagg.threshold=2")
    assert len(rows) == 3 and calls["roster"] > 1 and calls["unmask"] > 1
    assert rows["dropped_share_keys"].iloc[0] >= 1 and rows["dropped_unmask"].iloc[0] >= 1
    assert not rows["aborted"].iloc[0] and rows["dropped"].iloc[1:].sum() == 0


def test_masking_at_federated_scale_sums_exactly_with_10_of_100_non_iid_clients_dropouts_and_four_workers(
        tmp_path, monkeypatch):
    """The setting users run: 100 Dirichlet(0.5) clients, 10 a round, per-step dropouts, four workers, the
    default policy (`fresh`, two masked exchanges). Each applied update is exactly the plain sum of its
    survivors' quantized vectors; cohorts change every round and no round is lost to a between-exchange drop."""
    spy = Spy(monkeypatch)
    rows = fl.run(fl.compose([f"results.dir={tmp_path}", "backend=inline", "model=mlp_small", "secagg=dh",
                              "compression.ratio=0.05", "fl.num_clients=100", "fl.clients_per_round=10",
                              "dataset.partition=dirichlet", "dataset.alpha=0.5", "ray.num_workers=4",
                              "secagg.dropout=0.03", "fl.rounds=8", "fl.local_epochs=1"]))
    assert rows["index_policy"].iloc[0] == "fresh(marginals)" and (rows["num_workers"] == 4).all()
    assert rows["dropped"].sum() > 0 and not rows["aborted"].any()
    survivors = spy.check_exact()  # each applied update: the exact plain sum of its survivors' vectors
    cohorts = [set(fl.seeds.cohort(0, r, 100, 10)) for r in range(8)]
    assert len(survivors) == 8 and len(set.union(*cohorts)) > 40
    assert all(set(s) <= c and len(s) >= 6 for s, c in zip(survivors, cohorts))
    assert sum(len(s) < 10 for s in survivors) >= 2  # some applied rounds lost clients to dropouts


def test_fresh_with_a_count_sketch_summary_aborts_a_round_whose_second_sum_misses_a_client_of_the_first(tmp_path):
    """The count sketch is linear in the update, like `exact`: a client summed in the first exchange and gone
    before the second's unmask would be revealed by the difference of the two sums (its sketch at the index set),
    so such a round aborts; drops before the first sum or after the second's inputs abort nothing."""
    rows = _masked_run(tmp_path, "secagg.dropout=0.04", "fl.rounds=8", "compression.index_policy=fresh",
                       "compression.fresh_summary=sketch")
    assert rows["index_policy"].iloc[0] == "fresh"
    between = rows["dropped_unmask_sketch"] + rows["dropped_masked_input"]
    assert between.sum() > 0 and (rows.loc[~rows["aborted"], "dropped"] > 0).any()
    assert (rows["aborted"] == (between > 0)).all()


def test_the_sketch_bytes_are_the_tables_of_the_clients_whose_masked_input_was_summed(tmp_path, monkeypatch):
    """Under dropouts, the sketch's share of the upload counts the tables that arrived, not the cohort's: each table
    its cells at the field's width, as the masked vector carries them."""
    tables = set()
    init = MaskedAggregator.__init__

    def recording(self, plan, session, cohort, layout, **kw):
        tables.add((layout.cells, layout.bits))
        init(self, plan, session, cohort, layout, **kw)

    monkeypatch.setattr(MaskedAggregator, "__init__", recording)
    rows = _masked_run(tmp_path, "compression.index_policy=sketch", "secagg.dropout=0.05", "fl.rounds=4")
    summed = 8 - rows[["dropped_advertise", "dropped_share_keys", "dropped_masked_input", "rejected"]].sum(axis=1)
    assert not rows["aborted"].any() and summed.nunique() > 1  # dropouts before the sum in some rounds only
    per_table = rows["bytes_up_sketch"] / summed
    ((cells, bits),) = tables
    assert cells > 0 and (per_table == wire.masked_bytes(cells, bits)).all()


def test_an_aborted_round_counts_the_sketch_share_of_the_masked_inputs_it_received(tmp_path):
    """bytes_up_sketch is the part of bytes_up_payload that is table cells: a round aborted at unmask (below t)
    received its masked inputs, tables included, and counts them as a round that was applied does."""
    rows = _masked_run(tmp_path, "compression.index_policy=sketch", "secagg.dropout=0.15", "fl.rounds=5")
    arrived = 8 - rows[["dropped_advertise", "dropped_share_keys", "dropped_masked_input", "rejected"]].sum(axis=1)
    aborted = rows["aborted"].astype(bool)
    assert aborted.any() and (~aborted).any() and (rows.loc[aborted, "bytes_up_payload"] > 0).all()
    per_table = rows["bytes_up_sketch"] / arrived
    assert per_table.nunique() == 1 and per_table.iloc[0] > 0
    per_message = rows["bytes_up_payload"] / arrived
    assert (per_table < per_message).all()


def test_each_masked_client_rounds_with_its_own_draws(tmp_path, monkeypatch):
    """Stochastic rounding averages out over the cohort only if clients' draws are independent."""
    draws, build = {}, masked_round._masked_vector

    def spy(plan, layout, corrected, w, idx, sketch, rng, staged, cid):
        draws[cid] = copy.deepcopy(rng).random(4).tolist()
        return build(plan, layout, corrected, w, idx, sketch, rng, staged, cid)

    monkeypatch.setattr(masked_round, "_masked_vector", spy)
    _masked_run(tmp_path, "compression.index_policy=sketch", "fl.rounds=1")
    assert len(draws) == 8 and len({tuple(d) for d in draws.values()}) == 8


@pytest.mark.parametrize("policy", ["sketch", "fresh"])
def test_a_large_clients_values_are_weighted_by_max_weight_as_its_weight_slot_is(tmp_path, monkeypatch, policy):
    """The weight slot is clamped to max_weight; values weighted by more would be over-counted in the mean."""
    train, build, weights = Worker.train, masked_round._masked_vector, []

    def big(self, cid, round):
        update, n = train(self, cid, round)
        return update, n * 100 if cid == 2 else n

    def spy(plan, layout, corrected, w, idx, sketch, rng, staged, cid):
        weights.append((plan.max_weight, w))
        return build(plan, layout, corrected, w, idx, sketch, rng, staged, cid)

    monkeypatch.setattr(Worker, "train", big)
    monkeypatch.setattr(masked_round, "_masked_vector", spy)
    _masked_run(tmp_path, "fl.rounds=1", "fl.num_clients=8", f"compression.index_policy={policy}")
    assert weights and all(w <= top for top, w in weights) and any(w == top for top, w in weights)


def _corrupt(message: bytes) -> bytes:
    return message[:-1] + bytes([message[-1] ^ 1])  # the checksum no longer matches


def test_bytes_down_and_the_sketch_share_count_the_messages_sent_when_clients_are_refused(tmp_path, monkeypatch):
    """`fresh`, every client in every round, client 4's advertisement refused and the first masked input of each
    exchange refused: bytes_down is the broadcast to the cohort, every share bundle made, and each roster, index set
    and unmask request at its len() once for each client a worker is given it for. A client refused at advertise
    is in no exchange's roster: its keys were refused in one, so it takes part in none. bytes_up_sketch is the
    whole of each first-exchange message (the summary and its unit weight), a refused one too: it was uploaded."""
    from fl import wire as fl_wire

    advertise, masked, roster = fl_wire.encode_advertise, fl_wire.encode_masked, fl_wire.encode_roster
    first, rosters, sizes, received = {}, [], {"encode_broadcast": [], "encode_share_bundle": []}, []
    uploads = {}  # session -> masked inputs' lengths; a round's first exchange's session comes first

    def recording(name):
        encode = getattr(fl_wire, name)
        return lambda *a, **kw: sizes[name].append(len(out := encode(*a, **kw))) or out

    def receiving(name, per_client, clients_at):  # what a worker is given for its clients at this step, in bytes
        step = getattr(masked_round, name)

        def wrapper(worker, *a):
            received.append(per_client(a[0]) * len(a[clients_at]))
            return step(worker, *a)
        return wrapper

    monkeypatch.setattr(fl_wire, "encode_advertise", lambda m: _corrupt(advertise(m)) if m.client_id == 4 else
                        advertise(m))
    def bad_masked(m, bits):
        out = _corrupt(masked(m, bits)) if first.setdefault(m.session, m.client_id) == m.client_id else masked(m, bits)
        uploads.setdefault(m.session, []).append(len(out))
        return out

    monkeypatch.setattr(fl_wire, "encode_masked", bad_masked)
    monkeypatch.setattr(fl_wire, "encode_roster", lambda m: rosters.append(m) or roster(m))
    for name in sizes:
        monkeypatch.setattr(fl_wire, name, recording(name))
    monkeypatch.setattr(masked_round, "share_keys", receiving("share_keys", lambda r: sum(map(len, r)), 1))
    monkeypatch.setattr(masked_round, "masked_values", receiving("masked_values", len, 3))
    monkeypatch.setattr(masked_round, "unmask", receiving("unmask", len, 1))
    rows = _masked_run(tmp_path, "fl.rounds=3", "fl.num_clients=8", "compression.index_policy=fresh")
    assert rows["rejected"].tolist() == [3] * 3 and not rows["aborted"].any() and (rows["catchups"] == 0).all()
    assert len(rosters) == 6 and all(sorted(cid for cid, *_ in r.keys) == [0, 1, 2, 3, 5, 6, 7] for r in rosters)
    assert rows["bytes_down"].sum() == 8 * sum(sizes["encode_broadcast"]) + sum(sizes["encode_share_bundle"]) \
        + sum(received)
    summaries = [sum(lengths) for lengths in list(uploads.values())[::2]]
    assert len(uploads) == 6 and rows["bytes_up_sketch"].tolist() == summaries


def test_fresh_aborts_a_round_whose_summed_unit_weights_do_not_count_its_survivors(tmp_path, monkeypatch):
    """Each client puts a unit weight beside its summary, so that the summed summary is known to hold each survivor
    once; one client putting 2 there (round 1's third) would count twice in choosing the index set: its round
    aborts, the others are applied."""
    weight, units = MaskedLayout.weight, []

    def inflated(self, w, rng):
        if self.k == 0 and w == 1.0:  # the first exchange's unit weight (its layout has no values)
            units.append(1)
            if len(units) == 8 + 3:
                w = 2.0
        return weight(self, w, rng)

    monkeypatch.setattr(MaskedLayout, "weight", inflated)
    rows = _masked_run(tmp_path, "fl.rounds=3", "fl.num_clients=8", "compression.index_policy=fresh")
    assert len(units) == 3 * 8 and rows["aborted"].tolist() == [False, True, False]


def test_the_two_exchanges_of_fresh_draw_each_client_keys_of_their_own(tmp_path, monkeypatch):
    """Separate protocol instances: a client's keys in one exchange tell nothing of its masks in the other, whose
    dropouts the server may learn differently."""
    from fl import wire as fl_wire

    advertise, keys = fl_wire.encode_advertise, {}

    def recording(m):
        keys.setdefault(m.client_id, []).append((m.session, m.cipher_public_key, m.mask_public_key))
        return advertise(m)

    monkeypatch.setattr(fl_wire, "encode_advertise", recording)
    _masked_run(tmp_path, "fl.rounds=1", "fl.num_clients=8", "compression.index_policy=fresh")
    assert sorted(keys) == list(range(8))
    for (session_a, *pair_a), (session_b, *pair_b) in keys.values():
        assert session_a != session_b and not set(pair_a) & set(pair_b)


def test_a_reply_must_frame_exactly_one_message_per_exchange():
    """`apart` undoes `together`, and refuses a reply holding fewer or more messages, or bytes after them: bytes it
    did not frame would go to no server's checks and into no byte count."""
    messages = [b"first", b"", b"third message"]
    framed = masked_round.together(messages)
    assert masked_round.apart(framed, 3) == messages and len(framed) == sum(map(len, messages)) + 3 * 4
    assert masked_round.together(messages[:1]) == b"first" and masked_round.apart(b"first", 1) == [b"first"]
    for bad in (framed + b"\x00", framed[:-1], masked_round.together(messages[:2]),
                masked_round.together([*messages, b"x"])):
        with pytest.raises(wire.WireError, match="does not frame 3 protocol messages"):
            masked_round.apart(bad, 3)


def test_fresh_summarizes_each_clients_update_weighted_as_its_values_are(tmp_path, monkeypatch):
    """The summed summary must pick the entries of largest weighted mean, which the second exchange then sums: each
    client summarizes w times its (error-corrected) update, the very update and weight it masks values of."""
    from compression.marginals import Marginals

    summarize, build, summarized, masked = Marginals.sketch, masked_round._masked_vector, [], []
    monkeypatch.setattr(Marginals, "sketch", lambda self, vector: summarized.append(vector.copy()) or
                        summarize(self, vector))

    def spy(plan, layout, corrected, w, idx, sketch, rng, staged, cid):
        masked.append((corrected.copy(), w))
        return build(plan, layout, corrected, w, idx, sketch, rng, staged, cid)

    monkeypatch.setattr(masked_round, "_masked_vector", spy)
    rows = _masked_run(tmp_path, "fl.rounds=2", "fl.num_clients=8", "compression.index_policy=fresh",
                       "dataset.partition=dirichlet", "ray.num_workers=1")
    assert rows["index_policy"].iloc[0] == "fresh(marginals)" and len(summarized) == len(masked) == 16
    assert len({w for _, w in masked}) > 1  # Dirichlet clients' sample counts differ, and so do their weights
    for vector, (corrected, w) in zip(summarized, masked):  # one worker: its clients in the same order each exchange
        np.testing.assert_array_equal(vector, corrected * w)


def test_the_sketch_policy_without_error_feedback_sketches_what_the_round_leaves_out_and_keeps_nothing(
        tmp_path, monkeypatch):
    """The `sketch` policy picks the next index set from the sketch of what this round's values left out (the
    update less what was sent for it), which the client computes whether or not it keeps it as a residual."""
    from compression.sketch import CountSketch

    summarize, build, sketched, left_out = CountSketch.sketch, masked_round._masked_vector, [], []
    monkeypatch.setattr(CountSketch, "sketch", lambda self, vector: sketched.append(vector.copy()) or
                        summarize(self, vector))

    def spy(plan, layout, corrected, w, idx, sketch, rng, staged, cid):
        vector = build(plan, layout, corrected, w, idx, sketch, rng, staged, cid)
        residual = corrected.copy()
        residual[idx] -= layout.q_values.dequantize(vector[:layout.k]) / w
        left_out.append(residual)
        return vector

    monkeypatch.setattr(masked_round, "_masked_vector", spy)
    rows = _masked_run(tmp_path, "fl.rounds=2", "fl.num_clients=8", "compression.index_policy=sketch",
                       "compression.error_feedback=false")
    assert not rows["error_feedback"].any() and (rows["state_bytes"] == 0).all() and (rows["bytes_up_sketch"] > 0).all()
    assert len(sketched) == len(left_out) == 16
    for vector, residual in zip(sketched, left_out):
        np.testing.assert_allclose(vector, residual, rtol=0, atol=1e-6 * np.abs(residual).max())


def test_the_sketch_policys_next_index_set_is_the_heavy_hitters_of_the_summed_residual_sketch(tmp_path, monkeypatch):
    """Under `sketch` the server learns the next round's index set from this round's summed sketch of what the
    clients left out: its heavy hitters, not a fresh random draw."""
    from fl.server import Server

    apply, applied = Server.apply_masked, []

    def spy(self, r, values, weight, cells):
        applied.append((r, self.positions.copy(), cells.copy(), self.policy))
        apply(self, r, values, weight, cells)

    monkeypatch.setattr(Server, "apply_masked", spy)
    rows = _masked_run(tmp_path, "fl.rounds=3", "fl.num_clients=8", "compression.index_policy=sketch")
    assert rows["index_policy"].iloc[0] == "sketch" and [r for r, *_ in applied] == [0, 1, 2]
    for (r, _, cells, policy), (_, positions, _, _) in zip(applied, applied[1:]):
        sketch = policy.sketch(r)
        expected = sketch.heavy_hitters(cells.reshape(sketch.rows, sketch.cols), policy.k)
        assert len(positions) == policy.k
        np.testing.assert_array_equal(positions, expected)


def test_fresh_clients_refuse_an_index_set_bound_to_a_session_other_than_the_one_they_hold(monkeypatch):
    """The index set is checked against the second exchange's session the client holds, not one the server sends
    beside it: a server replaying an earlier round's set with that round's session had it taken."""
    from types import SimpleNamespace

    plan = SimpleNamespace(k=3, length=20, training=SimpleNamespace(seed=0))
    ids = [0, 1, 2]

    def client_of_round(r):
        session = secagg.session_id("run", r, ids, protocol="dh", length=8, nonce=b"values")
        return session, secagg.Client(secagg.make_round("dh", session, ids, 8), 0)

    now, client = client_of_round(5)
    earlier, _ = client_of_round(4)
    monkeypatch.setattr(masked_round, "_send", lambda worker, exchange, cid, *a: (cid, b"sent"))
    monkeypatch.setattr(masked_round, "MaskedLayout", lambda *a: SimpleNamespace(bits=20))
    for session, taken in ((earlier, None), (now, b"sent")):
        worker = SimpleNamespace(plan=plan, pending=[{}, {0: client}], held={0: (np.zeros(20, np.float32), 1.0)},
                                 staged={})
        index_set = wire.encode_round_index(session, np.array([1, 7, 9]), plan.length)
        assert list(masked_round.masked_values(worker, index_set, 5, {0: b""}, [0], {})) == [(0, taken)]
        assert (0 in worker.pending[1]) == (taken is not None)


def test_a_masked_round_whose_summed_weight_is_zero_aborts_and_the_run_goes_on(tmp_path, monkeypatch):
    """Every client of round 1 sends a weight slot of 0 (as weights rounding to 0 would): the sum cannot be divided
    by it, so the round aborts with the model unchanged; applying it crashed the run."""
    weight, calls = MaskedLayout.weight, []

    def zero_in_round_1(self, w, rng):
        calls.append(w)
        return weight(self, 0.0 if 8 < len(calls) <= 16 else w, rng)  # round 1's eight clients

    monkeypatch.setattr(MaskedLayout, "weight", zero_in_round_1)
    rows = _masked_run(tmp_path, "fl.rounds=3", "compression.index_policy=sketch")
    assert rows["aborted"].tolist() == [False, True, False] and len(calls) == 24
    assert rows["loss"].iloc[1] == rows["loss"].iloc[0] != rows["loss"].iloc[2]  # round 1 applied nothing
