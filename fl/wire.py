"""Protobuf wire format: every message serialized exactly as sent, decoded strictly, never unpickled.

Bytes on the wire are `len()` of what these `encode_*` functions return. Decoding checks the
version, the message's fields (none the version lacks) and its CRC-32C checksum, and raises
`WireError` naming the problem. Codec payloads are opaque bytes here; the codec itself validates their layout.
"""
from __future__ import annotations

import functools
import math

import google_crc32c
import numpy as np
from google.protobuf.message import DecodeError as _ProtobufDecodeError
from google.protobuf.unknown_fields import UnknownFieldSet as unknown_field_set

import secagg
from compression import DecodeError as CodecDecodeError
from compression import registry as codec_registry
from compression.packing import pack_codes, packed_size, unpack_codes
from compression.topk import decode_positions, encode_positions
from fl import wire_pb2 as pb

VERSION = 2  # 2: the checksum is CRC-32C; a version-1 message (zlib's CRC-32) fails it before its version is read
KEY_BYTES = 32
SESSION_BYTES = 32


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) by google-crc32c, in hardware where the CPU has it: several times faster than
    zlib's CRC-32 on every message the server reads (docs/performance.md, Round time at N = 50)."""
    return google_crc32c.value(data)


class WireError(ValueError):
    """A message that cannot be decoded: truncated, altered, of another version, or inconsistent."""


# The checksum is field 15 (fixed32), written last: tag byte (15 << 3) | 5, then 4 little-endian bytes.
_CHECKSUM_TAG = bytes([(15 << 3) | 5])


def _seal(msg) -> bytes:
    """Serialize, then append the CRC-32C of those bytes as field 15 (catches truncation and alteration).
    Appending a field is valid protobuf, and the body is serialized only once."""
    body = msg.SerializeToString()
    return body + _CHECKSUM_TAG + crc32c(body).to_bytes(4, "little")


# Fixed part of any message (version, session, ids, field tags, checksum), for the size limits below.
_FRAME_BYTES = 128
ADVERTISE_LIMIT = _FRAME_BYTES + 2 * 34  # two 32-byte public keys with their tags


def _parse(cls, data: bytes, what: str, limit: int | None = None):
    """Check the size limit of this message type first, so a client cannot make the server checksum or
    parse an arbitrarily long message; then the checksum, the protobuf and the wire version."""
    if limit is not None and len(data) > limit:
        raise WireError(f"{what}: {len(data)} bytes, over the {limit}-byte limit of this message")
    data = bytes(data)
    if len(data) < 5 or data[-5:-4] != _CHECKSUM_TAG:
        raise WireError(f"{what}: no checksum field at the end ({len(data)} bytes): truncated, or bytes appended "
                        "after it")
    if crc32c(data[:-5]) != int.from_bytes(data[-4:], "little"):
        raise WireError(f"{what}: checksum mismatch ({len(data)} bytes): altered or truncated in transit")
    msg = cls()
    try:
        msg.ParseFromString(data)
    except _ProtobufDecodeError as err:
        raise WireError(f"{what}: malformed protobuf ({err})") from None
    unknown = _unknown_fields(msg)  # protobuf keeps fields it does not know aside, silently
    wrong = [f"{number} ({name})" for number, name in unknown if name]
    if wrong:  # before the version: a version sent with another wire type reads as version 0
        raise WireError(f"{what}: fields {', '.join(wrong)} came with a wire type other than their own")
    if msg.version != VERSION:
        raise WireError(f"{what}: wire version {msg.version}, expected {VERSION}")
    if unknown:
        raise WireError(f"{what}: fields {[number for number, _ in unknown]} are not in wire version {VERSION}")
    return msg


def _unknown_fields(msg) -> list[tuple[int, str | None]]:
    """The fields the parser kept aside in `msg` or the messages nested in it, sorted: (number, None) for a
    number the message does not have; (number, its name) for one it has, sent with another wire type (protobuf
    sets it aside alike)."""
    known = msg.DESCRIPTOR.fields_by_number
    found = {(f.field_number, known[f.field_number].name if f.field_number in known else None)
             for f in unknown_field_set(msg)}
    for field in _message_fields(msg.DESCRIPTOR):  # not ListFields: it would copy every bytes field
        value = getattr(msg, field.name)
        for nested in (value if field.is_repeated else [value]):
            found.update(_unknown_fields(nested))
    return sorted(found, key=lambda f: (f[0], f[1] or ""))


@functools.cache
def _message_fields(descriptor) -> tuple:
    return tuple(field for field in descriptor.fields if field.message_type is not None)


def _need(cond: bool, what: str, problem: str) -> None:
    if not cond:
        raise WireError(f"{what}: {problem}")


# --- model broadcast (server -> clients) -------------------------------------------------------

