"""Pairwise DH masking: exact sums, masked inputs that reveal nothing alone, and checks that fail closed."""

import dataclasses

import numpy as np
import pytest

from secagg import (
    DHClient,
    DHServer,
    FixedPointQuantizer,
    KeyRoster,
    MaskedInput,
    ProtocolError,
    RoundAborted,
    generate_keypair,
    pairwise_seed,
    session_id,
)

LENGTH = 1000


def start_round(ids, length=LENGTH, run="run", round=0):
    """A server and its clients, with every key advertised and the roster built."""
    session = session_id(run, round, ids)
    server = DHServer(session, ids, length)
    clients = {cid: DHClient(cid, session, ids, length) for cid in ids}
    for client in clients.values():
        server.receive_keys(client.advertise())
    return server, clients, server.roster()


def random_inputs(ids, length=LENGTH, seed=0):
    rng = np.random.default_rng(seed)
    return {cid: rng.integers(0, 2**32, length, dtype=np.uint32) for cid in ids}


# --- masks cancel exactly ----------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 10])
def test_masked_sum_equals_the_plain_sum_exactly(n):
    ids = list(range(100, 100 + n))
    quantizer = FixedPointQuantizer(clip=1.0, max_clients=16)
    rng = np.random.default_rng(n)
    floats = {cid: rng.normal(0.0, 0.6, LENGTH) for cid in ids}  # some entries beyond the clip
    quantized = {cid: quantizer.quantize(x, rng) for cid, x in floats.items()}
    server, clients, roster = start_round(ids)

    for cid in ids:
        server.add(clients[cid].mask(roster, quantized[cid]))
    total = server.result()

    plain = np.zeros(LENGTH, dtype=np.uint32)
    for q in quantized.values():
        plain += q
    assert total.dtype == np.uint32
    assert np.array_equal(total, plain)
    clipped_sum = sum(np.clip(x, -1.0, 1.0) for x in floats.values())
    assert np.abs(quantizer.dequantize(total) - clipped_sum).max() <= n * quantizer.step


def test_client_ids_need_not_be_contiguous_or_ordered():
    ids = [42, 7, 1_000_000, 3]
    inputs = random_inputs(ids)
    server, clients, roster = start_round(ids)
    for cid in reversed(ids):
        server.add(clients[cid].mask(roster, inputs[cid]))
    assert np.array_equal(server.result(), np.sum(list(inputs.values()), axis=0, dtype=np.uint32))


def test_a_masked_input_looks_uniformly_random():
    ids = [0, 1, 2]
    length = 10_000
    server, clients, roster = start_round(ids, length=length)
    zeros = np.zeros(length, dtype=np.uint32)
    masked = clients[1].mask(roster, zeros).masked

    assert masked.mean() / 2**32 == pytest.approx(0.5, abs=0.02)
    counts = np.bincount(masked >> np.uint32(28), minlength=16)  # top 4 bits: 16 equal buckets
    assert np.all(np.abs(counts - length / 16) < 125)  # about 5 standard deviations


def test_a_masked_input_differs_from_its_input():
    ids = [0, 1]
    inputs = random_inputs(ids)
    server, clients, roster = start_round(ids)
    masked = clients[0].mask(roster, inputs[0]).masked
    assert np.mean(masked == inputs[0]) < 0.01


def test_the_client_does_not_modify_its_input():
    ids = [0, 1]
    inputs = random_inputs(ids)
    before = inputs[0].copy()
    _, clients, roster = start_round(ids)
    clients[0].mask(roster, inputs[0])
    assert np.array_equal(inputs[0], before)


def test_without_every_client_the_masks_do_not_cancel():
    ids = [0, 1, 2]
    inputs = random_inputs(ids)
    _, clients, roster = start_round(ids)
    partial = clients[0].mask(roster, inputs[0]).masked + clients[1].mask(roster, inputs[1]).masked
    assert not np.array_equal(partial, inputs[0] + inputs[1])


# --- keys and sessions -------------------------------------------------------------------------


