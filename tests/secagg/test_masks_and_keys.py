"""Masks look uniform, come from the cipher PRG only, and keys bind the session, the pair and the direction."""

import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from secagg_rounds import Round

from secagg import Client, ProtocolError, generate_keypair, pairwise_seed, prg_uint32, session_id
from secagg.keys import decrypt_shares, encrypt_shares, transport_keys
from secagg.prg import add_prg

SECAGG = pathlib.Path(__file__).resolve().parents[2] / "secagg"


def chi_square_uniform(values, buckets):
    counts = np.bincount(values, minlength=buckets)
    expected = values.size / buckets
    return float(((counts - expected) ** 2 / expected).sum())


def chi_square_bound(dof, z=6.0):
    """Wilson-Hilferty: the chi-square quantile about z standard deviations out (p ~ 1e-9 for z = 6)."""
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


@pytest.mark.parametrize("protocol", ["dh", "secaggplus"])
def test_a_single_masked_zero_vector_looks_uniform(protocol):
    length = 256 * 200
    r = Round(protocol, list(range(10)), length=length)
    r.advertise()
    r.share_keys()
    masked = r.clients[3].masked_input(r.bundles[3], np.zeros(length, np.uint32)).masked
    assert chi_square_uniform((masked & 0xFF).astype(np.int64), 256) < chi_square_bound(255)
    assert chi_square_uniform((masked >> 24).astype(np.int64), 256) < chi_square_bound(255)
    # the test can fail: a weakly masked vector (only values 0..127 in the low byte) is flagged
    biased = (masked & 0x7F).astype(np.int64)
    assert chi_square_uniform(biased, 256) > chi_square_bound(255)


def test_the_mask_prg_gives_the_same_stream_in_another_process():
    seed = bytes(range(32))
    code = "from secagg.prg import prg_uint32; print(prg_uint32(bytes(range(32)), 16).tolist())"
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=SECAGG.parent).stdout for _ in range(2)]
    assert runs[0] == runs[1] == f"{prg_uint32(seed, 16).tolist()}\n"


def test_add_prg_adds_and_subtracts_the_same_stream_in_place():
    seed = bytes(range(32))
    acc = np.arange(1001, dtype=np.uint32)
    add_prg(acc, seed)
    np.testing.assert_array_equal(acc, np.arange(1001, dtype=np.uint32) + prg_uint32(seed, 1001))
    add_prg(acc, seed, subtract=True)
    np.testing.assert_array_equal(acc, np.arange(1001, dtype=np.uint32))


# quantize.py draws stochastic rounding (not secret) from a numpy Generator the caller seeds
@pytest.mark.parametrize("name", sorted(p.name for p in SECAGG.glob("*.py") if p.name != "quantize.py"))
def test_masks_seeds_and_keys_never_come_from_numpy_generators(name):
    text = (SECAGG / name).read_text()
    assert not re.search(r"np\.random|numpy\.random|default_rng|import random|from random", text), name


def test_pairwise_seeds_are_symmetric_and_differ_across_sessions_and_pairs():
    s0, s1 = session_id("run", 0, [1, 2, 3]), session_id("run", 1, [1, 2, 3])
    sk_u, pk_u = generate_keypair()
    sk_v, pk_v = generate_keypair()
    seed = pairwise_seed(sk_u, pk_v, s0, 1, 2)
    assert len(seed) == 32 and seed == pairwise_seed(sk_v, pk_u, s0, 2, 1)
    assert seed != pairwise_seed(sk_u, pk_v, s1, 1, 2)
    assert seed != pairwise_seed(sk_u, pk_v, s0, 1, 3)


def test_session_id_binds_run_round_and_participant_set():
    base = session_id("run", 0, [1, 2, 3])
    assert len(base) == 32
    assert session_id("run", 0, [3, 2, 1]) == base
    assert len({base, session_id("other", 0, [1, 2, 3]), session_id("run", 1, [1, 2, 3]),
                session_id("run", 0, [1, 2, 4]), session_id("run", 0, [1, 2])}) == 5


def test_each_direction_of_a_pair_has_its_own_transport_key():
    session = session_id("run", 0, [1, 2])
    sk_u, pk_u = generate_keypair()
    sk_v, pk_v = generate_keypair()
    u_to_v, v_to_u = transport_keys(sk_u, pk_v, session, 1, 2)
    assert (v_to_u, u_to_v) == transport_keys(sk_v, pk_u, session, 2, 1)
    assert u_to_v != v_to_u
    ct = encrypt_shares(u_to_v, session, 1, 2, b"payload")
    assert decrypt_shares(u_to_v, session, 1, 2, ct) == b"payload"
    with pytest.raises(ProtocolError, match="authenticate"):
        decrypt_shares(u_to_v, session_id("run", 1, [1, 2]), 1, 2, ct)
    with pytest.raises(ProtocolError, match="authenticate"):
        decrypt_shares(v_to_u, session, 2, 1, ct)


def test_transport_keys_and_mask_seeds_are_separate_derivations_salted_by_the_session():
    """HKDF's info tells the two uses apart even over one agreement, and its salt binds each to the session."""
    s0, s1 = session_id("run", 0, [1, 2]), session_id("run", 1, [1, 2])
    sk, _ = generate_keypair()
    _, pk = generate_keypair()
    u_to_v, v_to_u = transport_keys(sk, pk, s0, 1, 2)
    seed = pairwise_seed(sk, pk, s0, 1, 2)
    assert len({u_to_v, v_to_u, seed}) == 3
    assert transport_keys(sk, pk, s1, 1, 2)[0] != u_to_v and pairwise_seed(sk, pk, s1, 1, 2) != seed


@pytest.mark.parametrize("bad_key", [bytes(31), bytes(33), bytes(32)])  # bytes(32): a low-order point
def test_a_malformed_public_key_is_refused(bad_key):
    sk, _ = generate_keypair()
    session = session_id("run", 0, [1, 2])
    with pytest.raises(ProtocolError, match="malformed public key"):
        pairwise_seed(sk, bad_key, session, 1, 2)
    with pytest.raises(ProtocolError, match="malformed public key"):
        transport_keys(sk, bad_key, session, 1, 2)


def test_seeded_key_pairs_repeat_and_unseeded_ones_never_do():
    from secagg.keys import generate_keypair

    assert generate_keypair(b"seed")[1] == generate_keypair(b"seed")[1] != generate_keypair(b"other")[1]
    assert generate_keypair()[1] != generate_keypair()[1]


@pytest.mark.parametrize("seed", ["seed", 7, bytearray(b"seed")])
def test_a_key_seed_that_is_not_bytes_is_refused_when_the_client_is_built(seed):
    r = Round("dh", [0, 1, 2])
    with pytest.raises(TypeError, match="key_seed must be bytes"):
        Client(r.config, 0, key_seed=seed)
    assert Client(r.config, 0, key_seed=b"seed").advertise() == Client(r.config, 0, key_seed=b"seed").advertise()
