"""The wire: protobuf messages, bytes counted as len(serialized), strict decoding, never pickle."""
import filecmp
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import compression
import secagg
from fl import wire

ROOT = pathlib.Path(__file__).resolve().parents[2]
CT, SH = secagg.CIPHERTEXT_BYTES, secagg.SHARE_BYTES


def test_generated_protobuf_code_is_in_sync_with_the_proto(tmp_path):
    (tmp_path / "fl").mkdir()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={tmp_path}",
                    str(ROOT / "fl" / "wire.proto")], check=True)
    assert filecmp.cmp(tmp_path / "fl" / "wire_pb2.py", ROOT / "fl" / "wire_pb2.py", shallow=False), \
        "fl/wire_pb2.py is stale: regenerate it (command in fl/wire.proto)"


def test_no_wire_or_codec_module_uses_pickle():
    """Every module of the three packages, subpackages included (fl/rounds builds the messages, fl/runtime's
    transport carries the replies)."""
    paths = [p for folder in ("fl", "compression", "secagg") for p in (ROOT / folder).rglob("*.py")]
    assert {"rounds", "runtime"} <= {p.parent.name for p in paths}
    for path in paths:
        text = path.read_text()
        assert "import pickle" not in text and "pickle.load" not in text and "cloudpickle" not in text, path


def _update_message(length=1000, ratio=0.1):
    vec = np.random.default_rng(0).normal(size=length).astype(np.float32)
    payload = compression.TopKCompression(ratio).encode(vec)
    return wire.encode_update(3, 7, "topk", length, 144.0, payload), payload


def test_client_update_roundtrip_and_its_few_bytes_beyond_the_payload():
    """What a plain round counts is len() of this message (tests/fl/test_simulation.py): the payload,
    a protobuf header naming round, client, codec, length and weight, and a 4-byte checksum."""
    message, payload = _update_message()
    msg = wire.decode_update(message, 3, 1000)
    assert (msg.client_id, msg.codec, msg.weight, msg.payload) == (7, "topk", 144.0, payload)
    assert payload in message and 4 + len(payload) < len(message) <= len(payload) + 32


@pytest.mark.parametrize("weight", [0.0, -1.0, float("nan"), float("inf"), -float("inf")])
def test_an_update_whose_weight_is_not_a_positive_number_is_refused(weight):
    """A weight of 0 or below, NaN or Inf would scale or flip the weighted mean (or poison it): refused on
    decode, naming it."""
    payload = compression.TopKCompression(0.1).encode(np.ones(1000, np.float32))
    message = wire.encode_update(3, 7, "topk", 1000, weight, payload)
    with pytest.raises(wire.WireError, match="weight .* is not a positive number"):
        wire.decode_update(message, 3, 1000)


MESSAGES = [  # (encode, decode) for every decoder, each on a valid message
    (lambda: _update_message()[0], lambda m: wire.decode_update(m, 3, 1000)),
    (lambda: wire.encode_masked(secagg.MaskedInput(b"s" * 32, 4, np.arange(50, dtype=np.uint32))),
     lambda m: wire.decode_masked(m, 50)),
    (lambda: wire.encode_broadcast(0, "none", 100, False, compression.NoCompression().encode(np.ones(100, np.float32))),
     lambda m: wire.decode_broadcast(m, 100)),
    (lambda: wire.encode_advertise(secagg.AdvertiseKeys(b"s" * 32, 4, b"c" * 32, b"k" * 32)), wire.decode_advertise),
    (lambda: wire.encode_roster(secagg.KeyRoster(b"s" * 32, ((1, b"a" * 32, b"b" * 32), (2, b"c" * 32, b"d" * 32)))),
     wire.decode_roster),
    (lambda: wire.encode_share_keys(secagg.ShareKeys(b"s" * 32, 4, ((1, b"x" * CT), (7, b"y" * CT)))),
     wire.decode_share_keys),
    (lambda: wire.encode_share_bundle(secagg.ShareBundle(b"s" * 32, 4, ((1, b"x" * CT), (7, b"y" * CT)))),
     wire.decode_share_bundle),
    (lambda: wire.encode_unmask_request(secagg.UnmaskRequest(b"s" * 32, (1, 4, 300), (2,))),
     wire.decode_unmask_request),
    (lambda: wire.encode_unmask_response(secagg.UnmaskResponse(b"s" * 32, 4, ((1, b"\x01" * SH), (4, b"\x02" * SH)),
                                                               ((2, b"\x03" * SH),))),
     wire.decode_unmask_response),
    (lambda: wire.encode_masked(secagg.MaskedInput(b"s" * 32, 4, np.arange(50, dtype=np.uint32)), 7),
     lambda m: wire.decode_masked(m, 50, 7)),
    (lambda: wire.encode_round_index(b"a" * 32, np.array([3, 40, 41, 900]), 1000),
     lambda m: wire.decode_round_index(m, b"a" * 32, 1000, 4)),
    (lambda: wire.encode_broadcast(0, "none", 1000, True, compression.NoCompression().encode(np.ones(1000, np.float32)),
                                   **wire.index_set_fields(np.array([3, 40, 41, 900]), 0, 1000)),
     lambda m: wire.decode_index_set(wire.decode_broadcast(m, 1000))),
    (lambda: wire.encode_broadcast(0, "none", 1000, True, compression.NoCompression().encode(np.ones(1000, np.float32)),
                                   **wire.index_set_fields(np.array([3, 40, 41, 900]), 77, 1000)),
     lambda m: wire.decode_index_set(wire.decode_broadcast(m, 1000))),
]


