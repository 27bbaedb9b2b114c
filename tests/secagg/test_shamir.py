"""Shamir over GF(2^31 - 1): any t shares rebuild a secret, t - 1 do not, the Lagrange basis is cached."""

import itertools
import os

import numpy as np
import pytest

from secagg import shamir


def shares_of(secret, n, t):
    xs = list(range(1, n + 1))
    return xs, shamir.share([secret], xs, t)[:, 0, :]


@pytest.mark.parametrize("n,t", [(2, 2), (5, 3), (10, 6), (30, 16)])
def test_any_t_shares_rebuild_the_secret(n, t):
    secret = os.urandom(32)
    xs, shares = shares_of(secret, n, t)
    rng = np.random.default_rng(n)
    for _ in range(10):
        pick = np.sort(rng.choice(n, t, replace=False))
        value = shamir.reconstruct([xs[i] for i in pick], shares[pick])
        assert shamir.field_to_secret(value) == secret


def test_every_t_subset_of_a_small_sharing_rebuilds_the_secret():
    secret = os.urandom(32)
    xs, shares = shares_of(secret, 6, 3)
    for pick in itertools.combinations(range(6), 3):
        pick = list(pick)
        assert shamir.field_to_secret(shamir.reconstruct([xs[i] for i in pick], shares[pick])) == secret


@pytest.mark.parametrize("n,t", [(5, 3), (10, 6), (30, 16)])
def test_t_minus_1_shares_do_not_rebuild_the_secret(n, t):
    secret = os.urandom(32)
    xs, shares = shares_of(secret, n, t)
    value = shamir.reconstruct(xs[: t - 1], shares[: t - 1])
    assert not np.array_equal(value, shamir.secrets_to_field([secret])[0])


@pytest.mark.parametrize("secret", [bytes(32), b"\xff" * 32])
def test_one_share_below_the_threshold_is_uniform_whatever_the_secret(secret):
    shares = shamir.share([secret] * 4000, [1, 2, 3], 3)  # 4000 independent sharings, t = 3
    seen = shares[:2].reshape(-1) / shamir.PRIME  # t - 1 = 2 shares of every chunk
    assert seen.mean() == pytest.approx(0.5, abs=0.01)
    counts = np.bincount((seen * 16).astype(int), minlength=16)
    assert np.all(np.abs(counts - seen.size / 16) < 6 * np.sqrt(seen.size / 16))


def test_the_lagrange_basis_is_cached_per_set_of_x_coordinates():
    shamir.lagrange_basis.cache_clear()
    secret = os.urandom(32)
    xs, shares = shares_of(secret, 5, 3)
    for _ in range(4):
        shamir.reconstruct(xs[:3], shares[:3])
    info = shamir.lagrange_basis.cache_info()
    assert info.misses == 1 and info.hits == 3
    assert not shamir.lagrange_basis(tuple(xs[:3])).flags.writeable


def test_many_secrets_are_shared_in_one_pass():
    secrets = [os.urandom(32) for _ in range(3)]
    xs = [2, 5, 9, 11]
    shares = shamir.share(secrets, xs, 2)
    assert shares.shape == (4, 3, shamir.CHUNKS)
    assert shares.min() >= 0 and shares.max() < shamir.PRIME
    for s, secret in enumerate(secrets):
        assert shamir.field_to_secret(shamir.reconstruct(xs[1:3], shares[1:3, s])) == secret


def test_a_share_serializes_to_fixed_size_bytes():
    _, shares = shares_of(os.urandom(32), 3, 2)
    raw = shamir.to_bytes(shares[0])
    assert len(raw) == shamir.SHARE_BYTES == 44
    np.testing.assert_array_equal(shamir.from_bytes(raw), shares[0])


@pytest.mark.parametrize("raw", [bytes(43), bytes(45), b"\xff" * 44, "x" * 44])
def test_a_malformed_share_is_refused(raw):
    with pytest.raises(shamir.ShareError):
        shamir.from_bytes(raw)


def test_a_value_that_is_not_a_padded_secret_is_refused():
    with pytest.raises(shamir.ShareError):
        shamir.field_to_secret(np.full(shamir.CHUNKS, 1 << 24))
    with pytest.raises(shamir.ShareError):
        shamir.field_to_secret(np.full(shamir.CHUNKS, 1))  # the padding byte is not zero


@pytest.mark.parametrize("xs", [[0, 1], [1, 1], [1, shamir.PRIME]])
def test_x_coordinates_must_be_distinct_nonzero_field_elements(xs):
    with pytest.raises(ValueError):
        shamir.share([bytes(32)], xs, 2)


def test_field_randomness_is_uniform_below_p():
    values = shamir.random_field(100_000)
    assert values.min() >= 0 and values.max() < shamir.PRIME
    assert values.mean() / shamir.PRIME == pytest.approx(0.5, abs=0.01)


def test_a_share_holding_the_prime_itself_is_refused_by_both_parsers():
    """PRIME is 0 in the field: accepted, one share would have two encodings."""
    raw = np.full(shamir.CHUNKS, shamir.PRIME, "<u4").tobytes()
    with pytest.raises(shamir.ShareError):
        shamir.from_bytes(raw)
    with pytest.raises(shamir.ShareError):
        shamir.many_from_bytes([raw])
