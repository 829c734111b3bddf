"""Where inference time goes: op categories in both frameworks on known programs, the overhead
term, and the why-sentence on breakdowns with a known answer."""

from __future__ import annotations

import gzip
import json
import os

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
    # a convolution fused with what follows it is one kernel, named by all it holds, the
    # convolution first (the max under the batch_norm scope is the BatchNorm's)
    assert got["fusion.1"] == f"{CONV} + {NORM}"
    assert got["fusion.2"] == DEPTHWISE  # feature_group_count=64
    assert got["dot.18"] == MATMUL
    assert got["fusion.3"] == ATTENTION  # the Flax twin's named scope
    assert got["fusion.4"] == NORM  # first op in a layer_norm scope
    assert got["fusion.5"] == ELEMENTWISE
    assert got["reduce-window.16"] == POOL
    assert got["transpose.13"] == MOVE and got["reshape.17"] == MOVE


# Library calls on a GPU carry the activation they fuse in their backend config, not as ops
GPU_HLO = """
ENTRY %main (p0: f32[8,14,14,32], p1: f32[3,3,32,64], p2: f32[8,768], p3: f32[768,3072]) -> f32[8,64] {
  %p0 = f32[8,14,14,32]{3,2,1,0} parameter(0)
  %p1 = f32[3,3,32,64]{3,2,1,0} parameter(1)
  %p2 = f32[8,768]{1,0} parameter(2)
  %p3 = f32[768,3072]{1,0} parameter(3)
  %custom-call.1 = (f32[8,14,14,64]{3,2,1,0}, u8[0]{0}) custom-call(%p0, %p1), custom_call_target="__cudnn$convBiasActivationForward", backend_config={"conv_result_scale":1,"activation_mode":"kRelu","side_input_scale":0}
  %custom-call.2 = (f32[8,14,14,64]{3,2,1,0}, u8[0]{0}) custom-call(%p0, %p1), custom_call_target="__cudnn$convForward", backend_config={"conv_result_scale":1,"activation_mode":"kNone","side_input_scale":0}
  %custom-call.3 = (f32[8,3072]{1,0}, s8[0]{0}) custom-call(%p2, %p3), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"alpha_real":1,"epilogue":"BIAS_GELU"}}
  ROOT %custom-call.4 = (f32[8,3072]{1,0}, s8[0]{0}) custom-call(%p2, %p3), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"alpha_real":1,"epilogue":"BIAS"}}
}
"""


def test_a_library_call_that_fuses_an_activation_is_named_with_it():
    got = hlo_categories(GPU_HLO)
    assert got["custom-call.1"] == f"{CONV} + {ELEMENTWISE}"
    assert got["custom-call.2"] == CONV
    assert got["custom-call.3"] == f"{MATMUL} + {ELEMENTWISE}"
    assert got["custom-call.4"] == MATMUL  # a bias is part of the layer on both sides


def test_a_profiles_rows_put_a_fused_category_after_the_one_it_goes_to_first():
    fused = f"{CONV} + {NORM} + {ELEMENTWISE}"
    times = {NORM: 1.0, fused: 3.0, CONV: 5.0, f"{NORM} + {ELEMENTWISE}": 2.0, MOVE: 0.5}
    profile = OpProfile(pd.DataFrame(), times, wall_ms=12.0, busy_ms=11.0, trace_path=None)
    assert [c for c, _ in profile.rows()] == [
        CONV,
        fused,
        NORM,
        f"{NORM} + {ELEMENTWISE}",
        MOVE,
        OVERHEAD,
    ]


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
    # the raw trace is kept, gzipped: the evidence stops growing by a trace's full size
    assert profile.trace_path.endswith(".json.gz")
    with gzip.open(profile.trace_path) as fh:
        assert "traceEvents" in json.load(fh)


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
    assert not list(tmp_path.rglob("*.xplane.pb"))
    assert list(tmp_path.rglob("*.xplane.pb.gz"))


def _breakdown_rows(framework, variant, values, wall=None, unnamed=False):
    """``why.breakdown``'s rows of one side; ``wall``: its profiled wall time (default: the
    rows' sum); ``unnamed``: a JAX profile that does not name what its fusions hold."""
    return [
        {
            "model": "efficientnet_b0",
            "device": "cpu",
            "device_name": "Test CPU",
            "precision": "fp32",
            "threads": 2,
            "batch_size": 8,
            "framework": framework,
            "variant": variant,
            "category": category,
            "ms": ms,
            "wall_ms": sum(values.values()) if wall is None else wall,
            "fusions_unnamed": unnamed,
        }
        for category, ms in values.items()
    ]


def _matrix(winner, ratio, model="efficientnet_b0", batch_size=8, device_name="Test CPU"):
    return pd.DataFrame(
        [
            {
                "model": model,
                "device": "cpu",
                "device_name": device_name,
                "precision": "fp32",
                "threads": 2,
                "batch_size": batch_size,
                "comparison": "defaults",
                "jax_variant": "jit",
                "torch_variant": "eager",
                "ratio": ratio,
                "winner": winner,
            }
        ]
    )


