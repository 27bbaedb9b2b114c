"""Random rounds: any ids (up to MAX_CLIENT_ID), t, degree, length and dropouts at every step, with one client
misbehaving at the masked input, end in the exact sum of the survivors' vectors or in RoundAborted."""

import dataclasses

import numpy as np
import pytest
from secagg_rounds import Round, plain_sum

from secagg import MAX_CLIENT_ID, ProtocolError, RoundAborted, default_degree

BAD_VECTORS = {
    "short": lambda n: np.zeros(n - 1, np.uint32),
    "long": lambda n: np.zeros(n + 1, np.uint32),
    "int64": lambda n: np.zeros(n, np.int64),
    "big-endian": lambda n: np.zeros(n, ">u4"),
    "float": lambda n: np.zeros(n),
    "list": lambda n: [0] * n,
}


def random_round(rng):
    """(round, inputs, drops per step): a random cohort, configuration and dropout pattern."""
    protocol = str(rng.choice(["dh", "secaggplus"]))
    low = MAX_CLIENT_ID - 200 if rng.random() < 0.3 else 0  # Shamir x = id + 1 near the field's top
    ids = sorted({int(x) for x in rng.integers(low, MAX_CLIENT_ID + 1, int(rng.choice([3, 4, 10, 17, 50])))})
    degree = None
    if protocol == "secaggplus" and len(ids) > 3 and rng.random() < 0.5:
        degree = int(rng.choice([*range(2, len(ids) - 1, 2), len(ids) - 1]))
    group = len(ids) if protocol == "dh" else (degree or default_degree(len(ids))) + 1
    threshold = int(rng.integers(2, group + 1)) if rng.random() < 0.5 else None
    length = int(rng.integers(2, 40))
    r = Round(protocol, ids, length=length, threshold=threshold, degree=degree)
    inputs = {cid: rng.integers(0, 2**32, length, dtype=np.uint32) for cid in ids}
    left, drops = list(ids), []
    for _ in range(4):  # advertise, share keys, masked input, unmask
        gone = [int(c) for c in rng.choice(left, int(rng.integers(0, max(1, len(ids) // 3))), replace=False)]
        drops.append(sorted(gone))
        left = [c for c in left if c not in gone]
    return r, inputs, drops


@pytest.mark.parametrize("seed", range(4))
def test_random_rounds_give_the_exact_sum_of_the_survivors_or_abort(seed):
    rng = np.random.default_rng(seed)
    outcomes = set()
    for _ in range(12):
        r, inputs, (d_adv, d_share, d_masked, d_unmask) = random_round(rng)
        try:
            r.advertise(d_adv)
            r.share_keys(d_share)
            r.masked_input(inputs, d_masked)
            total = r.unmask(d_unmask)
        except RoundAborted:
            outcomes.add("aborted")
            continue
        survivors = r.server.survivors
        assert set(survivors) <= set(r.ids) - set(d_adv) - set(d_share) - set(d_masked)
        np.testing.assert_array_equal(total, plain_sum(inputs, survivors, r.length))
        outcomes.add("exact")
    assert "exact" in outcomes


@pytest.mark.parametrize("seed", range(3))
def test_a_bad_masked_vector_is_refused_and_the_round_sums_the_others_exactly(seed):
    """One client's masked input of the wrong length or dtype is refused by name; it counts as dropped (its
    mask key is rebuilt) and the result is the exact sum of the others, never a sum that includes it."""
    rng = np.random.default_rng(100 + seed)
    summed = 0
    for kind, bad in BAD_VECTORS.items():
        r, inputs, _ = random_round(rng)
        r.advertise()
        r.share_keys()
        liar = int(rng.choice(r.ids))
        for cid, bundle in r.bundles.items():
            msg = r.clients[cid].masked_input(bundle, inputs[cid])
            if cid == liar:
                with pytest.raises(ProtocolError, match=f"masked input of client {liar}"):
                    r.server.add(dataclasses.replace(msg, masked=bad(r.length)))
            else:
                r.server.add(msg)
        try:
            r.request = r.server.unmask_request()
            total = r.unmask()
        except RoundAborted:  # a SecAgg+ neighbourhood (or t = n) cannot lose the liar
            continue
        assert r.server.dropped_by_step["masked_input"] == [liar], kind
        np.testing.assert_array_equal(total, plain_sum(inputs, [c for c in r.ids if c != liar], r.length))
        summed += 1
    assert summed >= 3