def test_pairwise_seeds_are_symmetric():
    session = session_id("run", 0, [3, 8])
    sk_u, pk_u = generate_keypair()
    sk_v, pk_v = generate_keypair()
    seed = pairwise_seed(sk_u, pk_v, session, 3, 8)
    assert len(seed) == 32
    assert seed == pairwise_seed(sk_v, pk_u, session, 8, 3)


def test_pairwise_seeds_differ_across_sessions_and_pairs():
    sk_u, _ = generate_keypair()
    _, pk_v = generate_keypair()
    s0, s1 = session_id("run", 0, [1, 2]), session_id("run", 1, [1, 2])
    assert pairwise_seed(sk_u, pk_v, s0, 1, 2) != pairwise_seed(sk_u, pk_v, s1, 1, 2)
    assert pairwise_seed(sk_u, pk_v, s0, 1, 2) != pairwise_seed(sk_u, pk_v, s0, 1, 3)


def test_session_id_binds_run_round_and_participant_set():
    base = session_id("run", 0, [1, 2, 3])
    assert len(base) == 32
    assert session_id("run", 0, [3, 2, 1, 1]) == base  # sorted unique ids
    assert session_id("other", 0, [1, 2, 3]) != base
    assert session_id("run", 1, [1, 2, 3]) != base
    assert session_id("run", 0, [1, 2, 4]) != base
    assert session_id("run", 0, [1, 2]) != base


@pytest.mark.parametrize("bad_key", [bytes(31), bytes(33), bytes(32)])  # bytes(32): low-order point
def test_pairwise_seed_rejects_a_malformed_public_key(bad_key):
    sk, _ = generate_keypair()
    with pytest.raises(ProtocolError, match="malformed public key"):
        pairwise_seed(sk, bad_key, session_id("run", 0, [1, 2]), 1, 2)


def test_a_masked_input_replayed_from_another_round_is_rejected():
    ids = [0, 1]
    inputs = random_inputs(ids)
    _, old_clients, old_roster = start_round(ids, round=0)
    replayed = old_clients[0].mask(old_roster, inputs[0])
    server, _, _ = start_round(ids, round=1)
    with pytest.raises(ProtocolError, match="different session"):
        server.add(replayed)


def test_the_client_rejects_a_roster_from_another_session():
    ids = [0, 1]
    _, clients, roster = start_round(ids)
    forged = dataclasses.replace(roster, session=session_id("run", 99, ids))
    with pytest.raises(ProtocolError, match="different session"):
        clients[0].mask(forged, np.zeros(LENGTH, dtype=np.uint32))


def test_the_server_rejects_keys_from_another_session():
    ids = [0, 1]
    server = DHServer(session_id("run", 0, ids), ids, LENGTH)
    msg = DHClient(0, session_id("run", 1, ids), ids, LENGTH).advertise()
    with pytest.raises(ProtocolError, match="different session"):
        server.receive_keys(msg)


# --- the server fails closed -------------------------------------------------------------------


def test_duplicate_advertise_keys_are_rejected():
    ids = [0, 1]
    session = session_id("run", 0, ids)
    server = DHServer(session, ids, LENGTH)
    msg = DHClient(0, session, ids, LENGTH).advertise()
    server.receive_keys(msg)
    with pytest.raises(ProtocolError, match="twice"):
        server.receive_keys(msg)


def test_a_public_key_sent_by_two_clients_is_rejected():
    ids = [0, 1]
    session = session_id("run", 0, ids)
    server = DHServer(session, ids, LENGTH)
    msg = DHClient(0, session, ids, LENGTH).advertise()
    server.receive_keys(msg)
    with pytest.raises(ProtocolError, match="already sent"):
        server.receive_keys(dataclasses.replace(msg, client_id=1))


def test_a_malformed_advertised_key_is_rejected():
    ids = [0, 1]
    session = session_id("run", 0, ids)
    server = DHServer(session, ids, LENGTH)
    msg = DHClient(0, session, ids, LENGTH).advertise()
    with pytest.raises(ProtocolError, match="malformed public key"):
        server.receive_keys(dataclasses.replace(msg, public_key=msg.public_key[:31]))


