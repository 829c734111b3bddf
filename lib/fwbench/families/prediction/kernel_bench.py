"""Micro-benchmarks of single kernels on the device, in each framework: the table
``kernel_prices.KernelPrices`` prices a model's kernels from.

Each kernel of ``kernels.py`` is rebuilt alone from its kind and shape and timed as the benchmarks
time a model (``measure.timing``: warm-up until stable, then calls until both a minimum count and
a minimum duration), fp32, on random data:

- ``conv`` / ``grouped_conv``: torch's ``F.conv2d`` on NCHW with its bias, as an eager forward
  calls it; in JAX ``lax.conv_general_dilated`` on NHWC (the Flax twins' layout) with a bias and a
  ReLU after it, which XLA fuses into the convolution's kernel as it fuses a twin's epilogue.
  Padding is symmetric, ``(k - 1) // 2``, and the input is as tall as the output needs.
- ``matmul``: ``a @ b`` (batched where the kernel is).
- ``memory``: a chain of ``ops`` elementwise operations over as many fp32 values as the bytes
  read and written take (XLA fuses the chain into one loop; torch runs one op, ``ops`` is 1).

A call's time includes the framework's cost of one call, which ``empty_call_seconds`` measures
on a one-value input. A jitted model is one call of one executable, so a JAX kernel's time is
taken without it (``call_cost``) and the model pays it once (``kernel_prices.Setting``); PyTorch
eager pays it for every op it dispatches, so a torch kernel keeps it.

``grid`` is the sweep of a micro-benchmark campaign: shapes spanning those the study's models
run, including the small spatial outputs and depthwise filters where XLA:CPU's convolutions and
PyTorch's differ most.
"""

from __future__ import annotations

import itertools

import numpy as np

from fwbench.families.prediction.kernels import (
    CONV,
    GROUPED_CONV,
    MATMUL,
    MEMORY,
    Kernel,
    conv_kernel,
)
from fwbench.measure import device as fw_device
from fwbench.measure.timing import StopRule, measure_latency

_FLOOR_S = 1e-8  # a kernel that took no longer than an empty call still costs something


def _padding(k: int) -> int:
    return (k - 1) // 2


def _input_size(out: int, k: int, stride: int) -> int:
    """The input height (or width) that gives ``out`` with stride and symmetric padding."""
    return (out - 1) * stride + k - 2 * _padding(k)


def _conv_input(f: dict) -> tuple[int, int]:
    """A convolution kernel's input height and width, for its fields ``f``."""
    return _input_size(f["hout"], f["kh"], f["stride"]), _input_size(
        f["wout"], f["kw"], f["stride"]
    )