def encode_broadcast(round: int, codec: str, length: int, is_delta: bool, payload: bytes,
                     index_seed: int = 0, index_count: int = 0, index_positions: bytes = b"") -> bytes:
    return _seal(pb.ModelBroadcast(
        version=VERSION, round=round, codec=codec, length=length, is_delta=is_delta, payload=payload,
        index_seed=index_seed, index_count=index_count, index_positions=index_positions))


def decode_broadcast(data: bytes, length: int) -> pb.ModelBroadcast:
    what = "model broadcast"
    msg = _parse(pb.ModelBroadcast, data, what)
    _need(msg.length == length, what, f"model length {msg.length}, expected {length}")
    _need(bool(msg.codec), what, "missing codec name (truncated?)")
    try:  # the client decodes with the codec the broadcast names
        codec_registry.canonical(msg.codec)
    except codec_registry.UnknownProtocolError:
        raise WireError(f"{what}: unknown codec {msg.codec!r}") from None
    _need(len(msg.payload) > 0, what, "empty payload")
    return msg


# --- client update without masking --------------------------------------------------------------

def encode_update(round: int, client_id: int, codec: str, length: int, weight: float, payload: bytes) -> bytes:
    return _seal(pb.ClientUpdate(version=VERSION, round=round, client_id=client_id, codec=codec, length=length,
                                 weight=weight, payload=payload))


def decode_update(data: bytes, round: int, length: int, max_payload: int | None = None, codec: str | None = None,
                  client_id: int | None = None) -> pb.ClientUpdate:
    """`max_payload`: the largest payload the round's codec produces for `length` entries (its size bound);
    `codec` and `client_id` (when given): the round's codec and the sender, which the message must name."""
    what = "client update"
    msg = _parse(pb.ClientUpdate, data, what, None if max_payload is None else _FRAME_BYTES + max_payload)
    # the server's hot path (every update of every round): the error texts are formatted only on failure
    if msg.round != round:
        raise WireError(f"{what}: round {msg.round}, expected {round} (replayed or stale)")
    if msg.length != length:
        raise WireError(f"{what}: update length {msg.length}, expected {length}")
    if not msg.codec:
        raise WireError(f"{what}: missing codec name (truncated?)")
    if codec is not None and msg.codec != codec:
        raise WireError(f"{what}: codec {msg.codec!r}, expected the round's {codec!r}")
    if client_id is not None and msg.client_id != client_id:
        raise WireError(f"{what}: from client {msg.client_id}, but sent by client {client_id}")
    if not (math.isfinite(msg.weight) and msg.weight > 0):
        raise WireError(f"{what}: weight {msg.weight} is not a positive number")
    if not msg.payload:
        raise WireError(f"{what}: empty payload")
    return msg


# --- secure aggregation -------------------------------------------------------------------------
# One encoder/decoder pair per message of secagg/messages.py. Decoders check sizes and id ranges and that id
# lists are strictly increasing; the protocol state machines check everything that needs the round's state.

def _check_session(session: bytes, what: str) -> None:
    _need(len(session) == SESSION_BYTES, what, f"session id of {len(session)} bytes, expected {SESSION_BYTES}")


def _check_id(cid: int, what: str) -> int:
    _need(cid <= secagg.MAX_CLIENT_ID, what, f"client id {cid} out of range (max {secagg.MAX_CLIENT_ID})")
    return int(cid)


def _check_ids(ids, what: str, name: str) -> tuple[int, ...]:
    ids = tuple(_check_id(cid, what) for cid in ids)
    _need(all(a < b for a, b in zip(ids, ids[1:])), what, f"{name} not strictly increasing")
    return ids


def _split(blob: bytes, size: int, count: int, what: str, name: str) -> list[bytes]:
    _need(len(blob) == size * count, what, f"{name} of {len(blob)} bytes, expected {count} x {size}")
    return [blob[i * size:(i + 1) * size] for i in range(count)]


def _check_key(key: bytes, what: str, name: str) -> bytes:
    _need(len(key) == KEY_BYTES, what, f"{name} of {len(key)} bytes, expected {KEY_BYTES}")
    return key


def encode_advertise(m: secagg.AdvertiseKeys) -> bytes:
    return _seal(pb.AdvertiseKeys(version=VERSION, session=m.session, client_id=m.client_id,
                                  cipher_public_key=m.cipher_public_key, mask_public_key=m.mask_public_key))


def decode_advertise(data: bytes) -> secagg.AdvertiseKeys:
    what = "advertise-keys message"
    msg = _parse(pb.AdvertiseKeys, data, what, ADVERTISE_LIMIT)
    _check_session(msg.session, what)
    return secagg.AdvertiseKeys(session=msg.session, client_id=_check_id(msg.client_id, what),
                                cipher_public_key=_check_key(msg.cipher_public_key, what, "cipher public key"),
                                mask_public_key=_check_key(msg.mask_public_key, what, "mask public key"))


