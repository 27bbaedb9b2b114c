"""Plain-Python references for the position encodings: one value and one bit at a time.

Shared by the top-k, ternary and position tests (imported by module name: pytest puts this folder
on sys.path).
"""

import math

from compression.positions import ENCODING_NAMES


def leb128(value: int) -> bytes:
    """Reference unsigned LEB128, one value at a time."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def pack_bits(bits) -> bytes:
    """Little bit order: bit t goes to bit t % 8 of byte t // 8."""
    out = bytearray((len(bits) + 7) // 8)
    for t, bit in enumerate(bits):
        out[t // 8] |= bit << (t % 8)
    return bytes(out)


def reference_bitmap(positions, n) -> bytes:
    kept = set(int(p) for p in positions)
    return pack_bits([int(i in kept) for i in range(n)])


def reference_varint(positions) -> bytes:
    previous, out = 0, b""
    for p in positions:
        out += leb128(int(p) - previous)
        previous = int(p)
    return out


def reference_uint16(positions, n) -> bytes:
    blocks = (n + 65535) // 65536
    counts = [0] * blocks
    for p in positions:
        counts[int(p) // 65536] += 1
    return b"".join(leb128(c) for c in counts) + b"".join(int(p % 65536).to_bytes(2, "little") for p in positions)


def rice_deltas(positions):
    return [int(positions[0])] + [int(b) - int(a) - 1 for a, b in zip(positions[:-1], positions[1:])]


def reference_rice(positions, b) -> bytes:
    deltas = rice_deltas(positions)
    remainders = [(d >> j) & 1 for d in deltas for j in range(b)]
    unary = [bit for d in deltas for bit in [0] * (d >> b) + [1]]
    return bytes([b]) + pack_bits(remainders) + pack_bits(unary)


def reference_rice_size(deltas, b) -> int:
    return 1 + math.ceil(len(deltas) * b / 8) + math.ceil((sum(d >> b for d in deltas) + len(deltas)) / 8)


def reference_rice_parameter(positions) -> int:
    """The documented rule: start at floor(log2(max(mean gap * ln 2, 1))), move while a neighbour is smaller."""
    deltas = rice_deltas(positions)
    mean = (sum(deltas) + len(deltas)) / len(deltas)
    b = min(max(math.floor(math.log2(max(mean * math.log(2), 1.0))), 0), 32)
    for step in (1, -1):
        moved = False
        while 0 <= b + step <= 32 and reference_rice_size(deltas, b + step) < reference_rice_size(deltas, b):
            b, moved = b + step, True
        if moved:
            break
    return b


def reference_position_sizes(positions, n) -> dict:
    positions = [int(p) for p in positions]
    b = reference_rice_parameter(positions)
    return {"bitmap": math.ceil(n / 8), "varint": len(reference_varint(positions)),
            "uint16": len(reference_uint16(positions, n)), "rice": reference_rice_size(rice_deltas(positions), b)}


def reference_block(positions, n) -> bytes:
    """encode_positions by the spec: the smallest encoding, ties to the earlier one."""
    sizes = reference_position_sizes(positions, n)
    name = min(ENCODING_NAMES, key=lambda e: (sizes[e], ENCODING_NAMES.index(e)))
    data = {"bitmap": lambda: reference_bitmap(positions, n), "varint": lambda: reference_varint(positions),
            "uint16": lambda: reference_uint16(positions, n),
            "rice": lambda: reference_rice(positions, reference_rice_parameter(positions))}[name]()
    return bytes([ENCODING_NAMES.index(name)]) + data