def test_an_unknown_client_is_rejected():
    ids = [0, 1]
    session = session_id("run", 0, ids)
    server = DHServer(session, ids, LENGTH)
    stranger = dataclasses.replace(DHClient(0, session, ids, LENGTH).advertise(), client_id=5)
    with pytest.raises(ProtocolError, match="not a participant"):
        server.receive_keys(stranger)

    server, clients, roster = start_round(ids)
    masked = clients[0].mask(roster, np.zeros(LENGTH, dtype=np.uint32))
    with pytest.raises(ProtocolError, match="not a participant"):
        server.add(dataclasses.replace(masked, client_id=5))


@pytest.mark.parametrize(
    "vector",
    [np.zeros(LENGTH - 1, np.uint32), np.zeros(LENGTH + 1, np.uint32), np.zeros((2, LENGTH // 2), np.uint32)],
)
def test_a_masked_input_of_the_wrong_length_is_rejected(vector):
    server, _, _ = start_round([0, 1])
    with pytest.raises(ProtocolError, match="shape"):
        server.add(MaskedInput(session=server.session, client_id=0, masked=vector))


@pytest.mark.parametrize("vector", [np.zeros(LENGTH, np.int64), np.zeros(LENGTH, np.float32), [0] * LENGTH])
def test_a_masked_input_that_is_not_uint32_is_rejected(vector):
    server, _, _ = start_round([0, 1])
    with pytest.raises(ProtocolError, match="uint32"):
        server.add(MaskedInput(session=server.session, client_id=0, masked=vector))


def test_a_duplicate_masked_input_is_rejected():
    server, clients, roster = start_round([0, 1])
    masked = clients[0].mask(roster, np.zeros(LENGTH, dtype=np.uint32))
    server.add(masked)
    with pytest.raises(ProtocolError, match="twice"):
        server.add(masked)


def test_a_client_missing_at_the_roster_aborts_the_round_naming_it():
    ids = [0, 1, 2]
    session = session_id("run", 0, ids)
    server = DHServer(session, ids, LENGTH)
    for cid in (0, 2):
        server.receive_keys(DHClient(cid, session, ids, LENGTH).advertise())
    with pytest.raises(RoundAborted, match=r"\[1\]") as info:
        server.roster()
    assert info.value.missing == (1,)


def test_a_client_missing_at_the_result_aborts_the_round_naming_it():
    ids = [0, 1, 2]
    server, clients, roster = start_round(ids)
    for cid in (0, 1):
        server.add(clients[cid].mask(roster, np.zeros(LENGTH, dtype=np.uint32)))
    with pytest.raises(RoundAborted, match=r"\[2\]") as info:
        server.result()
    assert info.value.missing == (2,)
    assert isinstance(info.value, ProtocolError)


def test_an_aborted_round_stays_aborted():
    ids = [0, 1]
    server, clients, roster = start_round(ids)
    with pytest.raises(RoundAborted):
        server.result()
    with pytest.raises(ProtocolError):
        server.add(clients[1].mask(roster, np.zeros(LENGTH, dtype=np.uint32)))


def test_masked_inputs_before_the_roster_are_rejected():
    ids = [0, 1]
    session = session_id("run", 0, ids)
    server = DHServer(session, ids, LENGTH)
    with pytest.raises(ProtocolError, match="unexpected masked input"):
        server.add(MaskedInput(session=session, client_id=0, masked=np.zeros(LENGTH, np.uint32)))


def test_keys_after_the_roster_are_rejected():
    ids = [0, 1]
    server, _, _ = start_round(ids)
    late = DHClient(0, server.session, ids, LENGTH).advertise()
    with pytest.raises(ProtocolError, match="unexpected advertised keys"):
        server.receive_keys(late)


# --- the client fails closed -------------------------------------------------------------------


def test_a_roster_that_swaps_the_clients_own_key_is_rejected():
    ids = [0, 1, 2]
    _, clients, roster = start_round(ids)
    _, attacker_key = generate_keypair()
    swapped = tuple((cid, attacker_key if cid == 0 else key) for cid, key in roster.public_keys)
    with pytest.raises(ProtocolError, match="advertised"):
        clients[0].mask(dataclasses.replace(roster, public_keys=swapped), np.zeros(LENGTH, np.uint32))


def test_a_roster_that_does_not_list_exactly_the_participants_is_rejected():
    ids = [0, 1, 2]
    _, clients, roster = start_round(ids)
    short = dataclasses.replace(roster, public_keys=roster.public_keys[:2])
    with pytest.raises(ProtocolError, match=r"missing \[2\]"):
        clients[0].mask(short, np.zeros(LENGTH, np.uint32))

    _, clients, roster = start_round(ids)
    _, extra_key = generate_keypair()
    extra = dataclasses.replace(roster, public_keys=roster.public_keys + ((9, extra_key),))
    with pytest.raises(ProtocolError, match=r"unexpected \[9\]"):
        clients[0].mask(extra, np.zeros(LENGTH, np.uint32))


def test_a_roster_with_duplicate_ids_or_keys_is_rejected():
    ids = [0, 1, 2]
    _, clients, roster = start_round(ids)
    doubled = dataclasses.replace(roster, public_keys=roster.public_keys + roster.public_keys[2:])
    with pytest.raises(ProtocolError, match="more than once"):
        clients[0].mask(doubled, np.zeros(LENGTH, np.uint32))

    _, clients, roster = start_round(ids)
    (a, ka), (b, _), (c, _) = roster.public_keys
    same_key = KeyRoster(session=roster.session, public_keys=((a, ka), (b, ka), (c, ka)))
    with pytest.raises(ProtocolError, match="same public key"):
        clients[2].mask(same_key, np.zeros(LENGTH, np.uint32))


def test_a_roster_with_a_malformed_key_is_rejected():
    ids = [0, 1]
    _, clients, roster = start_round(ids)
    (a, ka), (b, kb) = roster.public_keys
    bad = dataclasses.replace(roster, public_keys=((a, ka), (b, kb[:31])))
    with pytest.raises(ProtocolError, match="malformed public key"):
        clients[0].mask(bad, np.zeros(LENGTH, np.uint32))


@pytest.mark.parametrize("vector", [np.zeros(LENGTH - 1, np.uint32), np.zeros(LENGTH, np.int32)])
def test_the_client_rejects_an_input_of_the_wrong_length_or_dtype(vector):
    _, clients, roster = start_round([0, 1])
    with pytest.raises(ProtocolError):
        clients[0].mask(roster, vector)


def test_mask_before_advertise_or_twice_is_rejected():
    ids = [0, 1]
    _, clients, roster = start_round(ids)
    fresh = DHClient(0, roster.session, ids, LENGTH)
    with pytest.raises(ProtocolError, match="before advertise"):
        fresh.mask(roster, np.zeros(LENGTH, np.uint32))

    clients[0].mask(roster, np.zeros(LENGTH, np.uint32))
    with pytest.raises(ProtocolError, match="only once"):
        clients[0].mask(roster, np.zeros(LENGTH, np.uint32))


def test_advertise_twice_is_rejected():
    ids = [0, 1]
    client = DHClient(0, session_id("run", 0, ids), ids, LENGTH)
    client.advertise()
    with pytest.raises(ProtocolError, match="already advertised"):
        client.advertise()


def test_a_round_needs_at_least_two_distinct_participants():
    session = session_id("run", 0, [0])
    with pytest.raises(ValueError, match="at least 2"):
        DHServer(session, [0], LENGTH)
    with pytest.raises(ValueError, match="duplicate"):
        DHServer(session, [0, 0], LENGTH)
    with pytest.raises(ValueError, match="not among the participants"):
        DHClient(5, session, [0, 1], LENGTH)
