"""FLOP counters: a training step counted alike by torch's FlopCounterMode and from XLA's program.

Each case is a convolution whose gradients the two counters phrase differently: XLA lowers a
stride-s input gradient to a convolution over an input dilated with zeros and a depthwise weight
gradient to ``batch_group_count``; torch's own formula counts a grouped weight gradient as if
the convolution were full. Every count must come out at the forward's multiply-adds, 2 FLOPs
each, once per gradient taken.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from fwbench.measure import flops

N, SIZE, C_IN, C_OUT, K = 2, 8, 4, 4, 3


def _conv(stride: int, groups: int):
    def conv(w, x):
        return jax.lax.conv_general_dilated(
            x,
            w,
            (stride, stride),
            ((1, 1), (1, 1)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=groups,
        ).sum()

    return conv


def _forward_flops(stride: int, groups: int) -> int:
    out = (SIZE + 2 - K) // stride + 1
    return 2 * N * out * out * C_OUT * (C_IN // groups) * K * K


@pytest.mark.parametrize(("stride", "groups"), [(1, 1), (2, 1), (1, C_IN), (2, C_IN)])
def test_xla_counts_forward_and_both_gradients_at_the_forward_cost(stride, groups):
    x = jnp.ones((N, SIZE, SIZE, C_IN))
    w = jnp.ones((K, K, C_IN // groups, C_OUT))
    conv = _conv(stride, groups)
    forward = _forward_flops(stride, groups)
    assert flops.xla_matmul_conv_flops(jax.jit(conv).lower(w, x).as_text()) == forward
    step = jax.jit(jax.value_and_grad(conv, argnums=(0, 1))).lower(w, x).as_text()
    if stride > 1:
        assert "lhs_dilate = [2, 2]" in step  # the input gradient runs over a dilated input
    if groups > 1:
        assert "batch_group_count = 4" in step  # the depthwise weight gradient
    assert flops.xla_matmul_conv_flops(step) == 3 * forward


@pytest.mark.parametrize(("stride", "groups"), [(1, 1), (2, 1), (1, C_IN), (2, C_IN)])
def test_torch_counts_forward_and_both_gradients_at_the_forward_cost(stride, groups):
    layer = torch.nn.Conv2d(C_IN, C_OUT, K, stride, padding=1, groups=groups, bias=False)
    x = torch.ones(N, C_IN, SIZE, SIZE, requires_grad=True)
    forward = _forward_flops(stride, groups)
    assert flops.torch_flops(lambda: layer(x)) == forward
    assert flops.torch_flops(lambda: layer(x).sum().backward()) == 3 * forward
    # without the input's gradient (a network's first layer), only the weight's
    x.requires_grad_(False)
    assert flops.torch_flops(lambda: layer(x).sum().backward()) == 2 * forward


def test_both_counters_agree_on_a_matmul_step():
    a = np.ones((8, 16), np.float32)
    w = np.ones((16, 4), np.float32)
    xla = jax.jit(jax.value_and_grad(lambda w, a: (a @ w).sum())).lower(w, a).as_text()
    weight = torch.ones(16, 4, requires_grad=True)
    counted = flops.torch_flops(lambda: (torch.from_numpy(a) @ weight).sum().backward())
    assert flops.xla_matmul_conv_flops(xla) == counted == 2 * (2 * 8 * 16 * 4)