@pytest.mark.parametrize("encode,decode", MESSAGES)
def test_every_truncation_of_a_message_raises_a_wire_error(encode, decode):
    message = encode()
    decode(message)  # the whole message decodes
    for cut in range(len(message)):
        with pytest.raises(wire.WireError):
            decode(message[:cut])


def _sealed(body: bytes) -> bytes:
    """`body` and its CRC-32C, as wire._seal appends it: an alteration the checksum cannot catch."""
    return body + wire._CHECKSUM_TAG + wire.crc32c(body).to_bytes(4, "little")


def _sealed_alterations(message: bytes):
    """The message's body cut at every length, each byte flipped three ways, raw fields appended (an overlong
    varint, a length past the end, 99 nested groups, an unclosed group, a non-minimal varint) and 300 seeded
    rewrites of one to three bytes, each sealed again."""
    body = message[:-5]
    yield from (_sealed(body[:cut]) for cut in range(len(body)))
    for i in range(len(body)):
        for bits in (0x01, 0x80, 0xFF):
            yield _sealed(body[:i] + bytes([body[i] ^ bits]) + body[i + 1:])
    for field in (b"\x08" + b"\xff" * 9 + b"\x01", b"\x12\xff\xff\xff\xff\x0f", b"\x63" * 99 + b"\x64" * 99, b"\x7b",
                  b"\x70\x80\x00"):
        yield _sealed(body + field)
    rng = np.random.default_rng(len(body))
    for _ in range(300):
        altered = bytearray(body)
        for i in rng.integers(0, len(body), rng.integers(1, 4)):
            altered[i] = rng.integers(0, 256)
        yield _sealed(bytes(altered))


@pytest.mark.parametrize("encode,decode", MESSAGES)
def test_a_message_altered_behind_a_valid_checksum_raises_only_wire_errors(encode, decode):
    """The checksum catches what changes in transit, not a sender that seals what it altered: the checks behind it
    refuse such a message as a WireError. Round code refuses a message on WireError (masked rounds: or
    ProtocolError) and nothing else, so protobuf's DecodeError or a codec's escaping would end the run."""
    for altered in _sealed_alterations(encode()):
        try:
            decode(altered)
        except wire.WireError:
            pass


@pytest.mark.parametrize("encode,decode", MESSAGES)
def test_a_field_this_wire_version_does_not_have_is_refused_by_number(encode, decode):
    """protobuf parses a field it does not know into a side set and says nothing: a message from a newer
    encoder, or one carrying bytes the round never reads, would pass as this version's message."""
    body = encode()[:-5]
    for field in (b"\x70\x05", b"\x72\x03abc", b"\x98\x06\x01"):  # 14 varint, 14 bytes, 99 varint
        number = 99 if field.startswith(b"\x98") else 14
        with pytest.raises(wire.WireError, match=rf"fields \[{number}\] are not in wire version 2"):
            decode(_sealed(body + field))


