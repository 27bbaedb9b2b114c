"""The run's plan: each decision made once, from the validated config."""
import numpy as np
import pytest

import fl
from fl.config import validate
from fl.plan import Plan

LAYERS = [4096, 64, 640, 10]  # mlp_small on digits


def _plan(*overrides):
    return Plan.build(validate(fl.compose(["model=mlp_small", *overrides])), LAYERS)


def test_masked_top_k_plans_a_shared_index_set_of_ceil_ratio_n():
    plan = _plan("secagg=dh", "compression.ratio=0.01")
    assert plan.masked and plan.linear is None and plan.k == 49 and plan.length == 4810
    assert plan.error_feedback and plan.index_policy_name == "fresh(marginals)"
    assert plan.index_policy() is not plan.index_policy()  # the server's and each worker's are their own


def test_per_client_top_k_without_masking_has_no_index_policy():
    plan = _plan("secagg=none", "compression.ratio=0.1")
    assert not plan.masked and plan.index_policy() is None and plan.index_policy_name == "per-client"
    assert plan.client_codec.name == plan.broadcast_codec.name == "topk"


@pytest.mark.parametrize("overrides,feedback", [
    (("secagg=none", "compression=qsgd"), False),                      # unbiased: no residual to keep
    (("secagg=dh", "compression=countsketch", "compression.ratio=0.1"), False),  # the server keeps it
    (("secagg=none", "compression=countsketch", "compression.ratio=0.1"), True),
    (("secagg=none", "compression.error_feedback=false"), False),
])
def test_error_feedback_is_planned_only_where_it_acts(overrides, feedback):
    assert _plan(*overrides).error_feedback is feedback


def test_a_linear_codec_under_masking_masks_its_table_and_no_values():
    plan = _plan("secagg=dh", "compression=countsketch", "compression.ratio=0.1")
    assert plan.linear is not None and plan.k == 0 and plan.index_policy() is None
    assert plan.index_policy_name == "sketch-codec (server top-k)"


def test_the_field_is_sized_for_the_cohort_and_refuses_a_larger_one():
    plan = _plan("secagg=dh", "fl.num_clients=10", "fl.clients_per_round=4")
    # 4 clients of 16-bit values: |sum| <= 4 * (2^15 - 1) < 2^17, so an 18-bit field cannot wrap
    assert plan.max_clients == 4 and (plan.quant_bits, plan.field_bits) == (16, 18)
    assert _plan("secagg=dh", "fl.clients_per_round=10", "secagg.quant_bits=8").field_bits == 12
    assert _plan("secagg=dh", "fl.clients_per_round=4", "secagg.bits=32").field_bits == 32
    plan.round_config(bytes(32), range(4), 10)
    with pytest.raises(ValueError, match="exceeds the 4"):
        plan.round_config(bytes(32), range(5), 10)


def test_masking_without_compression_masks_every_position():
    plan = _plan("secagg=dh", "compression=none")
    assert plan.k == plan.length == 4810 and plan.index_policy_name == "all"
    positions, seed = plan.index_policy().positions(0)
    np.testing.assert_array_equal(positions, np.arange(4810))


def test_per_layer_compresses_the_broadcast_per_layer_too():
    plan = _plan("secagg=none", "compression.ratio=0.1", "compression.per_layer=true")
    assert plan.client_codec.layout == plan.broadcast_codec.layout == tuple(LAYERS)


def test_the_public_index_sets_come_from_the_runs_seed():
    """Runs of other seeds draw other public random sets (randk), not one set shared by every seed."""
    sets = [_plan("secagg=dh", "compression.ratio=0.1", "compression.index_policy=randk", f"seed={seed}")
            .index_policy().positions(0)[0] for seed in (1, 2)]
    assert not np.array_equal(*sets)


