"""The README's "Adding a codec" example works as written: executed, it registers a codec that
round-trips, keeps its size formula, decodes strictly and works under error feedback."""

import pathlib
import re
import types

import numpy as np
import pytest

import compression
from compression import DecodeError, ErrorFeedback, registry

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def example_source() -> str:
    section = README.read_text().split("\n## Adding a codec\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section should hold exactly one python block"
    return blocks[0]


@pytest.fixture
def example(monkeypatch):
    """(name, class) of the README codec, registered in a copy of the registry for this test only."""
    source = example_source()
    name = re.search(r'register\("(\w+)"', source).group(1)
    # without any codec of that name already there (say, the example saved as compression/sign.py)
    monkeypatch.setattr(registry, "_classes", {k: v for k, v in registry._classes.items() if k != name})
    monkeypatch.setattr(registry, "_canonical_of", {k: v for k, v in registry._canonical_of.items() if v != name})
    module = types.ModuleType("readme_codec_example")
    exec(compile(source, f"{README}:Adding a codec", "exec"), module.__dict__)
    return name, compression.get(name)


def test_the_example_is_a_complete_file_under_45_lines():
    source = example_source()
    assert len(source.splitlines()) < 45
    assert source.count("register(") == 1 and "class " in source


def test_it_registers_and_is_built_from_a_ratio(example):
    name, cls = example
    assert name in compression.names() and cls.name == name
    codec = cls(0.1)
    assert codec.biased is True and codec.ratio == 0.1 and "Size" in cls.__doc__


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, 4321])
def test_round_trip_is_sign_times_mean_magnitude_and_size_is_5_plus_ceil_n_over_8(example, n):
    name, cls = example
    vector = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    payload = cls(0.5).encode(vector)
    assert len(payload) == 5 + -(-n // 8) == cls().size(n)
    decoded = compression.get(name)().decode(payload, n)
    scale = np.float32(np.abs(vector.astype(np.float64)).mean())
    assert decoded.dtype == np.float32 and np.array_equal(decoded, np.where(vector < 0, -scale, scale))


def test_decoding_is_strict_and_encoding_refuses_nan(example):
    _, cls = example
    payload = cls().encode(np.arange(-5, 5, dtype=np.float32))  # n = 10: 6 padding bits
    with pytest.raises(DecodeError, match="expected 7"):
        cls().decode(payload[:-1], 10)
    with pytest.raises(DecodeError, match="padding bits"):
        cls().decode(payload[:-1] + bytes([payload[-1] | 0x80]), 10)
    with pytest.raises(DecodeError, match="scale"):
        cls().decode(payload[:1] + np.float32(np.nan).tobytes() + payload[5:], 10)
    with pytest.raises(DecodeError, match="version 2"):
        cls().decode(bytes([2]) + payload[1:], 10)
    with pytest.raises(DecodeError, match="trailing"):
        cls().decode(payload + b"\0", 10)
    with pytest.raises(ValueError, match="NaN or Inf"):
        cls().encode(np.array([1.0, np.inf]))
    zero = cls().encode(np.zeros(1, np.float32))
    assert zero == bytes([1, 0, 0, 0, 0, 0])  # the one encoding of [0.0]
    with pytest.raises(DecodeError, match="sign bit set on a zero scale"):
        cls().decode(zero[:-1] + b"\x01", 1)
    with pytest.raises(DecodeError, match=r"scale -0.0, expected a finite value >= 0 \(not -0.0\)"):
        cls().decode(zero[:1] + np.float32(-0.0).tobytes() + zero[5:], 1)
    # a mean magnitude below float32's smallest subnormal is a zero scale: no sign bit goes out with it
    tiny = cls().encode(np.array([-1e-45, 0, 0, 0], np.float32))
    assert tiny == bytes([1, 0, 0, 0, 0, 0]) and cls().decode(tiny, 4).tolist() == [0.0] * 4


def test_error_feedback_loses_nothing(example):
    _, cls = example
    codec, n = cls(), 500
    feedback = ErrorFeedback(codec)
    rng = np.random.default_rng(0)
    residual, sent, total = None, np.zeros(n), np.zeros(n)
    for _ in range(30):
        update = rng.standard_normal(n).astype(np.float32)
        payload, new_residual = feedback.encode(update, residual)
        decoded = codec.decode(payload, n)
        before = update.astype(np.float64) + (0 if residual is None else residual)
        np.testing.assert_allclose(decoded + new_residual.astype(np.float64), before, rtol=0, atol=1e-5)
        residual = new_residual
        sent += decoded
        total += update
    np.testing.assert_allclose(sent + residual, total, atol=1e-3)
    assert np.linalg.norm(residual) < 3 * np.linalg.norm(update)  # bounded, not growing