def test_a_field_unknown_inside_a_roster_entry_is_refused_too():
    """Unknown fields of a nested message sit in that message's own set, not the outer one's."""
    entry = wire.pb.KeyRoster.Entry(client_id=1, cipher_public_key=b"a" * 32, mask_public_key=b"b" * 32)

    def roster(entry_bytes: bytes) -> bytes:
        head = wire.pb.KeyRoster(version=wire.VERSION, session=b"s" * 32).SerializeToString()
        return _sealed(head + b"\x1a" + bytes([len(entry_bytes)]) + entry_bytes)  # field 3, length-delimited

    assert wire.decode_roster(roster(entry.SerializeToString())).keys == ((1, b"a" * 32, b"b" * 32),)
    with pytest.raises(wire.WireError, match=r"key roster: fields \[5\] are not in wire version 2"):
        wire.decode_roster(roster(entry.SerializeToString() + b"\x28\x01"))  # field 5, varint 1


def test_a_known_field_sent_with_another_wire_type_is_named_as_such_not_as_unknown():
    """protobuf sets a known field that came with another wire type aside with the unknown ones: it is in this
    version, so "not in wire version 2" would send a reader looking for a version mismatch."""
    body = wire.pb.AdvertiseKeys(version=wire.VERSION, client_id=7, cipher_public_key=b"c" * 32,
                                 mask_public_key=b"k" * 32).SerializeToString()
    with pytest.raises(wire.WireError, match=r"advertise-keys message: fields 2 \(session\) came with a wire type "
                       r"other than their own"):
        wire.decode_advertise(_sealed(body + b"\x10\x05"))  # field 2 (bytes) as a varint
    with pytest.raises(wire.WireError, match=r"fields 1 \(version\) came with a wire type"):
        wire.decode_advertise(_sealed(b"\x0a\x01\x02" + body[2:]))  # the version as bytes, not a varint
    entry = wire.pb.KeyRoster.Entry(client_id=1, cipher_public_key=b"a" * 32, mask_public_key=b"b" * 32)
    nested = entry.SerializeToString() + b"\x15\x01\x00\x00\x00"  # field 2 (bytes) as fixed32, in an entry
    head = wire.pb.KeyRoster(version=wire.VERSION, session=b"s" * 32).SerializeToString()
    with pytest.raises(wire.WireError, match=r"key roster: fields 2 \(cipher_public_key\) came with a wire type"):
        wire.decode_roster(_sealed(head + b"\x1a" + bytes([len(nested)]) + nested))


@pytest.mark.parametrize("decode,match", [
    (lambda: wire.decode_round_index(wire.encode_round_index(b"a" * 32, np.arange(5), 100), b"a" * 32, 101, 5),
     "5 of 100 positions, expected 5 of 101"),
    (lambda: wire.decode_broadcast(wire.encode_broadcast(1, "none", 100, False, bytes(400)), 101),
     "model length 100, expected 101"),
    (lambda: wire.decode_broadcast(wire.encode_broadcast(1, "", 100, False, bytes(400)), 100), "missing codec name"),
    (lambda: wire.decode_update(wire.encode_update(3, 7, "", 100, 1.0, bytes(400)), 3, 100), "missing codec name"),
    (lambda: wire.decode_update(wire.encode_update(3, 7, "none", 100, 1.0, b""), 3, 100), "empty payload"),
])
def test_a_message_for_another_length_or_without_its_codec_or_payload_is_refused_by_name(decode, match):
    """An index set for another model length would be read against this one; the others would fail later, in the
    codec, under another name (or, for an update decoded without the round's codec, not at all)."""
    with pytest.raises(wire.WireError, match=match):
        decode()