def test_local_training_gets_the_configured_momentum_and_weight_decay():
    training = _plan("secagg=none", "fl.momentum=0.9", "fl.weight_decay=0.001", "fl.lr=0.05",
                     "fl.local_epochs=3", "fl.batch_size=16", "seed=4").training
    assert (training.momentum, training.weight_decay, training.lr) == (0.9, 0.001, 0.05)
    assert (training.local_epochs, training.batch_size, training.seed) == (3, 16, 4)


@pytest.mark.parametrize("codec", ["rotation", "countsketch", "randk", "qsgd"])
def test_a_randomized_codec_draws_from_the_runs_seed_unless_its_options_name_one(codec):
    def encoded(*overrides):
        plan = _plan("secagg=none", f"compression={codec}", "compression.ratio=0.1", *overrides)
        if plan.broadcast_codec.name == codec:  # the qsgd preset leaves the broadcast dense
            assert plan.broadcast_codec.seed == plan.client_codec.seed
        vector = np.random.default_rng(0).standard_normal(sum(LAYERS)).astype(np.float32)
        return plan.client_codec.seed, plan.client_codec.encode(vector)

    assert encoded("seed=3")[0] == 3 and encoded("seed=4")[0] == 4
    assert encoded("seed=3")[1] != encoded("seed=4")[1]  # seeds of a sweep vary the codec's randomness too
    assert encoded("seed=3", "+compression.options.seed=7") == encoded("seed=4", "+compression.options.seed=7")


def test_a_masked_linear_codec_shares_the_runs_seed_with_the_broadcast():
    plan = _plan("secagg=dh", "compression=rotation", "seed=5")
    assert plan.linear.seed == plan.client_codec.seed == plan.broadcast_codec.seed == 5


def test_memory_aggregation_keeps_memories_and_no_error_feedback_residuals():
    plan = _plan("secagg=none", "fl.aggregation=memory")
    assert plan.memory and not plan.error_feedback
    assert _plan("secagg=none").error_feedback  # the same codec without memory keeps residuals


def test_an_unmasked_plan_has_no_fixed_point_quantizer_and_a_32_bit_field():
    plan = _plan("secagg=none", "secagg.quant_bits=8")
    assert (plan.quant_bits, plan.field_bits) == (None, 32)


def test_the_field_of_another_width_is_the_narrowest_that_cannot_wrap_and_a_set_field_is_kept():
    # a set secagg.bits is the field of secagg.quant_bits' values, although 18 bits would do for 4 of them
    plan = _plan("secagg=dh", "fl.clients_per_round=4", "secagg.bits=32")
    assert plan.field_for(16) == 32
    # 4 clients of 8-bit values: |sum| <= 4 * (2^7 - 1) < 2^9, so a 10-bit field cannot wrap
    assert plan.field_for(8) == 10


def test_a_low_bit_linear_codec_masks_in_its_own_field():
    # 10 clients of rotation's 8-bit codes: |sum| <= 10 * 127 < 2^11 (a 12-bit field); secagg's 16-bit values
    # would need 20 bits
    plan = _plan("secagg=dh", "compression=rotation", "fl.clients_per_round=10")
    assert (plan.linear_bits, plan.masked_field_bits, plan.field_bits) == (8, 12, 20)


def test_neither_compression_nor_masking_is_called_dense():
    assert _plan("secagg=none", "compression=none").index_policy_name == "dense"


def test_the_index_policy_summarizes_the_models_matrices_by_their_shapes():
    """fresh(marginals) sums each weight matrix's rows and columns: the plan hands the policy the tensors' shapes."""
    from compression.index_policy import Marginals

    shapes = [(64, 64), (64,), (10, 64), (10,)]
    plan = Plan.build(validate(fl.compose(["model=mlp_small", "secagg=dh", "compression.ratio=0.1"])), LAYERS,
                      shapes)
    assert plan.index_policy().summary.cols == Marginals(shapes).cols != Marginals([(sum(LAYERS),)]).cols
