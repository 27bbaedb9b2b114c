"""Top-k selection and the position encodings that top-k style codecs share.

Selection: `topk_positions` keeps exactly k = `topk_count(n, ratio)` largest-magnitude entries, ties
to the lowest index, from an exact threshold (np.partition) or, optionally, a threshold bracketed
from a small random sample and then made exact (the result is the same; only the cost differs).

A sorted set of k distinct positions in [0, n) is stored in whichever of four encodings is smallest
(ties go to the earlier one in this list):

  0 bitmap:  ceil(n/8) bytes; bit i (little bit order, np.packbits) set iff position i is kept.
  1 varint:  k unsigned LEB128 varints: the first position, then the gap to each next one.
             sum(varint_len(gap_i)) bytes, varint_len(g) = 1 + [g >= 2^7] + [g >= 2^14] + [g >= 2^21] + [g >= 2^28].
  2 uint16:  per 65536-entry block (ceil(n/65536) of them) the count of kept positions in it as a
             varint, then k uint16 little-endian offsets within their block.
             sum(varint_len(count_b)) + 2k bytes.
  3 rice:    Golomb-Rice codes of d_0 = p_0, d_i = p_i - p_{i-1} - 1 with parameter b (0..32):
             uint8 b; then k remainders d_i mod 2^b, b bits each (little bit order, zero padded);
             then the quotients d_i >> b in unary, each as that many 0 bits and a closing 1 bit.
             1 + ceil(k*b/8) + ceil((sum(d_i >> b) + k)/8) bytes. b starts from the mean gap and
             moves while a neighbour is smaller (local search on the exact size).

The bitmap costs n/8 bytes whatever k is; rice costs about k*(log2(n/k) + 1.5)/8 and is never much
worse than the bitmap; varint and uint16 are byte-aligned and cheaper to decode. For each k the
exact size of every candidate is computed (after an O(1) lower bound rules out the hopeless ones),
so the payload always holds the smallest.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from .base import NON_FINITE, DecodeError
from .packing import layer_sizes, pack_codes, packed_size, unpack_codes

__all__ = [
    "topk_count",
    "topk_positions",
    "select_topk",
    "sample_index",
    "BITMAP",
    "VARINT",
    "UINT16",
    "RICE",
    "ENCODING_NAMES",
    "pack_positions",
    "unpack_positions",
    "position_sizes",
    "encode_positions",
    "decode_positions",
]

BITMAP, VARINT, UINT16, RICE = 0, 1, 2, 3
ENCODING_NAMES = ("bitmap", "varint", "uint16", "rice")
BLOCK = 1 << 16
_MAX_VARINT_BYTES = 5  # enough for any uint32
_MAX_RICE_PARAMETER = 32
_SAMPLED_MIN_LENGTH = 4096  # below this a sample would be a large share of the vector: use the exact threshold


# --- selection ----------------------------------------------------------------------------------

def topk_count(n: int, ratio: float) -> int:
    """k = ceil(ratio * n), clamped to [1, n], with `ratio` read as the decimal it prints as.

    In binary floating point 0.07 * 100 is 7.000000000000001, whose ceiling is 8; reading the ratio
    as the decimal the user wrote in the config gives the k they meant (7).
    """
    return _topk_count(int(n), float(ratio))


@functools.lru_cache(maxsize=1024)
def _topk_count(n: int, ratio: float) -> int:  # Fraction(repr()) costs ~10 us; a run asks for few (n, ratio)
    return min(max(math.ceil(Fraction(repr(ratio)) * n), 1), n)


def topk_positions(vector: np.ndarray, k: int, sample: np.ndarray | None = None) -> np.ndarray:
    """Sorted int64 positions of exactly `k` largest |vector| entries; ties go to the lowest index.

    `sample` (positions from `sample_index`) switches to the sampled threshold; the result is the
    same. `vector` must be 1-D and finite.
    """
    magnitude = np.abs(np.asarray(vector))
    n = magnitude.size
    if magnitude.ndim != 1:
        raise ValueError(f"expected a 1-D vector, got shape {magnitude.shape}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    if not np.isfinite(magnitude).all():
        raise ValueError("vector contains NaN or Inf")
    return _select(magnitude, k, sample)[0]


def select_topk(vector: np.ndarray, ratio: float, layout: np.ndarray | None = None,
                sampled_seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(sorted int64 positions, boolean mask of them) for a non-empty 1-D float32 vector.

    Without `layout`, k = topk_count(n, ratio) over the whole vector (global selection); with it
    (int64 layer sizes summing to n), topk_count(size, ratio) in each layer separately. A
    `sampled_seed` selects the sampled threshold (same result, see `_sampled_threshold`).
    ValueError if the vector holds NaN or Inf (checked on the magnitudes, which are needed anyway).
    """
    magnitude = np.abs(vector)
    if not np.isfinite(magnitude.max()):  # NaN propagates through max, and |-Inf| = Inf
        raise ValueError(NON_FINITE)
    if layout is None or layout.size == 1:
        sample = None if sampled_seed is None else sample_index(vector.size, sampled_seed)
        return _select(magnitude, topk_count(vector.size, ratio), sample)
    parts, masks, start = [], [], 0
    for size in layout.tolist():
        sample = None if sampled_seed is None else sample_index(size, sampled_seed)
        positions, mask = _select(magnitude[start:start + size], topk_count(size, ratio), sample)
        parts.append(positions + start)
        masks.append(mask)
        start += size
    return np.concatenate(parts), np.concatenate(masks)