def test_an_altered_payload_byte_is_caught_by_the_checksum():
    message, _ = _update_message()
    altered = bytearray(message)
    altered[len(message) // 2] ^= 0x01
    with pytest.raises(wire.WireError, match="checksum"):
        wire.decode_update(bytes(altered), 3, 1000)


def test_bytes_appended_to_a_message_are_named_as_such_not_as_a_truncation():
    """A message with bytes after its checksum has no checksum field at its end; the error says it may have been
    extended, not only that it was cut short."""
    message, _ = _update_message()
    for extra in (b"\x00", b"\x01\x02"):
        with pytest.raises(wire.WireError, match="no checksum field at the end .*bytes appended"):
            wire.decode_update(message + extra, 3, 1000)
    with pytest.raises(wire.WireError, match="no checksum field at the end .*truncated"):
        wire.decode_update(message[:-1], 3, 1000)


def test_the_index_set_block_in_a_broadcast_is_whichever_position_encoding_is_smallest():
    """index_set_fields sends compression.positions' position block: the smallest of its four encodings (here
    Golomb-Rice, tighter than the bitmap and the varint gaps for evenly spread positions)."""
    from compression.positions import ENCODING_NAMES, position_sizes

    n = 100000
    positions = np.sort(np.random.default_rng(3).choice(n, 5000, replace=False))
    block = wire.index_set_fields(positions, 0, n)["index_positions"]
    sizes = position_sizes(positions, n)
    assert ENCODING_NAMES[block[0]] == "rice" and len(block) == 1 + min(sizes.values()) < sizes["varint"]


def test_the_checksum_is_crc32c():
    assert wire.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, B.4)
    message, _ = _update_message()
    assert int.from_bytes(message[-4:], "little") == wire.crc32c(message[:-5])


def test_wrong_version_round_and_length_are_named():
    from fl import wire_pb2 as pb

    message, payload = _update_message()
    msg = pb.ClientUpdate()
    msg.ParseFromString(message)
    msg.version = 9
    msg.ClearField("checksum")
    msg.checksum = wire.crc32c(msg.SerializeToString())
    with pytest.raises(wire.WireError, match="version 9"):
        wire.decode_update(msg.SerializeToString(), 3, 1000)
    with pytest.raises(wire.WireError, match="round 3, expected 4"):
        wire.decode_update(message, 4, 1000)
    with pytest.raises(wire.WireError, match="length 1000, expected 999"):
        wire.decode_update(message, 3, 999)


def test_masked_vector_of_the_wrong_length_is_refused():
    message = wire.encode_masked(secagg.MaskedInput(b"s" * 32, 4, np.arange(50, dtype=np.uint32)))
    with pytest.raises(wire.WireError, match="length 50, expected 51"):
        wire.decode_masked(message, 51)