def encode_roster(m: secagg.KeyRoster) -> bytes:
    entries = [pb.KeyRoster.Entry(client_id=cid, cipher_public_key=c_pk, mask_public_key=s_pk)
               for cid, c_pk, s_pk in m.keys]
    return _seal(pb.KeyRoster(version=VERSION, session=m.session, entries=entries))


def decode_roster(data: bytes) -> secagg.KeyRoster:
    what = "key roster"
    msg = _parse(pb.KeyRoster, data, what)
    _check_session(msg.session, what)
    _need(len(msg.entries) > 0, what, "no public keys (truncated?)")
    ids = _check_ids([e.client_id for e in msg.entries], what, "client ids")
    keys = tuple((cid, _check_key(e.cipher_public_key, what, f"cipher public key of client {cid}"),
                  _check_key(e.mask_public_key, what, f"mask public key of client {cid}"))
                 for cid, e in zip(ids, msg.entries))
    return secagg.KeyRoster(session=msg.session, keys=keys)


def encode_share_keys(m: secagg.ShareKeys) -> bytes:
    return _seal(pb.ShareKeys(version=VERSION, session=m.session, client_id=m.client_id,
                              recipients=[cid for cid, _ in m.shares], ciphertexts=b"".join(ct for _, ct in m.shares)))


def decode_share_keys(data: bytes, peers: int | None = None) -> secagg.ShareKeys:
    """`peers`: the most recipients a client can address (the cohort's size)."""
    what = "share-keys message"
    msg = _parse(pb.ShareKeys, data, what,
                 None if peers is None else _FRAME_BYTES + peers * (secagg.CIPHERTEXT_BYTES + 12))
    _check_session(msg.session, what)
    ids = _check_ids(msg.recipients, what, "recipients")
    cts = _split(msg.ciphertexts, secagg.CIPHERTEXT_BYTES, len(ids), what, "ciphertexts")
    return secagg.ShareKeys(session=msg.session, client_id=_check_id(msg.client_id, what),
                            shares=tuple(zip(ids, cts)))


def encode_share_bundle(m: secagg.ShareBundle) -> bytes:
    return _seal(pb.ShareBundle(version=VERSION, session=m.session, recipient=m.recipient,
                                senders=[cid for cid, _ in m.shares], ciphertexts=b"".join(ct for _, ct in m.shares)))


def decode_share_bundle(data: bytes) -> secagg.ShareBundle:
    what = "share bundle"
    msg = _parse(pb.ShareBundle, data, what)
    _check_session(msg.session, what)
    ids = _check_ids(msg.senders, what, "senders")
    cts = _split(msg.ciphertexts, secagg.CIPHERTEXT_BYTES, len(ids), what, "ciphertexts")
    return secagg.ShareBundle(session=msg.session, recipient=_check_id(msg.recipient, what),
                              shares=tuple(zip(ids, cts)))


def encode_masked(m: secagg.MaskedInput, bits: int = 32) -> bytes:
    """The masked vector in Z_2^bits at `bits` bits per element: its elements' low bits (the masks are uniform
    in Z_2^32, so their low bits are uniform in Z_2^bits, and the server's sum is read mod 2^bits)."""
    if bits == 32:
        data = np.ascontiguousarray(m.masked, dtype="<u4").tobytes()
    else:
        data = pack_codes(np.asarray(m.masked, np.uint32) & np.uint32((1 << bits) - 1), bits)
    return _seal(pb.MaskedInput(version=VERSION, session=m.session, client_id=m.client_id, length=len(m.masked),
                                masked=data, bits=bits))


def masked_bytes(length: int, bits: int = 32) -> int:
    """Bytes of a masked vector's elements on the wire: ceil(length * bits / 8)."""
    return packed_size(length, bits)


def decode_masked(data: bytes, length: int, bits: int = 32) -> secagg.MaskedInput:
    what = "masked input"
    size = masked_bytes(length, bits)
    msg = _parse(pb.MaskedInput, data, what, _FRAME_BYTES + size)
    _check_session(msg.session, what)
    _need(msg.length == length, what, f"vector length {msg.length}, expected {length}")
    _need(msg.bits == bits, what, f"field of {msg.bits} bits, expected {bits}")
    _need(len(msg.masked) == size, what,
          f"masked vector has {len(msg.masked)} bytes, expected {size} ({length} elements of {bits} bits)")
    raw = np.frombuffer(msg.masked, dtype=np.uint8)
    if bits == 32:
        vec = raw.view("<u4").astype(np.uint32)
    else:
        try:
            vec = unpack_codes(raw, length, bits, what).astype(np.uint32, copy=False)
        except CodecDecodeError as err:
            raise WireError(str(err)) from None
    return secagg.MaskedInput(session=msg.session, client_id=_check_id(msg.client_id, what), masked=vec)