@functools.lru_cache(maxsize=64)
def sample_index(n: int, seed: int = 0) -> np.ndarray | None:
    """Random positions (with repetition) at which the sampled threshold looks, or None for short vectors.

    Size min(n, max(1024, 16 * sqrt(n))); fixed per (n, seed), so repeated encodes pay for it once.
    """
    if n < _SAMPLED_MIN_LENGTH:
        return None
    size = min(n, max(1024, int(16 * math.sqrt(n))))
    index = np.random.default_rng([seed, n]).integers(0, n, size=size)
    index.setflags(write=False)
    return index


def _select(magnitude: np.ndarray, k: int, sample: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Exactly k positions of the largest magnitudes (lowest index first among ties) and their mask."""
    n = magnitude.size
    if k == n:
        return np.arange(n, dtype=np.int64), np.ones(n, dtype=bool)
    threshold = _sampled_threshold(magnitude, k, sample) if sample is not None else None
    if threshold is None:
        threshold = np.partition(magnitude, n - k)[n - k]
    mask = magnitude >= threshold
    count = int(np.count_nonzero(mask))
    if count > k:  # too many ties at the threshold: keep the lowest-index ones
        ties = np.flatnonzero(magnitude == threshold)
        mask[ties[k - (count - ties.size):]] = False
    return np.flatnonzero(mask).astype(np.int64, copy=False), mask


def _sampled_threshold(magnitude: np.ndarray, k: int, sample: np.ndarray):
    """The exact k-th largest magnitude, found from a sample, or None (then the caller partitions all).

    1. From the sample, bracket the threshold: t_high with about k - 4 sigma entries above it, t_low
       with about k + 4 sigma (sigma: the binomial spread of the sample count).
    2. Count above = #(m > t_high); the band = entries in [t_low, t_high]. If above < k <= above +
       band size, the k-th largest overall is the (k - above)-th largest of the band: partition only
       the band. Otherwise (a bad sample, probability ~1e-4) return None.
    """
    n = magnitude.size
    values = magnitude.take(sample)
    s = values.size
    kept = k / n
    spread = 4.0 * math.sqrt(s * kept * (1.0 - kept)) + 2.0
    low_rank = math.floor(s * (1.0 - kept) - spread)  # ascending rank of t_low in the sample
    high_rank = math.ceil(s * (1.0 - kept) + spread)
    ranks = [r for r in (low_rank, high_rank) if 0 <= r < s]
    if ranks:
        values = np.partition(values, ranks)
    t_low = values[low_rank] if low_rank >= 0 else magnitude.dtype.type(0)
    if high_rank < s:
        t_high = values[high_rank]
        above = int(np.count_nonzero(magnitude > t_high))
        in_band = (magnitude >= t_low) & (magnitude <= t_high)
    else:
        above = 0
        in_band = magnitude >= t_low
    band = magnitude[in_band]
    if not above < k <= above + band.size or band.size > n // 2:
        return None
    rank = band.size - (k - above)
    return np.partition(band, rank)[rank]


# --- varints ------------------------------------------------------------------------------------

_VARINT_STEPS = np.array([1 << 7, 1 << 14, 1 << 21, 1 << 28], dtype=np.int64)


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of each value as an unsigned LEB128 varint (values < 2**35)."""
    return np.searchsorted(_VARINT_STEPS, values.astype(np.int64, copy=False), side="right") + 1


def _varint_encode(values: np.ndarray) -> bytes:
    """Unsigned LEB128: 7 bits per byte, low bits first, high bit set on all but the last byte.

    Vectorized: one pass per byte position (at most 5), never one per value.
    """
    values = values.astype(np.uint64)
    lengths = _varint_lengths(values)
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    for j in range(_MAX_VARINT_BYTES):
        has = np.flatnonzero(lengths > j)
        if has.size == 0:
            break
        byte = (values[has] >> np.uint64(7 * j)) & np.uint64(0x7F)
        byte |= np.where(lengths[has] > j + 1, np.uint64(0x80), np.uint64(0))
        out[starts[has] + j] = byte
    return out.tobytes()


def _varint_decode(data: np.ndarray, count: int, what: str = "topk") -> tuple[np.ndarray, int]:
    """The first `count` varints of `data` (uint8) as uint64, and how many bytes they took."""
    window = data[: count * _MAX_VARINT_BYTES]  # `count` varints can't take more bytes than this
    ends = np.flatnonzero(window < 0x80)[:count]  # a byte without the continuation bit ends a varint
    if ends.size < count:
        if window.size == count * _MAX_VARINT_BYTES:  # room for `count` varints of legal length
            raise DecodeError(f"{what} varint longer than {_MAX_VARINT_BYTES} bytes")
        raise DecodeError(f"{what} payload truncated: varint stream ends after {ends.size} of {count} values")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if (lengths > _MAX_VARINT_BYTES).any():
        raise DecodeError(f"{what} varint longer than {_MAX_VARINT_BYTES} bytes")
    if ((lengths > 1) & (data[ends] == 0)).any():
        raise DecodeError(f"{what} varint not minimally encoded")
    values = np.zeros(count, dtype=np.uint64)
    for j in range(_MAX_VARINT_BYTES):
        has = np.flatnonzero(lengths > j)
        if has.size == 0:
            break
        values[has] |= (data[starts[has] + j] & np.uint8(0x7F)).astype(np.uint64) << np.uint64(7 * j)
    return values, int(ends[-1]) + 1


# --- Golomb-Rice --------------------------------------------------------------------------------

def _gaps(positions: np.ndarray) -> np.ndarray:
    """The first position, then p_i - p_{i-1} (int64; np.diff with prepend is several times slower)."""
    gaps = np.empty_like(positions)
    gaps[0] = positions[0]
    np.subtract(positions[1:], positions[:-1], out=gaps[1:])
    return gaps


def _rice_deltas(positions: np.ndarray, gaps: np.ndarray | None = None) -> np.ndarray:
    """d_0 = p_0, d_i = p_i - p_{i-1} - 1 (int64, all >= 0 for strictly increasing positions)."""
    deltas = (_gaps(positions) if gaps is None else gaps) - 1
    deltas[0] += 1
    return deltas


def _rice_size(deltas: np.ndarray, b: int) -> int:
    k = deltas.size
    return 1 + packed_size(k, b) + packed_size(int((deltas >> b).sum()) + k, 1)


def _rice_lower_bound(k: int, last: int) -> int:
    """A lower bound on the rice size for k positions ending at `last`, in O(1).

    With T = last + 1 = sum(d_i + 1): the unary part has sum(d_i >> b) + k >= max(T / 2^b, k) bits,
    so size(b) >= g(b) = 1 + ceil(k*b/8) + ceil(max(ceil(T/2^b), k)/8), and also
    size(b) >= 1 + f(b)/8 with f(b) = k*b + max(T/2^b, k), which is convex in real b with its minimum
    at b* = log2(T ln2 / k). So: g at the two integers around b*, and f one step further out on
    each side (f only grows beyond them), bound every b.
    """
    total = last + 1
    best_real = min(max(math.log2(total * math.log(2) / k), 0.0), _MAX_RICE_PARAMETER)
    low, high = math.floor(best_real), min(math.floor(best_real) + 1, _MAX_RICE_PARAMETER)
    bound = min(1 + packed_size(k, b) + packed_size(max((total + (1 << b) - 1) >> b, k), 1) for b in (low, high))
    for b in (low - 1, high + 1):
        if 0 <= b <= _MAX_RICE_PARAMETER:
            bits = k * b + max(total / 2**b, k)
            bound = min(bound, 1 + math.ceil(bits / 8 - 1e-9))
    return bound


def _rice_parameter(deltas: np.ndarray) -> tuple[int, int]:
    """(b, size): start at floor(log2(mean gap * ln2)), move to a smaller neighbour while there is one."""
    k = deltas.size
    mean = (int(deltas.sum()) + k) / k
    b = min(max(math.floor(math.log2(max(mean * math.log(2), 1.0))), 0), _MAX_RICE_PARAMETER)
    size = _rice_size(deltas, b)
    for step in (1, -1):
        moved = False
        while 0 <= b + step <= _MAX_RICE_PARAMETER:
            candidate = _rice_size(deltas, b + step)
            if candidate >= size:
                break
            b, size, moved = b + step, candidate, True
        if moved:
            break
    return b, size


def _rice_encode(deltas: np.ndarray, b: int) -> bytes:
    remainders = pack_codes(deltas & ((1 << b) - 1), b) if b else b""
    ends = np.cumsum((deltas >> b) + 1) - 1  # each quotient q: q zero bits, then a one
    bits = np.zeros(int(ends[-1]) + 1, dtype=bool)
    bits[ends] = True
    return bytes([b]) + remainders + np.packbits(bits, bitorder="little").tobytes()


def _rice_decode(data: np.ndarray, n: int, k: int, what: str) -> tuple[np.ndarray, int]:
    if data.size < 1:
        raise DecodeError(f"{what} payload truncated: no rice parameter")
    b = int(data[0])
    if b > _MAX_RICE_PARAMETER:
        raise DecodeError(f"{what} rice parameter {b} out of range [0, {_MAX_RICE_PARAMETER}]")
    remainder_size = packed_size(k, b)
    if data.size < 1 + remainder_size:
        raise DecodeError(f"{what} payload truncated: rice remainders need {remainder_size} bytes, "
                          f"got {data.size - 1}")
    remainders = unpack_codes(data[1:1 + remainder_size], k, b, what).astype(np.uint64) if b else 0
    # Valid positions below n have sum(d_i) <= n - k, so the unary part has at most this many bits:
    longest = packed_size(((n - k) >> b) + k, 1)
    window = data[1 + remainder_size: 1 + remainder_size + longest]
    ones = np.flatnonzero(np.unpackbits(window, bitorder="little"))
    if ones.size < k:
        if window.size == longest:
            raise DecodeError(f"{what} rice positions run past length {n}")
        raise DecodeError(f"{what} payload truncated: rice unary part ends after {ones.size} of {k} values")
    unary_size = int(ones[k - 1]) // 8 + 1
    if ones.size > k and ones[k] < 8 * unary_size:
        raise DecodeError(f"{what} rice unary part has padding bits set")
    quotients = _rice_deltas(ones[:k])  # zeros between consecutive ones
    quotients = np.minimum(quotients, (n >> b) + 1).astype(np.uint64)  # larger is out of range anyway
    deltas = (quotients << np.uint64(b)) | remainders
    positions = np.cumsum(np.minimum(deltas, np.uint64(n)) + np.uint64(1)) - np.uint64(1)
    if positions[-1] >= n:
        raise DecodeError(f"{what} rice positions run past length {n}")
    return positions.astype(np.int64), 1 + remainder_size + unary_size


# --- choosing and reading an encoding -------------------------------------------------------------

def _uint16_counts(positions: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(positions >> 16, minlength=(n + BLOCK - 1) // BLOCK)


def position_sizes(positions: np.ndarray, n: int) -> dict[str, int]:
    """Exact bytes of every encoding for these sorted positions (rice at the parameter it would use)."""
    positions = np.asarray(positions, dtype=np.int64)
    gaps = _gaps(positions)
    return {
        "bitmap": (n + 7) // 8,
        "varint": int(_varint_lengths(gaps).sum()),
        "uint16": int(_varint_lengths(_uint16_counts(positions, n)).sum()) + 2 * positions.size,
        "rice": _rice_parameter(_rice_deltas(positions, gaps))[1],
    }


def pack_positions(positions: np.ndarray, n: int, mask: np.ndarray | None = None) -> tuple[int, bytes]:
    """(encoding, bytes) of the smallest encoding for sorted int64 positions (ties to the earlier
    encoding); `mask`, if given, is their boolean mask (saves rebuilding it for the bitmap).

    Each candidate's exact size costs a pass over the positions; a candidate whose O(1) lower bound
    cannot beat the best so far is skipped (at ratio 0.5 only the bitmap is ever computed).
    """
    k = positions.size
    bounds = sorted(((k, VARINT), (2 * k + (n + BLOCK - 1) // BLOCK, UINT16),
                     (_rice_lower_bound(k, int(positions[-1])), RICE)))
    best, best_size = BITMAP, (n + 7) // 8
    gaps = counts = deltas = None
    rice_b = 0
    for bound, encoding in bounds:
        if (bound, encoding) >= (best_size, best):
            continue
        if encoding == VARINT:
            gaps = _gaps(positions) if gaps is None else gaps
            size = int(_varint_lengths(gaps).sum())
        elif encoding == UINT16:
            counts = _uint16_counts(positions, n)
            size = int(_varint_lengths(counts).sum()) + 2 * k
        else:
            gaps = _gaps(positions) if gaps is None else gaps
            deltas = _rice_deltas(positions, gaps)
            rice_b, size = _rice_parameter(deltas)
        if (size, encoding) < (best_size, best):
            best, best_size = encoding, size
    if best == BITMAP:
        if mask is None:
            mask = np.zeros(n, dtype=bool)
            mask[positions] = True
        return BITMAP, np.packbits(mask, bitorder="little").tobytes()
    if best == VARINT:
        return VARINT, _varint_encode(gaps)
    if best == UINT16:
        return UINT16, _varint_encode(counts) + (positions & 0xFFFF).astype("<u2").tobytes()
    return RICE, _rice_encode(deltas, rice_b)


def unpack_positions(encoding: int, data: np.ndarray, n: int, k: int, what: str = "topk") -> tuple[np.ndarray, int]:
    """(sorted int64 positions, bytes they took) from the start of uint8 `data`; DecodeError if invalid.

    `data` may run on past the positions (the values follow them in a payload).
    """
    if encoding == BITMAP:
        size = (n + 7) // 8
        if data.size < size:
            raise DecodeError(f"{what} payload truncated: bitmap needs {size} bytes, got {data.size}")
        bitmap = data[:size]
        if n % 8 and bitmap[-1] >> (n % 8):
            raise DecodeError(f"{what} bitmap has bits set beyond length {n}")
        bits = np.unpackbits(bitmap, count=n, bitorder="little").view(bool)  # flatnonzero on bool is ~10x faster
        positions = np.flatnonzero(bits)
        if positions.size != k:
            raise DecodeError(f"{what} bitmap has {positions.size} bits set, expected k={k}")
        return positions.astype(np.int64, copy=False), size
    if encoding == VARINT:
        gaps, size = _varint_decode(data, k, what)
        return _read_gaps(gaps, n, what), size
    if encoding == UINT16:
        return _read_uint16(data, n, k, what)
    if encoding == RICE:
        return _rice_decode(data, n, k, what)
    raise DecodeError(f"unknown {what} position encoding {encoding}")


def _read_gaps(gaps: np.ndarray, n: int, what: str) -> np.ndarray:
    """Positions from first-index-then-gaps, checked to be strictly increasing and below n."""
    if (gaps[1:] == 0).any():
        raise DecodeError(f"{what} indices not strictly increasing")
    # Capping each gap at n keeps the uint64 sum from wrapping (k <= n < 2**32) and changes no
    # position below n, so the first position >= n is still found where it really is.
    positions = np.cumsum(np.minimum(gaps, np.uint64(n)))
    if positions[-1] >= n:
        i = int(np.argmax(positions >= n))
        index = (int(positions[i - 1]) if i else 0) + int(gaps[i])
        raise DecodeError(f"{what} index {index} out of range for length {n}")
    return positions.astype(np.int64)


def _read_uint16(data: np.ndarray, n: int, k: int, what: str) -> tuple[np.ndarray, int]:
    blocks = (n + BLOCK - 1) // BLOCK
    counts, used = _varint_decode(data, blocks, what)
    capacity = np.full(blocks, BLOCK, dtype=np.uint64)
    capacity[-1] = n - (blocks - 1) * BLOCK
    if (counts > capacity).any():
        block = int(np.argmax(counts > capacity))
        raise DecodeError(f"{what} block {block} claims {int(counts[block])} positions, more than it holds")
    if int(counts.sum()) != k:
        raise DecodeError(f"{what} block counts sum to {int(counts.sum())}, expected k={k}")
    if data.size < used + 2 * k:
        raise DecodeError(f"{what} payload truncated: uint16 offsets need {2 * k} bytes, got {data.size - used}")
    offsets = data[used:used + 2 * k].view("<u2").astype(np.int64)
    positions = np.repeat(np.arange(blocks, dtype=np.int64) * BLOCK, counts.astype(np.int64)) + offsets
    if k > 1 and (np.diff(positions) <= 0).any():
        raise DecodeError(f"{what} indices not strictly increasing")
    if positions[-1] >= n:
        raise DecodeError(f"{what} index {int(positions[-1])} out of range for length {n}")
    return positions, used + 2 * k


# --- a position set on its own (the broadcast's shared index set) ----------------------------------

def encode_positions(positions: np.ndarray, n: int) -> bytes:
    """A sorted position set alone: 1 byte encoding, then the smallest of the encodings above.
    Used to broadcast a shared index set."""
    encoding, data = pack_positions(check_positions(positions, n), n)
    return bytes([encoding]) + data


def decode_positions(block: bytes, n: int, k: int) -> np.ndarray:
    """Inverse of `encode_positions`, strictly checked (DecodeError naming the problem)."""
    if len(block) < 1:
        raise DecodeError("position block truncated: no encoding byte")
    if block[0] >= len(ENCODING_NAMES):
        raise DecodeError(f"unknown topk position encoding {block[0]}")
    if not 1 <= k <= n:
        raise DecodeError(f"topk k={k} out of range [1, {n}]")
    positions, size = unpack_positions(block[0], np.frombuffer(block, dtype=np.uint8, offset=1), n, k)
    if len(block) != 1 + size:
        raise DecodeError(f"position block has trailing bytes: expected {1 + size} bytes, got {len(block)}")
    return positions


def check_positions(positions, n: int) -> np.ndarray:
    """Caller-given positions as int64, checked: 1 to n of them, strictly increasing, in [0, n)."""
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be a 1-D integer array, got {positions.dtype} of shape {positions.shape}")
    if not 1 <= positions.size <= n:
        raise ValueError(f"need between 1 and {n} positions, got {positions.size}")
    if n >= 2**32:
        raise ValueError(f"topk payloads hold lengths below 2**32, got {n}")
    positions = positions.astype(np.int64, copy=False)
    if positions[0] < 0 or positions[-1] >= n or (np.diff(positions) <= 0).any():
        raise ValueError(f"positions must be strictly increasing and in [0, {n})")
    return positions


def layered_count(n: int, ratio: float, layout) -> int:
    """Entries kept of a length-n vector: ceil(ratio x n) globally, or per layer when a layout is given."""
    if layout is None:
        return topk_count(n, ratio)
    return sum(topk_count(size, ratio) for size in layer_sizes(layout, n).tolist())
