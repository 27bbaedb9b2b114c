"""ErrorFeedback: nothing a codec drops is lost, only delayed; MemoryFeedback: the memory is what the server holds."""

import numpy as np
import pytest

import compression
from compression import ErrorFeedback, MemoryFeedback, NoCompression, TopKCompression


def test_sent_plus_final_residual_equals_sum_of_updates():
    rng = np.random.default_rng(0)
    n, codec = 1000, TopKCompression(0.05)
    feedback = ErrorFeedback(codec)
    residual, sent, total = None, np.zeros(n, np.float64), np.zeros(n, np.float64)
    for _ in range(50):
        update = rng.standard_normal(n).astype(np.float32)
        payload, residual = feedback.encode(update, residual)
        sent += codec.decode(payload, n)
        total += update
    np.testing.assert_allclose(sent + residual, total, atol=1e-4)
    assert residual.dtype == np.float32


def test_residual_is_zero_exactly_at_the_sent_positions():
    rng = np.random.default_rng(1)
    codec = TopKCompression(0.1)
    feedback = ErrorFeedback(codec)
    residual = rng.standard_normal(500).astype(np.float32)
    update = rng.standard_normal(500).astype(np.float32)
    payload, new_residual = feedback.encode(update, residual)
    positions, _ = codec.decode_sparse(payload, 500)
    assert not new_residual[positions].any()
    others = np.setdiff1d(np.arange(500), positions)
    np.testing.assert_array_equal(new_residual[others], (update + residual)[others])


def test_every_coordinate_is_eventually_sent_with_feedback_but_not_without():
    update = np.linspace(1.0, 2.0, 100, dtype=np.float32)  # the same update every round
    codec = TopKCompression(0.1)
    feedback = ErrorFeedback(codec)
    residual, with_feedback, without = None, np.zeros(100, bool), np.zeros(100, bool)
    for _ in range(30):
        payload, residual = feedback.encode(update, residual)
        with_feedback[codec.decode_sparse(payload, 100)[0]] = True
        without[codec.decode_sparse(codec.encode(update), 100)[0]] = True
    assert with_feedback.all()
    assert without.sum() == 10


def test_no_residual_means_zeros_and_a_lossless_codec_leaves_none():
    update = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    feedback = ErrorFeedback(TopKCompression(0.25))
    assert feedback.encode(update, None)[0] == feedback.encode(update, np.zeros(64, np.float32))[0]
    _, residual = ErrorFeedback(NoCompression()).encode(update, None)
    assert not residual.any()


def test_residual_of_another_shape_is_rejected():
    with pytest.raises(ValueError, match="shape"):
        ErrorFeedback(TopKCompression()).encode(np.ones(10), np.zeros(11))


@pytest.mark.parametrize("name", [name for name in compression.names() if compression.get(name)().biased])
def test_nothing_is_lost_over_rounds_for_every_biased_codec(name):
    rng = np.random.default_rng(3)
    n, codec = 2000, compression.get(name)(0.05)
    feedback = ErrorFeedback(codec)
    residual, sent, total = None, np.zeros(n), np.zeros(n)
    for _ in range(20):
        update = rng.standard_normal(n).astype(np.float32)
        payload, residual = feedback.encode(update, residual)
        sent += codec.decode(payload, n)
        total += update
    np.testing.assert_allclose(sent + residual, total, atol=1e-3)


@pytest.mark.parametrize("name", ["topk", "ternary", "randk", "int8"])
def test_feedback_shrinks_the_accumulated_error_of_a_constant_update(name):
    update = np.random.default_rng(4).standard_normal(1000).astype(np.float32)
    codec = compression.get(name)(0.1)
    feedback = ErrorFeedback(codec)
    residual, sent = None, np.zeros(1000)
    for _ in range(100):
        payload, residual = feedback.encode(update, residual)
        sent += codec.decode(payload, 1000)
    without = 100 * codec.decode(codec.encode(update), 1000)
    assert np.linalg.norm(sent - 100 * update) < 0.5 * np.linalg.norm(without - 100 * update)


def test_a_residual_that_overflows_float32_is_refused_not_returned_as_inf():
    """A count sketch's estimate can have the other sign than the entry (another entry's mass in its bucket): near
    float32's limit input - decoded overflows. Returned, the Inf residual would refuse every later update of the
    client; refused, the caller drops this round's message (a ValueError, as for a non-finite update)."""
    update = np.array([-2.55, 2.04, 1.76, -1.6, 2.31, -2.7, -1.0, -2.14], np.float32) * np.float32(1e38)
    codec = compression.get("countsketch")(1.0, rows=1, cols_per_k=1.0)
    decoded = codec.decode(codec.encode(update), 8)
    with np.errstate(over="ignore"):
        assert not np.isfinite(update - decoded).all()  # this input does overflow the residual
    with np.errstate(over="raise"):  # and no numpy overflow warning escapes either
        with pytest.raises(ValueError, match="residual .* overflows float32"):
            ErrorFeedback(codec).encode(update, None)


