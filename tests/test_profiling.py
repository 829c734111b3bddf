"""The category an op's time is counted under, for op names as torch.profiler and XLA traces give them."""

from __future__ import annotations

import pytest

from fwbench.families.inference.profiling import _breakdown, categorize


@pytest.mark.parametrize(
    "op, category",
    [
        # torch.profiler (aten ops, CPU and CUDA)
        ("aten::convolution", "matmul/conv"),
        ("aten::mkldnn_convolution", "matmul/conv"),
        ("aten::addmm", "matmul/conv"),
        ("aten::linear", "matmul/conv"),
        ("aten::bmm", "matmul/conv"),
        ("aten::native_batch_norm", "normalisation"),
        ("aten::native_layer_norm", "normalisation"),
        ("aten::_softmax", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::relu_", "elementwise"),
        ("aten::add_", "elementwise"),
        ("aten::hardswish_", "elementwise"),
        ("aten::max_pool2d_with_indices", "elementwise"),
        ("aten::copy_", "data movement"),
        ("aten::cat", "data movement"),
        ("aten::expand", "data movement"),
        ("aten::empty", "other"),
        # XLA HLO op names in a JAX trace
        ("convolution.12", "matmul/conv"),
        ("dot.3", "matmul/conv"),
        ("fusion.42", "elementwise"),
        ("convert_element_type.1", "data movement"),
        ("convert.5", "data movement"),
        ("transpose.3", "data movement"),
        ("broadcast_in_dim.2", "data movement"),
        ("reduce.1", "elementwise"),
        ("custom-call.3", "other"),
    ],
)
def test_op_names_land_in_their_category(op, category):
    assert categorize(op) == category


def test_shares_sum_to_one_and_rank_ops_by_time():
    breakdown = _breakdown({"aten::addmm": 60.0, "aten::relu_": 30.0, "aten::empty": 10.0}, None)
    assert breakdown.shares == pytest.approx({"matmul/conv": 0.6, "elementwise": 0.3, "other": 0.1})
    assert breakdown.top_ops.op.tolist()[0] == "aten::addmm"
    assert breakdown.top_ops.share.sum() == pytest.approx(1.0)