def encode_unmask_request(m: secagg.UnmaskRequest) -> bytes:
    return _seal(pb.UnmaskRequest(version=VERSION, session=m.session, survivors=m.survivors, dropped=m.dropped))


def decode_unmask_request(data: bytes) -> secagg.UnmaskRequest:
    what = "unmask request"
    msg = _parse(pb.UnmaskRequest, data, what)
    _check_session(msg.session, what)
    _need(len(msg.survivors) > 0, what, "no survivors (truncated?)")
    return secagg.UnmaskRequest(session=msg.session, survivors=_check_ids(msg.survivors, what, "survivors"),
                                dropped=_check_ids(msg.dropped, what, "dropped clients"))


def encode_unmask_response(m: secagg.UnmaskResponse) -> bytes:
    return _seal(pb.UnmaskResponse(
        version=VERSION, session=m.session, client_id=m.client_id,
        self_mask_owners=[cid for cid, _ in m.self_mask_shares],
        self_mask_shares=b"".join(share for _, share in m.self_mask_shares),
        key_owners=[cid for cid, _ in m.key_shares], key_shares=b"".join(share for _, share in m.key_shares)))


def decode_unmask_response(data: bytes, peers: int | None = None) -> secagg.UnmaskResponse:
    """`peers`: the most clients whose shares one response can hold (the cohort's size)."""
    what = "unmask response"
    msg = _parse(pb.UnmaskResponse, data, what,
                 None if peers is None else _FRAME_BYTES + peers * 2 * (secagg.SHARE_BYTES + 12))
    _check_session(msg.session, what)
    b_owners = _check_ids(msg.self_mask_owners, what, "self-mask share owners")
    _need(len(b_owners) > 0, what, "no self-mask shares (truncated?)")
    b_shares = _split(msg.self_mask_shares, secagg.SHARE_BYTES, len(b_owners), what, "self-mask shares")
    key_owners = _check_ids(msg.key_owners, what, "key share owners")
    key_shares = _split(msg.key_shares, secagg.SHARE_BYTES, len(key_owners), what, "key shares")
    return secagg.UnmaskResponse(session=msg.session, client_id=_check_id(msg.client_id, what),
                                 self_mask_shares=tuple(zip(b_owners, b_shares)),
                                 key_shares=tuple(zip(key_owners, key_shares)))


def encode_round_index(session: bytes, positions: np.ndarray, length: int) -> bytes:
    return _seal(pb.RoundIndexSet(version=VERSION, session=session, length=length, count=len(positions),
                                  positions=encode_positions(positions, length)))


def decode_round_index(data: bytes, session: bytes, length: int, count: int) -> np.ndarray:
    """The index set for the masked exchange of `session`: exactly `count` sorted positions of [0, length)."""
    what = "round index set"
    msg = _parse(pb.RoundIndexSet, data, what, _FRAME_BYTES + 1 + max(length // 8 + 1, 10 * count))
    _need(msg.session == session, what, "session does not match this exchange (replayed or misrouted)")
    _need(msg.length == length and msg.count == count, what,
          f"{msg.count} of {msg.length} positions, expected {count} of {length}")
    try:
        return decode_positions(msg.positions, length, count)
    except CodecDecodeError as err:
        raise WireError(f"{what}: {err}") from None


# --- the round's shared index set, carried in the broadcast ----------------------------------------

def index_set_fields(positions: np.ndarray | None, seed: int, length: int) -> dict:
    """Broadcast fields for the shared index set: just the public seed when clients can derive the set
    from it, else the positions as top-k's position block: the smallest of bitmap, delta-varint, uint16 offsets and
    Golomb-Rice (`compression.positions.encode_positions`)."""
    if positions is None:
        return {}
    if seed or len(positions) == length:
        return {"index_seed": seed, "index_count": len(positions)}
    return {"index_count": len(positions), "index_positions": encode_positions(positions, length)}


def decode_index_set(msg: pb.ModelBroadcast) -> np.ndarray | None:
    from compression.index_policy import random_positions

    what = "model broadcast"
    if msg.index_count == 0:
        _need(not msg.index_positions and not msg.index_seed, what, "index set fields without a count")
        return None
    _need(msg.index_count <= msg.length, what, f"index set of {msg.index_count} > model length {msg.length}")
    _need(not (msg.index_positions and msg.index_seed), what, "index set has both positions and a seed")
    if msg.index_positions:
        try:
            return decode_positions(msg.index_positions, msg.length, msg.index_count)
        except CodecDecodeError as err:
            raise WireError(f"{what}: index set: {err}") from None
    if msg.index_seed:
        return random_positions(msg.length, msg.index_count, msg.index_seed)
    _need(msg.index_count == msg.length, what, "index set has neither positions nor a seed")
    return np.arange(msg.length, dtype=np.int64)
