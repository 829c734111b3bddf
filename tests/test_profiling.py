"""Where inference time goes: op categories in both frameworks on known programs, the overhead
term, and the why-sentence on breakdowns with a known answer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fwbench.families.inference.op_categories import hlo_categories, torch_category
from fwbench.families.inference.profiling import OpProfile, busy_time, profile_jax, profile_torch
from fwbench.report import why
from fwbench.vocab import OVERHEAD

CONV, DEPTHWISE, MATMUL, ATTENTION, NORM, ELEMENTWISE, POOL, MOVE = (
    "convolution",
    "depthwise/grouped convolution",
    "matmul/linear",
    "attention",
    "normalisation",
    "elementwise/activation",
    "pooling/reduction",
    "data movement/layout",
)


@pytest.mark.parametrize(
    "op, shapes, category",
    [
        ("aten::conv2d", [[8, 32, 14, 14], [64, 32, 3, 3], [64]], CONV),
        ("aten::conv2d", [[8, 32, 14, 14], [32, 1, 3, 3], []], DEPTHWISE),
        ("aten::conv2d", [[8, 32, 14, 14], [32, 8, 3, 3], []], DEPTHWISE),  # 4 groups
        ("aten::linear", [[8, 768], [1000, 768], [1000]], MATMUL),
        ("aten::addmm", None, MATMUL),
        ("aten::scaled_dot_product_attention", None, ATTENTION),
        ("aten::batch_norm", None, NORM),
        ("aten::layer_norm", None, NORM),
        ("aten::relu_", None, ELEMENTWISE),
        ("aten::hardswish_", None, ELEMENTWISE),
        ("aten::add", None, ELEMENTWISE),
        ("aten::max_pool2d", None, POOL),
        ("aten::adaptive_avg_pool2d", None, POOL),
        ("aten::mean", None, POOL),
        ("aten::flatten", None, MOVE),
        ("aten::permute", None, MOVE),
        ("aten::_to_copy", None, MOVE),
        ("aten::contiguous", None, MOVE),
    ],
)
def test_outermost_aten_ops_land_in_their_category(op, shapes, category):
    assert torch_category(op, shapes) == category


def test_inside_a_fused_attention_layer_the_batched_matmuls_are_attention():
    assert torch_category("aten::bmm", None, in_attention=True) == ATTENTION
    assert torch_category("aten::_softmax", None, in_attention=True) == ATTENTION
    assert torch_category("aten::addmm", None, in_attention=True) == MATMUL
    assert torch_category("aten::bmm", None) == MATMUL


HLO = """
HloModule jit_forward, entry_computation_layout={(f32[8,32,14,14]{3,2,1,0})->f32[8,10]{1,0}}