@pytest.mark.parametrize("bits", [2, 7, 8, 12, 20, 31, 32])
def test_a_masked_vector_travels_at_b_bits_per_element_and_decodes_to_its_residues_mod_2_to_the_b(bits):
    """len() of a MaskedInput is its frame plus exactly ceil(length * b / 8) bytes of elements; the decoded
    vector is the sent one mod 2^b; another width, set padding bits or a cut vector are refused by name."""
    length = 1001
    vec = np.random.default_rng(bits).integers(0, 2**32, length, dtype=np.uint64).astype(np.uint32)
    message = wire.encode_masked(secagg.MaskedInput(b"s" * 32, 4, vec), bits)
    parsed = wire.pb.MaskedInput()
    parsed.ParseFromString(message)
    assert len(parsed.masked) == -(-length * bits // 8) and parsed.bits == bits
    assert len(message) <= wire._FRAME_BYTES + len(parsed.masked)
    assert wire.masked_bytes(length, bits) == -(-length * bits // 8)
    low = vec & np.uint32((1 << bits) - 1) if bits < 32 else vec
    np.testing.assert_array_equal(wire.decode_masked(message, length, bits).masked, low)
    for other in (bits - 1, bits + 1) if bits < 32 else (31,):  # a narrower width's limit refuses it first
        with pytest.raises(wire.WireError, match=f"field of {bits} bits, expected {other}|over the .*-byte limit"):
            wire.decode_masked(message, length, other)
    if (length * bits) % 8:  # set a padding bit of the last byte and reseal
        msg = wire.pb.MaskedInput()
        msg.ParseFromString(message[:-5])
        msg.masked = msg.masked[:-1] + bytes([msg.masked[-1] | 0x80])
        with pytest.raises(wire.WireError, match="padding bits"):
            wire.decode_masked(wire._seal(msg), length, bits)
    msg = wire.pb.MaskedInput()
    msg.ParseFromString(message[:-5])
    msg.masked = msg.masked[:-1]
    with pytest.raises(wire.WireError, match=f"expected {wire.masked_bytes(length, bits)}"):
        wire.decode_masked(wire._seal(msg), length, bits)


def test_a_round_index_set_is_refused_for_another_exchange_or_count():
    positions = np.sort(np.random.default_rng(0).choice(5000, 50, replace=False))
    message = wire.encode_round_index(b"a" * 32, positions, 5000)
    np.testing.assert_array_equal(wire.decode_round_index(message, b"a" * 32, 5000, 50), positions)
    with pytest.raises(wire.WireError, match="session does not match"):
        wire.decode_round_index(message, b"b" * 32, 5000, 50)
    with pytest.raises(wire.WireError, match="50 of 5000 positions, expected 49 of 5000"):
        wire.decode_round_index(message, b"a" * 32, 5000, 49)
    with pytest.raises(wire.WireError, match="checksum"):
        wire.decode_round_index(message[:-1], b"a" * 32, 5000, 50)


def test_index_set_travels_as_seed_or_as_the_smaller_position_block():
    n = 10000
    dense = np.sort(np.random.default_rng(1).choice(n, 5000, replace=False))
    sparse = np.sort(np.random.default_rng(2).choice(n, 50, replace=False))
    for positions in (dense, sparse):
        fields = wire.index_set_fields(positions, 0, n)
        message = wire.encode_broadcast(1, "none", n, False,
                                        compression.NoCompression().encode(np.zeros(n, np.float32)),
                                        **fields)
        np.testing.assert_array_equal(wire.decode_index_set(wire.decode_broadcast(message, n)), positions)
    assert len(wire.index_set_fields(dense, 0, n)["index_positions"]) == 1 + n // 8  # bitmap
    assert len(wire.index_set_fields(sparse, 0, n)["index_positions"]) < 2 * 50 + 1  # varint gaps
    assert "index_positions" not in wire.index_set_fields(dense, 12345, n)  # derived from the public seed


# --- secure aggregation messages -------------------------------------------------------------------

def _secagg_round_through_the_wire(protocol, n, length, drop_masked=()):
    """A whole round where every message is encoded, counted and decoded at each hop."""
    ids = list(range(n))
    config = secagg.make_round(protocol, secagg.session_id("run", 0, ids), ids, length)
    server = secagg.Server(config)
    clients = {cid: secagg.Client(config, cid) for cid in ids}
    up = dict.fromkeys(ids, 0)
    down = dict.fromkeys(ids, 0)
    for cid, c in clients.items():
        data = wire.encode_advertise(c.advertise())
        up[cid] += len(data)
        server.receive_keys(wire.decode_advertise(data))
    roster = wire.encode_roster(server.roster())
    for cid, c in clients.items():
        down[cid] += len(roster)
        data = wire.encode_share_keys(c.share_keys(wire.decode_roster(roster)))
        up[cid] += len(data)
        server.receive_shares(wire.decode_share_keys(data))
    inputs = {cid: np.random.default_rng(cid).integers(0, 2**32, length, dtype=np.uint32) for cid in ids}
    for cid, bundle in server.bundles().items():
        data = wire.encode_share_bundle(bundle)
        down[cid] += len(data)
        masked = wire.encode_masked(clients[cid].masked_input(wire.decode_share_bundle(data), inputs[cid]))
        if cid not in drop_masked:
            up[cid] += len(masked)
            server.add(wire.decode_masked(masked, length))
    request = wire.encode_unmask_request(server.unmask_request())
    for cid in server.survivors:
        down[cid] += len(request)
        data = wire.encode_unmask_response(clients[cid].unmask(wire.decode_unmask_request(request)))
        up[cid] += len(data)
        server.receive_unmask(wire.decode_unmask_response(data))
    total = server.result()
    expected = np.zeros(length, np.uint32)
    for cid in server.survivors:
        expected += inputs[cid]
    np.testing.assert_array_equal(total, expected)
    return up, down


@pytest.mark.parametrize("protocol", ["dh", "secaggplus"])
def test_a_secagg_round_through_the_wire_is_exact_under_dropouts(protocol):
    _secagg_round_through_the_wire(protocol, 12, 100, drop_masked=(3,))


def test_secagg_protocol_bytes_per_client_follow_the_documented_formula():
    n, length = 30, 10
    up, down = _secagg_round_through_the_wire("dh", n, length)
    masked = 4 * length + 45
    protocol_up = up[0] - masked
    assert abs(protocol_up - (112 + 114 * (n - 1) + 46 * n + 40)) <= 0.02 * protocol_up
    assert abs(down[0] - (74 * n + 114 * (n - 1) + 2 * n)) <= 0.03 * down[0]


@pytest.mark.parametrize("encode,decode,match", [
    (lambda: wire.encode_advertise(secagg.AdvertiseKeys(b"s" * 31, 4, b"c" * 32, b"k" * 32)), wire.decode_advertise,
     "session id of 31 bytes"),
    (lambda: wire.encode_advertise(secagg.AdvertiseKeys(b"s" * 32, 4, b"c" * 32, b"k" * 31)), wire.decode_advertise,
     "mask public key of 31 bytes"),
    (lambda: wire.encode_advertise(secagg.AdvertiseKeys(b"s" * 32, 2**31, b"c" * 32, b"k" * 32)),
     wire.decode_advertise, "out of range"),
    (lambda: wire.encode_roster(secagg.KeyRoster(b"s" * 32, ((2, b"a" * 32, b"b" * 32), (1, b"c" * 32, b"d" * 32)))),
     wire.decode_roster, "not strictly increasing"),
    (lambda: wire.encode_roster(secagg.KeyRoster(b"s" * 32, ((1, b"a" * 32, b"b" * 33),))), wire.decode_roster,
     "33 bytes"),
    (lambda: wire.encode_roster(secagg.KeyRoster(b"s" * 32, ())), wire.decode_roster, "no public keys"),
    (lambda: wire.encode_share_keys(secagg.ShareKeys(b"s" * 32, 4, ((1, b"x" * (CT - 1)),))), wire.decode_share_keys,
     "ciphertexts of 111 bytes"),
    (lambda: wire.encode_share_keys(secagg.ShareKeys(b"s" * 32, 4, ((1, b"x" * CT), (1, b"y" * CT)))),
     wire.decode_share_keys, "not strictly increasing"),
    (lambda: wire.encode_share_bundle(secagg.ShareBundle(b"s" * 32, 4, ((1, b"x" * (CT + 1)),))),
     wire.decode_share_bundle, "ciphertexts of 113 bytes"),
    (lambda: wire.encode_unmask_request(secagg.UnmaskRequest(b"s" * 32, (), (1,))), wire.decode_unmask_request,
     "no survivors"),
    (lambda: wire.encode_unmask_request(secagg.UnmaskRequest(b"s" * 32, (3, 1), ())), wire.decode_unmask_request,
     "not strictly increasing"),
    (lambda: wire.encode_unmask_response(secagg.UnmaskResponse(b"s" * 32, 4, ((1, b"x" * (SH - 1)),), ())),
     wire.decode_unmask_response, "self-mask shares of 43 bytes"),
    (lambda: wire.encode_unmask_response(secagg.UnmaskResponse(b"s" * 32, 4, ((1, b"x" * SH),), ((2, b"x" * 40),))),
     wire.decode_unmask_response, "key shares of 40 bytes"),
    (lambda: wire.encode_masked(secagg.MaskedInput(b"s" * 30, 4, np.arange(5, dtype=np.uint32))),
     lambda m: wire.decode_masked(m, 5), "session id of 30 bytes"),
])
def test_secagg_messages_with_the_wrong_sizes_or_ids_are_refused(encode, decode, match):
    with pytest.raises(wire.WireError, match=match):
        decode(encode())


def test_secagg_messages_roundtrip_to_equal_dataclasses():
    msgs = [
        (secagg.AdvertiseKeys(b"s" * 32, 4, b"c" * 32, b"k" * 32), wire.encode_advertise, wire.decode_advertise),
        (secagg.KeyRoster(b"s" * 32, ((1, b"a" * 32, b"b" * 32),)), wire.encode_roster, wire.decode_roster),
        (secagg.ShareKeys(b"s" * 32, 4, ((1, b"x" * CT),)), wire.encode_share_keys, wire.decode_share_keys),
        (secagg.ShareBundle(b"s" * 32, 4, ()), wire.encode_share_bundle, wire.decode_share_bundle),
        (secagg.UnmaskRequest(b"s" * 32, (4,), ()), wire.encode_unmask_request, wire.decode_unmask_request),
        (secagg.UnmaskResponse(b"s" * 32, 4, ((4, b"x" * SH),), ()), wire.encode_unmask_response,
         wire.decode_unmask_response),
    ]
    for msg, encode, decode in msgs:
        assert decode(encode(msg)) == msg


def test_a_message_over_its_types_size_limit_is_refused_before_its_checksum_is_computed(monkeypatch):
    import secagg as sa

    calls = []
    monkeypatch.setattr(wire, "crc32c", lambda data: calls.append(len(data)) or 0)
    too_long = b"\0" * 10_000
    for decode, args in ((wire.decode_advertise, ()), (wire.decode_masked, (100,)),
                         (wire.decode_share_keys, (5,)), (wire.decode_unmask_response, (5,)),
                         (wire.decode_update, (0, 100, 500))):
        with pytest.raises(wire.WireError, match="over the .*-byte limit"):
            decode(too_long, *args)
    assert calls == []  # refused on its length alone
    limit = wire._FRAME_BYTES + 5 * (sa.CIPHERTEXT_BYTES + 12)
    with pytest.raises(wire.WireError, match="checksum"):  # just under the limit: on to the checksum
        wire.decode_share_keys(b"\0" * (limit - 1) + b"", 5)


def test_a_client_id_one_past_the_largest_shamir_can_hold_is_refused():
    """Ids are Shamir x-coordinates id + 1 < p: MAX_CLIENT_ID + 1 would put a share at x = p = 0 (the secret)."""
    def advertise(cid):
        return wire.encode_advertise(secagg.AdvertiseKeys(b"s" * 32, cid, b"c" * 32, b"k" * 32))

    assert wire.decode_advertise(advertise(secagg.MAX_CLIENT_ID)).client_id == secagg.MAX_CLIENT_ID
    with pytest.raises(wire.WireError, match="out of range"):
        wire.decode_advertise(advertise(secagg.MAX_CLIENT_ID + 1))


def _broadcast(n, **fields):
    return wire.decode_broadcast(wire.encode_broadcast(
        1, "none", n, False, compression.NoCompression().encode(np.zeros(n, np.float32)), **fields), n)


@pytest.mark.parametrize("fields,match", [
    (dict(index_seed=7), "index set fields without a count"),
    (dict(index_positions=b"\x00\x01"), "index set fields without a count"),
    (dict(index_count=5), "neither positions nor a seed"),
    (dict(index_count=101, index_seed=7), "index set of 101 > model length 100"),
    (dict(index_count=2, index_seed=7, index_positions=b"\x01\x00\x01"), "both positions and a seed"),
])
def test_a_broadcast_index_set_whose_fields_disagree_is_refused(fields, match):
    """A cut or altered broadcast must not turn into no shared set, all 100 positions, or a numpy error."""
    with pytest.raises(wire.WireError, match=match):
        wire.decode_index_set(_broadcast(100, **fields))


def test_the_full_index_set_travels_as_its_count_alone():
    """Dense masking (k = length) broadcasts no positions: a bitmap there would be counted in every bytes_down."""
    n = 1000
    fields = wire.index_set_fields(np.arange(n, dtype=np.int64), 0, n)
    assert fields == {"index_seed": 0, "index_count": n}
    np.testing.assert_array_equal(wire.decode_index_set(_broadcast(n, **fields)), np.arange(n))


def test_an_unmask_response_without_self_mask_shares_is_refused():
    message = wire.encode_unmask_response(secagg.UnmaskResponse(b"s" * 32, 4, (), ((2, b"\x03" * SH),)))
    with pytest.raises(wire.WireError, match="no self-mask shares"):
        wire.decode_unmask_response(message)


def test_a_broadcast_without_a_payload_is_refused():
    message = wire.encode_broadcast(1, "none", 100, False, b"")
    with pytest.raises(wire.WireError, match="empty payload"):
        wire.decode_broadcast(message, 100)


def test_a_broadcast_naming_a_codec_nobody_registered_is_a_wire_error():
    """The client decodes the payload with the codec the broadcast names: an unknown name is a malformed
    broadcast (WireError naming it), not the registry's lookup error."""
    payload = compression.NoCompression().encode(np.zeros(10, np.float32))
    with pytest.raises(wire.WireError, match="model broadcast: unknown codec 'nope'"):
        wire.decode_broadcast(wire.encode_broadcast(1, "nope", 10, False, payload), 10)
    assert wire.decode_broadcast(wire.encode_broadcast(1, "none", 10, False, payload), 10).codec == "none"
