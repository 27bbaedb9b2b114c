"""Each validation bound at its edge: the first value refused, and where it matters the last one accepted."""
import pytest

import fl
from fl.config import ConfigError, validate


@pytest.mark.parametrize("override,match", [
    # a dense codec ignores the ratio, so only validate refuses 0 (topk's own constructor refuses it too)
    ("secagg=none compression=qsgd compression.ratio=0", r"compression.ratio must be in \(0, 1\], got 0"),
    ("dataset.test_fraction=0", r"dataset.test_fraction must be in \(0, 1\), got 0"),
    ("dataset.test_fraction=1", r"dataset.test_fraction must be in \(0, 1\), got 1"),  # nothing left to train on
    ("dataset.partition=labels fl.num_clients=9 fl.clients_per_round=9",
     "dataset.partition=labels needs at least 10 clients .one per class., got fl.num_clients=9"),
    ("dataset.max_train=0", r"dataset.max_train must be >= 1 or null \(all\), got 0"),
    ("dataset.max_test=0", "dataset.max_test must be >= 1 or null"),
    ("fl.batch_size=0", "fl.batch_size must be >= 1, got 0"),
    ("fl.lr=0", "fl.lr must be > 0 and finite, got 0"),
    ("fl.server_momentum=1", r"0 <= fl.server_momentum < 1, got 1.0 and 1.0"),  # a momentum of 1 never decays
    ("compression.sketch_quant_bits=1", r"compression.sketch_quant_bits must be in \[2, 31\] or null, got 1"),
    # named as the bound it breaks, not as the field width it would need
    ("secagg.quant_bits=32", r"secagg.quant_bits must be in \[2, 31\], got 32"),
])
def test_the_first_value_past_each_bound_is_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        validate(fl.compose(override.split()))


@pytest.mark.parametrize("override", [
    "dataset.partition=labels fl.num_clients=10 fl.clients_per_round=10",
    "dataset.max_train=1 dataset.max_test=1",
    "fl.batch_size=1",
    "compression.sketch_quant_bits=2 compression.index_policy=randk",
    "secagg.quant_bits=2",
])
def test_the_value_at_each_bound_is_accepted(override):
    validate(fl.compose(override.split()))


def test_resnet_stages_halve_28_pixel_maps_rounding_up_as_a_stride_two_convolution_does():
    """A 3x3 stride-2 convolution padded by 1 maps n pixels to ceil(n / 2): MNIST's 28 go 14, 7, 4, 2, 1, so the
    sixth stage (not the fifth, as rounding down would say) is the 1x1 one that GroupNorm reduces to its bias."""
    from types import SimpleNamespace

    from fl.config import check_feature_maps

    def model(*channels):
        return SimpleNamespace(name="resnet_small", channels=list(channels), norm="group", padding="same")

    check_feature_maps(model(8, 16, 32, 32, 32), "mnist")  # 2x2 at the fifth stage
    with pytest.raises(ConfigError, match="resnet_small's stage 6 is 1x1 on mnist"):
        check_feature_maps(model(8, 16, 32, 32, 32, 32), "mnist")
