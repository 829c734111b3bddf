"""Features read from shapes alone: FLOPs per category, bytes, op count and the activation peak,
checked on a program whose every number is known by hand, and on torchvision's published counts."""

import pytest
import torch
from torch import nn

from fwbench.families.prediction.features import module_features, torch_features
from fwbench.models import registry

BATCH, SIZE, CH = 3, 16, 8
PIXELS = SIZE * SIZE


def _known_program():
    with torch.device("meta"):
        return nn.Sequential(
            nn.Conv2d(3, CH, 3, padding=1, bias=False),
            nn.ReLU(),
            nn.Conv2d(CH, CH, 3, padding=1, groups=CH, bias=False),
            nn.Flatten(),
            nn.Linear(CH * PIXELS, 10),
        ).eval()


def test_known_program_flops_bytes_and_peak():
    f = module_features(_known_program(), BATCH, SIZE)
    assert f.flops["convolution"] == 2 * BATCH * PIXELS * CH * 3 * 9
    assert f.flops["depthwise/grouped convolution"] == 2 * BATCH * PIXELS * CH * 9
    assert f.flops["matmul/linear"] == 2 * BATCH * CH * PIXELS * 10
    assert f.param_count == CH * 3 * 9 + CH * 9 + CH * PIXELS * 10 + 10
    assert f.param_bytes == 4 * f.param_count
    feature_map = 4 * BATCH * CH * PIXELS
    # the ReLU's output is alive beside its input, then the depthwise output beside the ReLU's;
    # the flatten is a view and allocates nothing
    assert f.peak_activation_bytes == 2 * feature_map
    assert f.bytes_written["convolution"] == feature_map
    assert f.bytes_written["matmul/linear"] == 4 * BATCH * 10
    assert f.model_peak_bytes == f.param_bytes + 2 * feature_map
    assert f.op_count >= 5


def test_peak_grows_with_batch_and_flops_scale_linearly():
    one = module_features(_known_program(), 1, SIZE)
    four = module_features(_known_program(), 4, SIZE)
    assert four.total_flops == 4 * one.total_flops
    assert four.peak_activation_bytes == 4 * one.peak_activation_bytes


@pytest.mark.parametrize("name", ["resnet50", "efficientnet_b0", "vit_b_16", "swin_t"])
def test_torchvision_counts(name):
    """torchvision publishes parameters and GMACs at the native size; the counts must match (the
    multiply-adds of EfficientNet's squeeze-excitation and elementwise ops are outside torch's
    formulas, hence the 2%)."""
    spec = registry.get_spec(name)
    f = torch_features(name, 1)
    assert f.param_count == spec.param_count
    assert f.total_flops == pytest.approx(2e9 * spec.gmacs, rel=0.02)


def test_attention_core_is_attention_and_projections_are_matmuls():
    f = torch_features("vit_b_16", 1)
    # QK^T and AV: 2 products of 197x197x768 per layer, 12 layers, 2 FLOPs each (softmax adds none)
    assert f.flops["attention"] == 12 * 2 * 2 * 197 * 197 * 768
    assert f.flops["matmul/linear"] > 10 * f.flops["attention"]
    assert "depthwise/grouped convolution" not in f.flops


def test_row_has_every_category():
    row = module_features(_known_program(), 1, SIZE).row()
    assert row["flops:attention"] == 0.0
    assert row["bytes:depthwise/grouped convolution"] > 0


def test_a_model_that_cannot_be_built_on_the_meta_device_still_has_features():
    # RegNet's constructor reads block widths out of tensors, which the meta device cannot do
    found = torch_features("regnet_x_400mf", 2)
    # torchvision's metadata: 0.414 GMACs an image at 224 px, 5.5M parameters
    assert found.total_flops == pytest.approx(2 * 2 * 0.414e9, rel=0.05)
    assert found.param_count == pytest.approx(5.5e6, rel=0.02)
