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


def test_generated_protobuf_code_is_in_sync_with_the_proto(tmp_path):
    (tmp_path / "fl").mkdir()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={tmp_path}",
                    str(ROOT / "fl" / "wire.proto")], check=True)
    assert filecmp.cmp(tmp_path / "fl" / "wire_pb2.py", ROOT / "fl" / "wire_pb2.py", shallow=False), \
        "fl/wire_pb2.py is stale: regenerate it (command in fl/wire.proto)"


def test_no_wire_or_codec_module_uses_pickle():
    for folder in ("fl", "compression", "secagg"):
        for path in (ROOT / folder).glob("*.py"):
            text = path.read_text()
            assert "import pickle" not in text and "pickle.load" not in text and "cloudpickle" not in text, path


def _update_message(length=1000, ratio=0.1):
    vec = np.random.default_rng(0).normal(size=length).astype(np.float32)
    payload = compression.TopKCompression(ratio).encode(vec)
    return wire.encode_update(3, 7, "topk", length, 144.0, payload), payload


def test_client_update_roundtrip_and_byte_count_is_the_serialized_length():
    message, payload = _update_message()
    msg = wire.decode_update(message, 3, 1000)
    assert (msg.client_id, msg.codec, msg.weight, msg.payload) == (7, "topk", 144.0, payload)
    assert len(message) > len(payload)  # the header and checksum are counted too


@pytest.mark.parametrize("encode,decode", [
    (lambda: _update_message()[0], lambda m: wire.decode_update(m, 3, 1000)),
    (lambda: wire.encode_masked(secagg.MaskedInput(b"s" * 32, 4, np.arange(50, dtype=np.uint32))),
     lambda m: wire.decode_masked(m, 50)),
    (lambda: wire.encode_broadcast(0, "none", 100, False, compression.NoCompression().encode(np.ones(100, np.float32))),
     lambda m: wire.decode_broadcast(m, 100)),
    (lambda: wire.encode_advertise(secagg.AdvertiseKeys(b"s" * 32, 4, b"k" * 32)), wire.decode_advertise),
    (lambda: wire.encode_roster(secagg.KeyRoster(b"s" * 32, ((1, b"a" * 32), (2, b"b" * 32)))), wire.decode_roster),
])
def test_every_truncation_of_a_message_raises_a_wire_error(encode, decode):
    message = encode()
    decode(message)  # the whole message decodes
    for cut in range(len(message)):
        with pytest.raises(wire.WireError):
            decode(message[:cut])


def test_an_altered_payload_byte_is_caught_by_the_checksum():
    message, _ = _update_message()
    altered = bytearray(message)
    altered[len(message) // 2] ^= 0x01
    with pytest.raises(wire.WireError, match="checksum"):
        wire.decode_update(bytes(altered), 3, 1000)


def test_wrong_version_round_and_length_are_named():
    from fl import wire_pb2 as pb

    message, payload = _update_message()
    msg = pb.ClientUpdate()
    msg.ParseFromString(message)
    msg.version = 9
    msg.ClearField("checksum")
    msg.checksum = __import__("zlib").crc32(msg.SerializeToString())
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


def test_index_set_travels_as_seed_or_as_the_smaller_position_block():
    n = 10000
    dense = np.sort(np.random.default_rng(1).choice(n, 5000, replace=False))
    sparse = np.sort(np.random.default_rng(2).choice(n, 50, replace=False))
    for positions in (dense, sparse):
        fields = wire.index_set_fields(positions, 0, n)
        message = wire.encode_broadcast(1, "none", n, False, compression.NoCompression().encode(np.zeros(n, np.float32)),
                                        **fields)
        np.testing.assert_array_equal(wire.decode_index_set(wire.decode_broadcast(message, n)), positions)
    assert len(wire.index_set_fields(dense, 0, n)["index_positions"]) == 1 + n // 8  # bitmap
    assert len(wire.index_set_fields(sparse, 0, n)["index_positions"]) < 2 * 50 + 1  # varint gaps
    assert "index_positions" not in wire.index_set_fields(dense, 12345, n)  # derived from the public seed