@pytest.mark.parametrize("name", compression.names())
def test_every_codec_leaves_exactly_its_input_less_what_it_decodes_in_the_residual(name):
    """The residual is what the server did not receive, for any codec ErrorFeedback wraps (unbiased ones too)."""
    rng = np.random.default_rng(5)
    codec = compression.get(name)(0.1)
    update, residual = rng.standard_normal((2, 600)).astype(np.float32)
    payload, new_residual = ErrorFeedback(codec).encode(update, residual)
    corrected = update + residual
    assert payload == codec.encode(corrected)
    assert new_residual.dtype == np.float32
    np.testing.assert_array_equal(new_residual, corrected - codec.decode(payload, 600))


@pytest.mark.parametrize("name", compression.names())
def test_every_codec_leaves_exactly_the_memory_plus_what_it_decodes_in_the_memory(name):
    """MemoryFeedback sends the update less the memory; the new memory is what the server's sum now holds."""
    rng = np.random.default_rng(6)
    codec, feedback = compression.get(name)(0.1), MemoryFeedback(compression.get(name)(0.1))
    update, memory = rng.standard_normal((2, 600)).astype(np.float32)
    payload, first = feedback.encode(update, None)  # no memory yet: the update itself is encoded
    assert payload == codec.encode(update)
    np.testing.assert_array_equal(first, codec.decode(payload, 600))
    payload, new_memory = feedback.encode(update, memory)
    assert payload == codec.encode(update - memory)
    assert new_memory.dtype == np.float32
    np.testing.assert_array_equal(new_memory, memory + codec.decode(payload, 600))


@pytest.mark.parametrize("feedback,held", [(ErrorFeedback, "residual"), (MemoryFeedback, "memory")])
@pytest.mark.parametrize("length", [1, 9, 11])
def test_a_residual_or_memory_of_another_length_is_refused_even_one_numpy_would_broadcast(feedback, held, length):
    """A client's vector of length 1 would be broadcast over the update and sent as if it were the client's."""
    with pytest.raises(ValueError, match=f"{held} has shape \\({length},\\), update has \\(10,\\)"):
        feedback(TopKCompression(0.5)).encode(np.ones(10, np.float32), np.zeros(length, np.float32))


@pytest.mark.parametrize("feedback", [ErrorFeedback, MemoryFeedback])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_a_held_vector_of_another_dtype_counts_as_float32_and_the_new_one_is_float32(feedback, dtype):
    """Workers keep residuals in compression.residual_dtype; a float64 one must not make the result float64."""
    rng = np.random.default_rng(7)
    update, held = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(dtype)
    payload, new = feedback(TopKCompression(0.1)).encode(update, held)
    expected_payload, expected = feedback(TopKCompression(0.1)).encode(update, held.astype(np.float32))
    assert new.dtype == np.float32 and payload == expected_payload
    np.testing.assert_array_equal(new, expected)


def test_a_memory_that_overflows_float32_is_refused_not_returned_as_inf():
    """As for the residual: a count sketch's estimate of (update - memory) can carry another entry's mass, and
    memory + estimate overflow. Refused, the caller drops this round's message and the client keeps its memory."""
    memory = np.array([-1.9, 2.78, 1.81, -0.11, 1.88, 0.62, 0.93, 2.48], np.float32) * np.float32(1e38)
    update = np.array([-2.61, 2.01, -0.71, -1.05, 2.96, 1.69, -0.09, -0.46], np.float32) * np.float32(1e38)
    codec = compression.get("countsketch")(1.0, rows=1, cols_per_k=1.0)
    decoded = codec.decode(codec.encode(update - memory), 8)
    with np.errstate(over="ignore"):
        assert not np.isfinite(memory + decoded).all()  # this input does overflow the memory
    with np.errstate(over="raise"):  # and no numpy overflow warning escapes either
        with pytest.raises(ValueError, match="memory .* overflows float32"):
            MemoryFeedback(codec).encode(update, memory)


@pytest.mark.parametrize("feedback", [ErrorFeedback, MemoryFeedback])
def test_a_held_vector_that_overflows_the_input_is_refused_by_the_codec_without_a_numpy_warning(feedback):
    """update + residual (or update - memory) beyond float32's range is Inf, which the codec refuses with its
    ValueError; the overflow itself must not escape as numpy's warning first (an error where warnings are errors)."""
    update = np.full(8, 3e38, np.float32)
    held = update if feedback is ErrorFeedback else -update
    with np.errstate(over="raise"):
        with pytest.raises(ValueError, match="NaN or Inf"):
            feedback(compression.get("topk")(0.5)).encode(update, held)