JAX_SIDE = {CONV: 3.0, DEPTHWISE: 8.1, ELEMENTWISE: 2.0, OVERHEAD: 0.4}
TORCH_SIDE = {CONV: 3.2, DEPTHWISE: 1.0, ELEMENTWISE: 1.3, OVERHEAD: 0.5}


def _sentence(jax=JAX_SIDE, torch=TORCH_SIDE, **jax_options):
    table = pd.DataFrame(
        _breakdown_rows("jax", "jit", jax, **jax_options) + _breakdown_rows("torch", "eager", torch)
    )
    gaps = why.gaps(_matrix("torch", 0.45), table)
    (sentence,) = why.why_sentences(gaps)
    return gaps, sentence


def test_the_why_sentence_lists_every_part_of_the_gap_with_its_sign():
    gaps, sentence = _sentence()
    assert gaps.gap_ms.sum() == pytest.approx(13.5 - 6.0)
    # 7.1 of the 7.8 ms of positive parts is depthwise (91% >= 80%): it leads
    assert why.explaining(gaps).category.tolist() == [DEPTHWISE]
    assert sentence == (
        "JAX jit on EfficientNet-B0 at batch 8 in fp32 with 2 threads is 7.50 ms per profiled "
        "call slower than PyTorch eager (13.50 against 6.00 ms): depthwise/grouped convolution "
        "+7.10 ms, elementwise/activation +0.70 ms, unattributed (time outside the profiled ops) "
        "-0.10 ms, convolution -0.20 ms."
    )
    # where the time outside every op is most of the gap, the sentence says the profile cannot
    # attribute it
    _, sentence = _sentence(jax={**JAX_SIDE, OVERHEAD: 30.0})
    assert "most of the gap lies outside every profiled op" in sentence
    # a comparison that calls no winner and has no measured gap has no sentence
    table = pd.DataFrame(_breakdown_rows("jax", "jit", JAX_SIDE))
    assert why.gaps(_matrix("equivalent", 1.01), table).empty


def test_op_time_that_ran_on_several_threads_at_once_is_a_part_of_its_own():
    # the JAX rows sum to 13.5 ms, but its ops overlapped: the wall clock read 12.5
    gaps, sentence = _sentence(wall=12.5)
    assert gaps.gap_ms.sum() == pytest.approx(12.5 - 6.0)
    assert gaps.slower_ms.sum() == pytest.approx(12.5) and gaps.faster_ms.sum() == 6.0
    assert "is 6.50 ms per profiled call slower" in sentence
    assert sentence.endswith("ops overlapping on several threads -1.00 ms.")


def test_what_one_side_fused_is_one_block_on_both_sides():
    fused = f"{CONV} + {NORM} + {ELEMENTWISE}"
    jax = {CONV: 1.0, fused: 4.0, DEPTHWISE: 8.1, OVERHEAD: 0.4}
    torch = {CONV: 3.2, NORM: 0.8, ELEMENTWISE: 1.3, DEPTHWISE: 1.0, OVERHEAD: 0.5}
    gaps, sentence = _sentence(jax, torch)
    block = gaps[gaps.kind == "ops"].set_index("category")
    label = "convolution with its fused normalisation and elementwise/activation"
    # PyTorch's separate BatchNorm and activation join its convolutions against the JAX kernel
    assert block.loc[label, "slower_ms"] == pytest.approx(5.0)
    assert block.loc[label, "faster_ms"] == pytest.approx(3.2 + 0.8 + 1.3)
    assert block.loc[label, "merged"] == f"{CONV}; {fused}; {NORM}; {ELEMENTWISE}"
    assert not block.assumed.any() and set(block.index) == {label, DEPTHWISE}
    assert f"{label} -0.30 ms" in sentence and "does not name what XLA fused" not in sentence


def test_a_jax_profile_that_does_not_name_its_fusions_is_compared_in_one_block():
    gaps, sentence = _sentence(unnamed=True)
    label = "convolution and depthwise/grouped convolution with their fused elementwise/activation"
    assert gaps[gaps.kind == "ops"].category.tolist() == [label]
    assert gaps.assumed.any() and f"{label} +7.60 ms (one block on both sides" in sentence
    assert "since the JAX profile does not name what XLA fused" in sentence
    # what the profiles recorded is still said, category by category
    assert (
        "as each side recorded it: depthwise/grouped convolution +7.10 ms, elementwise/activation "
        "+0.70 ms, convolution -0.20 ms)" in sentence
    )


def _profile_records(framework, variant, profile):
    """``profile``'s records as 10_inference writes them, with the columns the report reads."""
    return [
        {
            "family": "profile",
            "metric": "op_time_ms",
            "status": "ok",
            "value": ms,
            "trial": 0,
            "model": "resnet50",
            "device": "cpu",
            "device_name": "Test CPU",
            "precision": "fp32",
            "threads": 2,
            "batch_size": 4,
            "framework": framework,
            "variant": variant,
            "extra": {
                "category": category,
                "wall_ms": profile.wall_ms,
                "busy_ms": profile.busy_ms,
                "calls": profile.calls,
            },
        }
        for category, ms in profile.rows()
    ]