%fused_conv_bn (param_0: f32[8,14,14,32], param_1: f32[3,3,32,64]) -> f32[8,14,14,64] {
  %param_0 = f32[8,14,14,32]{3,2,1,0} parameter(0)
  %param_1 = f32[3,3,32,64]{3,2,1,0} parameter(1)
  %convolution.1 = f32[8,14,14,64]{3,2,1,0} convolution(%param_0, %param_1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, metadata={op_name="jit(forward)/conv_general_dilated"}
  %constant.2 = f32[] constant(0)
  %broadcast.3 = f32[8,14,14,64]{3,2,1,0} broadcast(%constant.2), dimensions={}
  ROOT %maximum.4 = f32[8,14,14,64]{3,2,1,0} maximum(%convolution.1, %broadcast.3), metadata={op_name="jit(forward)/batch_norm/max"}
}

%fused_dw (param_0.1: f32[8,14,14,64], param_1.1: f32[3,3,1,64]) -> f32[8,14,14,64] {
  %param_0.1 = f32[8,14,14,64]{3,2,1,0} parameter(0)
  %param_1.1 = f32[3,3,1,64]{3,2,1,0} parameter(1)
  ROOT %convolution.5 = f32[8,14,14,64]{3,2,1,0} convolution(%param_0.1, %param_1.1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=64
}

%fused_softmax (param_0.2: f32[8,4,4]) -> f32[8,4,4] {
  %param_0.2 = f32[8,4,4]{2,1,0} parameter(0)
  %exponential.6 = f32[8,4,4]{2,1,0} exponential(%param_0.2), metadata={op_name="jit(forward)/attention/exp"}
  ROOT %divide.7 = f32[8,4,4]{2,1,0} divide(%exponential.6, %exponential.6), metadata={op_name="jit(forward)/attention/div"}
}

%fused_norm (param_0.3: f32[8,64]) -> f32[8,64] {
  %param_0.3 = f32[8,64]{1,0} parameter(0)
  %multiply.8 = f32[8,64]{1,0} multiply(%param_0.3, %param_0.3), metadata={op_name="jit(forward)/layer_norm/mul"}
  ROOT %rsqrt.9 = f32[8,64]{1,0} rsqrt(%multiply.8)
}

%fused_relu (param_0.4: f32[8,64]) -> f32[8,64] {
  %param_0.4 = f32[8,64]{1,0} parameter(0)
  %constant.10 = f32[] constant(0)
  %broadcast.11 = f32[8,64]{1,0} broadcast(%constant.10), dimensions={}
  ROOT %maximum.12 = f32[8,64]{1,0} maximum(%param_0.4, %broadcast.11)
}

ENTRY %main.20 (Arg_0.1: f32[8,32,14,14]) -> f32[8,10] {
  %Arg_0.1 = f32[8,32,14,14]{3,2,1,0} parameter(0)
  %transpose.13 = f32[8,14,14,32]{3,2,1,0} transpose(%Arg_0.1), dimensions={0,2,3,1}
  %constant.14 = f32[3,3,32,64]{3,2,1,0} constant({...})
  %fusion.1 = f32[8,14,14,64]{3,2,1,0} fusion(%transpose.13, %constant.14), kind=kOutput, calls=%fused_conv_bn
  %constant.15 = f32[3,3,1,64]{3,2,1,0} constant({...})
  %fusion.2 = f32[8,14,14,64]{3,2,1,0} fusion(%fusion.1, %constant.15), kind=kOutput, calls=%fused_dw
  %reduce-window.16 = f32[8,7,7,64]{3,2,1,0} reduce-window(%fusion.2, %constant.14), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=%max
  %reshape.17 = f32[8,3136]{1,0} reshape(%reduce-window.16)
  %dot.18 = f32[8,64]{1,0} dot(%reshape.17, %reshape.17), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %fusion.3 = f32[8,4,4]{2,1,0} fusion(%dot.18), kind=kLoop, calls=%fused_softmax
  %fusion.4 = f32[8,64]{1,0} fusion(%dot.18), kind=kLoop, calls=%fused_norm
  ROOT %fusion.5 = f32[8,64]{1,0} fusion(%fusion.4), kind=kLoop, calls=%fused_relu
}
"""


def test_hlo_instructions_take_the_category_of_what_they_are_built_around():
    got = hlo_categories(HLO)
    # a convolution fused with its BatchNorm and ReLU stays a convolution
    assert got["fusion.1"] == CONV
    assert got["fusion.2"] == DEPTHWISE  # feature_group_count=64
    assert got["dot.18"] == MATMUL
    assert got["fusion.3"] == ATTENTION  # the Flax twin's named scope
    assert got["fusion.4"] == NORM  # first op in a layer_norm scope
    assert got["fusion.5"] == ELEMENTWISE
    assert got["reduce-window.16"] == POOL
    assert got["transpose.13"] == MOVE and got["reshape.17"] == MOVE


def test_the_busy_time_is_the_union_of_intervals_not_their_sum():
    # two threads: [0, 10] and [5, 12] overlap; [20, 25] stands alone; [21, 22] lies inside it
    assert busy_time([(5, 12), (0, 10), (20, 25), (21, 22)]) == pytest.approx(17.0)
    assert busy_time([]) == 0.0
    profile = OpProfile(pd.DataFrame(), {CONV: 12.0}, wall_ms=20.0, busy_ms=17.0, trace_path=None)
    # 12 ms of op time summed over threads, 17 ms busy, 3 ms outside every op
    assert profile.overhead_ms == pytest.approx(3.0)
    assert profile.rows()[-1] == (OVERHEAD, pytest.approx(3.0))


class _TorchSide:
    device = "cpu"

    def __init__(self, module):
        self.module = module

    def __call__(self, x):
        return self.module(x)

    def sync(self, out):
        return out


def _dominant(profile) -> str:
    return max(profile.category_ms, key=profile.category_ms.get)


@pytest.mark.parametrize(
    "build, shape, category",
    [
        (lambda nn: nn.Conv2d(32, 64, 3, padding=1), (8, 32, 28, 28), CONV),
        (lambda nn: nn.Conv2d(64, 64, 3, padding=1, groups=64), (8, 64, 28, 28), DEPTHWISE),
        (lambda nn: nn.Linear(512, 512), (256, 512), MATMUL),
    ],
)
def test_torch_profiles_of_known_programs(build, shape, category, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("FWBENCH_EXECUTED_DIR", str(tmp_path))
    torch.manual_seed(0)
    side = _TorchSide(build(torch.nn).eval())
    x = torch.randn(*shape)
    with torch.no_grad():
        profile = profile_torch(side, x, calls=3)
    assert _dominant(profile) == category
    assert 0 < profile.busy_ms <= profile.wall_ms
    assert profile.overhead_ms == pytest.approx(profile.wall_ms - profile.busy_ms)


def test_pytorchs_fused_attention_layer_is_opened_into_matmuls_and_attention(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("FWBENCH_EXECUTED_DIR", str(tmp_path))
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(256, 4, batch_first=True).eval()

    class Block(torch.nn.Module):
        def forward(self, x):
            return layer(x, x, x, need_weights=False)[0]

    x = torch.randn(8, 64, 256)
    with torch.no_grad():
        profile = profile_torch(_TorchSide(Block()), x, calls=3)
    ops = " ".join(profile.ops.op)
    assert "_native_multi_head_attention" in ops  # the fast path ran
    # its projections count as matmul/linear, its core as attention
    assert profile.category_ms.get(MATMUL, 0) > 0 and profile.category_ms.get(ATTENTION, 0) > 0
    core = profile.ops[profile.ops.op.str.startswith(("aten::bmm", "aten::_softmax"))]
    assert not core.empty and (core.category == ATTENTION).all()
    projections = profile.ops[profile.ops.op.str.startswith(("aten::mm ", "aten::addmm "))]
    assert not projections.empty and (projections.category == MATMUL).all()


class _JaxSide:
    def __init__(self, fn, x):
        import jax

        self.compiled = {x.shape: jax.jit(fn).lower(x).compile()}

    def __call__(self, x):
        return self.compiled[x.shape](x)

    def sync(self, out):
        return out.block_until_ready()


def _jax_programs():
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((3, 3, 32, 64)), jnp.float32)
    dw = jnp.asarray(rng.standard_normal((3, 3, 1, 64)), jnp.float32)
    m = jnp.asarray(rng.standard_normal((512, 512)), jnp.float32)
    dims = ("NHWC", "HWIO", "NHWC")

    def conv(x):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)

    def depthwise(x):
        return jax.lax.conv_general_dilated(
            x, dw, (1, 1), "SAME", dimension_numbers=dims, feature_group_count=64
        )

    def matmul(x):
        return x @ m

    return [
        (conv, (8, 28, 28, 32), CONV),
        (depthwise, (8, 28, 28, 64), DEPTHWISE),
        (matmul, (256, 512), MATMUL),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_jax_profiles_of_known_programs(index, tmp_path, monkeypatch):
    import jax.numpy as jnp

    monkeypatch.setenv("FWBENCH_EXECUTED_DIR", str(tmp_path))
    fn, shape, category = _jax_programs()[index]
    x = jnp.asarray(np.random.default_rng(1).standard_normal(shape), jnp.float32)
    side = _JaxSide(fn, x)
    side.sync(side(x))
    profile = profile_jax(side, x, calls=3)
    assert profile.category_ms, "the trace held no event named after an HLO instruction"
    assert _dominant(profile) == category
    assert 0 < profile.busy_ms <= profile.wall_ms


def _breakdown_rows(framework, variant, values, batch_size=8):
    return [
        {
            "model": "efficientnet_b0",
            "device": "cpu",
            "device_name": "Test CPU",
            "precision": "fp32",
            "threads": 2,
            "batch_size": batch_size,
            "framework": framework,
            "variant": variant,
            "category": category,
            "ms": ms,
        }
        for category, ms in values.items()
    ]


def test_the_why_sentence_names_the_categories_that_make_up_most_of_the_gap():
    table = pd.DataFrame(
        _breakdown_rows("jax", "jit", {CONV: 3.0, DEPTHWISE: 8.1, ELEMENTWISE: 2.0, OVERHEAD: 0.4})
        + _breakdown_rows(
            "torch", "eager", {CONV: 3.2, DEPTHWISE: 1.0, ELEMENTWISE: 1.3, OVERHEAD: 0.5}
        )
    )
    matrix = pd.DataFrame(
        [
            {
                "model": "efficientnet_b0",
                "device": "cpu",
                "device_name": "Test CPU",
                "precision": "fp32",
                "threads": 2,
                "batch_size": 8,
                "comparison": "defaults",
                "jax_variant": "jit",
                "torch_variant": "eager",
                "winner": "torch",
            }
        ]
    )
    gaps = why.gaps(matrix, table)
    assert gaps.gap_ms.sum() == pytest.approx(13.5 - 6.0)
    named = why.explaining(gaps)
    # 7.1 of the 7.8 ms of positive gap is depthwise (91% >= 80%): one category is enough
    assert named.category.tolist() == [DEPTHWISE]
    (sentence,) = why.why_sentences(gaps)
    assert sentence.startswith(
        "JAX jit on EfficientNet-B0 at batch 8 in fp32 with 2 threads spends 7.10 of its"
    )
    assert (
        "7.50 extra ms per call" in sentence
        and "depthwise/grouped convolution (7.10 ms)" in sentence
    )
    # where the overhead is most of the gap, the sentence says the profile cannot attribute it
    table.loc[(table.framework == "jax") & (table.category == OVERHEAD), "ms"] = 30.0
    (sentence,) = why.why_sentences(why.gaps(matrix, table))
    assert "most of the gap is framework overhead" in sentence
    # where the slower side also saves time, the sentence says where
    table.loc[(table.framework == "jax") & (table.category == OVERHEAD), "ms"] = 0.4
    table.loc[(table.framework == "torch") & (table.category == CONV), "ms"] = 6.0
    (sentence,) = why.why_sentences(why.gaps(matrix, table))
    assert sentence.startswith(
        "JAX jit on EfficientNet-B0 at batch 8 in fp32 with 2 threads is 4.70 ms per call"
    )
    assert (
        "it spends 7.10 ms more in depthwise/grouped convolution, and 3.10 ms less elsewhere"
        in sentence
    )
    assert "(most in convolution, 3.00 ms)" in sentence
    # a tie has no sentence
    assert why.gaps(matrix.assign(winner="tie"), table).empty