def _torch_case(kernel: Kernel, rng):
    import torch
    import torch.nn.functional as F

    f = kernel.fields

    def tensor(*shape):
        return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))

    if kernel.kind in (CONV, GROUPED_CONV):
        h, w_in = _conv_input(f)
        x = tensor(f["batch"], f["cin"], h, w_in)
        w = tensor(f["cout"], f["cin"] // f["groups"], f["kh"], f["kw"])
        b = tensor(f["cout"])
        pad = (_padding(f["kh"]), _padding(f["kw"]))

        def run(v):
            return F.conv2d(v, w, b, stride=f["stride"], padding=pad, groups=f["groups"])

        return run, x
    if kernel.kind == MATMUL:
        lead = (f["batch"],) if f["batch"] > 1 else ()
        a, b = tensor(*lead, f["m"], f["k"]), tensor(*lead, f["k"], f["n"])
        return (lambda v: v @ b), a
    if f["ops"] != 1:
        raise ValueError("PyTorch eager runs one op per kernel: a chain of ops is JAX's")
    x = tensor(max(f["bytes"] // 8, 1))
    return (lambda v: torch.add(v, 1.0)), x


def _jax_case(kernel: Kernel, rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    f = kernel.fields

    def array(*shape):
        return jnp.asarray(rng.standard_normal(shape, dtype=np.float32))

    if kernel.kind in (CONV, GROUPED_CONV):
        h, w_in = _conv_input(f)
        x = array(f["batch"], h, w_in, f["cin"])
        w = array(f["kh"], f["kw"], f["cin"] // f["groups"], f["cout"])
        b = array(f["cout"])
        pads = [(_padding(f["kh"]),) * 2, (_padding(f["kw"]),) * 2]

        @jax.jit
        def conv(v, w, b):
            y = lax.conv_general_dilated(
                v,
                w,
                (f["stride"], f["stride"]),
                pads,
                dimension_numbers=("NHWC", "HWIO", "NHWC"),
                feature_group_count=f["groups"],
            )
            return jax.nn.relu(y + b)

        return (lambda v: conv(v, w, b)), x
    if kernel.kind == MATMUL:
        lead = (f["batch"],) if f["batch"] > 1 else ()
        a, b = array(*lead, f["m"], f["k"]), array(*lead, f["k"], f["n"])
        matmul = jax.jit(jnp.matmul)
        return (lambda v: matmul(v, b)), a

    @jax.jit
    def chain(v):
        for i in range(f["ops"]):
            v = v * 1.0001 + float(i)
        return v

    return chain, array(max(f["bytes"] // 8, 1))


def _seconds(framework: str, run, x, rule: StopRule) -> float:
    sync = fw_device.sync_for(framework, "cpu")
    return float(measure_latency(run, [x], sync, rule, warmup=3).summary["p50"])


def empty_call_seconds(framework: str, rule: StopRule, seed: int = 0) -> float:
    """The median time of one call that does almost nothing: the framework's cost of a call."""
    return measure_kernel(framework, Kernel(MEMORY, (8, 1)), rule, seed, empty_s=0.0)


def call_cost(framework: str, empty_s: float) -> float:
    """What ``measure_kernel`` takes off each kernel of ``framework`` (see the module's note)."""
    return empty_s if framework == "jax" else 0.0


def measure_kernel(
    framework: str, kernel: Kernel, rule: StopRule, seed: int = 0, *, empty_s: float
) -> float:
    """Median seconds of one ``kernel`` call in ``framework`` ("torch" or "jax") on the CPU,
    less ``empty_s`` (``call_cost``), never below a floor of 10 ns."""
    rng = np.random.default_rng(seed)
    case = _jax_case if framework == "jax" else _torch_case
    run, x = case(kernel, rng)
    return max(_seconds(framework, run, x, rule) - empty_s, _FLOOR_S)


# matmuls (m, n, k) of the study's models: classifier heads, a ViT-B's projections and MLP,
# a late-stage 1x1 convolution run as a matmul
_DENSE = ((1, 1000, 512), (1, 1000, 1280), (1, 1000, 2048), (197, 768, 768), (197, 3072, 768),
          (197, 768, 3072), (49, 1024, 256))  # fmt: skip
# a ViT-B's attention core per head: scores (197 x 64 by 64 x 197) and the weighted sum
_ATTENTION = ((197, 197, 64), (197, 64, 197))
_HEADS = 12


def grid(framework: str, batch_sizes=(1, 8)) -> list[Kernel]:
    """The sweep: dense and depthwise convolutions over the output sizes and widths of the
    study's CNN stages, 1x1 to 7x7 filters at strides 1 and 2; matmuls from a classifier head to
    a transformer's MLP and attention; memory-bound kernels from 4 KiB to 256 MiB (chains of 1,
    3 and 8 fused ops in JAX; torch runs one op per kernel)."""
    kernels = []
    stages = ((112, 16), (56, 32), (28, 64), (14, 128), (7, 256), (4, 512), (2, 512))
    for batch, (out, width), k, stride in itertools.product(
        batch_sizes, stages, (1, 3, 5, 7), (1, 2)
    ):
        if k in (1, 3) and not (k == 1 and stride == 2 and out > 14):
            for cin, cout in ((width, width), (width, 4 * width), (4 * width, width)):
                kernels.append(conv_kernel(batch, cin, cout, k, k, stride, out, out, 1))
        if k > 1:
            dw = 4 * width if out <= 28 else width
            kernels.append(conv_kernel(batch, dw, dw, k, k, stride, out, out, dw))
    for batch, (m, n, k) in itertools.product(batch_sizes, _DENSE):
        kernels.append(Kernel(MATMUL, (1, batch * m, n, k)))
    for batch, (m, n, k) in itertools.product(batch_sizes, _ATTENTION):
        kernels.append(Kernel(MATMUL, (batch * _HEADS, m, n, k)))
    chains = (1, 3, 8) if framework == "jax" else (1,)
    for power, ops in itertools.product(range(12, 29, 2), chains):
        kernels.append(Kernel(MEMORY, (2**power, ops)))
    return list(dict.fromkeys(kernels))