def test_the_parts_of_a_gap_add_up_to_it_on_real_profiles(tmp_path, monkeypatch):
    """Two convolutions with BatchNorm and ReLU and a global pool, profiled in both frameworks:
    XLA runs them as one kernel, PyTorch as seven ops."""
    import re

    import jax
    import jax.numpy as jnp
    import torch

    monkeypatch.setenv("FWBENCH_EXECUTED_DIR", str(tmp_path))
    torch.manual_seed(0)
    nn = torch.nn
    block = nn.Sequential(
        nn.Conv2d(16, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
    ).eval()
    x = torch.randn(4, 16, 28, 28)
    with torch.no_grad():
        block(x)  # oneDNN builds its kernels on the first call
        torch_profile = profile_torch(_TorchSide(block), x, calls=3)

    kernels = [jnp.asarray(block[i].weight.detach().numpy().transpose(2, 3, 1, 0)) for i in (0, 3)]
    dims = ("NHWC", "HWIO", "NHWC")

    def forward(h):
        for kernel in kernels:
            h = jax.lax.conv_general_dilated(h, kernel, (1, 1), "SAME", dimension_numbers=dims)
            with jax.named_scope("batch_norm"):  # as the Flax twins name it
                h = h * jax.lax.rsqrt(1.0 + 1e-5)
            h = jax.nn.relu(h)
        return h.mean(axis=(1, 2))

    xj = jnp.asarray(x.numpy().transpose(0, 2, 3, 1))
    side = _JaxSide(forward, xj)
    side.sync(side(xj))
    jax_profile = profile_jax(side, xj, calls=3)
    assert any(" + " in c for c in jax_profile.category_ms), jax_profile.category_ms

    meas = pd.DataFrame(
        _profile_records("torch", "eager", torch_profile)
        + _profile_records("jax", "jit", jax_profile)
    )
    table = why.breakdown(meas)
    walls = table.groupby("framework").wall_ms.first()
    assert walls.to_dict() == pytest.approx(
        {"torch": torch_profile.wall_ms, "jax": jax_profile.wall_ms}
    )
    ratio = walls["torch"] / walls["jax"]  # JAX ÷ PyTorch throughput
    matrix = _matrix("jax" if ratio > 1 else "torch", ratio, "resnet50", 4)
    gaps = why.gaps(matrix, table)
    slower, faster = gaps.slower.iloc[0], gaps.faster.iloc[0]
    total = walls[slower] - walls[faster]
    # the parts and the residuals add up to the whole gap, and each side's to its wall time
    assert gaps.gap_ms.sum() == pytest.approx(total, abs=1e-9)
    assert gaps.slower_ms.sum() == pytest.approx(walls[slower], abs=1e-9)
    assert gaps.faster_ms.sum() == pytest.approx(walls[faster], abs=1e-9)
    # like for like: PyTorch's BatchNorm, ReLU and pooling sit in the JAX kernel's block
    ops = gaps[gaps.kind == "ops"]
    assert not {NORM, ELEMENTWISE, POOL} & set(ops.category)
    (label,) = [c for c in ops.category if c.startswith("convolution with its fused")]
    for category in (NORM, ELEMENTWISE, POOL):
        assert category in label
    assert (gaps.kind == "residual").any() and not gaps.assumed.any()
    # the sentence lists every part with its sign; rounded, they add up to its total
    (sentence,) = why.why_sentences(gaps)
    stated = float(re.search(r"is (\d+\.\d+) ms per profiled call slower", sentence).group(1))
    listed = [float(v) for v in re.findall(r" ([+-]\d+\.\d+) ms", sentence)]
    assert stated == pytest.approx(total, abs=0.005)
    assert sum(listed) == pytest.approx(total, abs=0.005 * (len(listed) + 1))
    shown = gaps[gaps.gap_ms.abs() >= why.SHOWN_MS]
    assert len(listed) == len(shown) and f"{label} " in sentence


def test_the_kernels_profiler_level_silences_kineto():
    """The runner's kernels set KINETO_LOG_LEVEL (trial.KERNEL_ENV_DEFAULTS): at that level a
    PyTorch profile prints nothing of Kineto's own, where the default prints its probe lines."""
    import subprocess
    import sys

    from fwbench.pipeline.trial import KERNEL_ENV_DEFAULTS

    program = (
        "import torch\n"
        "from torch.profiler import ProfilerActivity, profile\n"
        "with profile(activities=[ProfilerActivity.CPU]):\n"
        "    torch.ones(8) @ torch.ones(8)\n"
    )

    def stderr(level):
        env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
        if level is not None:
            env["KINETO_LOG_LEVEL"] = level
        done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True)
        return done.stderr.decode()

    assert "profiler_start" in stderr(None)
    assert stderr(KERNEL_ENV_DEFAULTS["KINETO_LOG_LEVEL"]) == ""
