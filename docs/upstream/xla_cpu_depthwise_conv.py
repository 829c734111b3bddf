"""XLA:CPU runs depthwise convolution about 10x slower than the same maths written as slices.

What it shows: a depthwise convolution (NHWC, feature_group_count = channels, k x k kernel,
stride s, padding (k-1)//2) as `jax.lax.conv_general_dilated`, which is what
`flax.nnx.Conv(feature_group_count=C)` lowers to, against pad + k*k strided slices, each times
its per-channel weight, summed. XLA fuses the rewrite into one loop; the stock convolution stays
a convolution (printed after XLA's passes) and is 6-20x slower on MobileNetV3-Small's layers.

Run: python xla_cpu_depthwise_conv.py [--tiny] [--iters N]; needs only jax and numpy, < 1 min.
It checks in float64 that both arms are the same function, then times both in fp32, compiled
ahead of time and interleaved call by call (median ms per call).

Measured on AMD EPYC (cpu family 25, model 17; 2 cores), jax/jaxlib 0.10.2, stock / rewrite:
  1x112x112x16 k3 s2 15.0x, 1x56x56x72 k3 s2 8.5x, 1x28x28x88 k3 s1 10.7x,
  1x14x14x96 k5 s2 6.2x, 1x7x7x576 k5 s1 12.8x; geometric mean 10.2x (three runs: 10.2-12.8x).

Related upstream issue: jax-ml/jax#23713 (depthwise convolution in flax.nnx.Conv much slower
than PyTorch on CPU).
"""

import argparse
import math
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax import lax

# (batch, height, width, channels, kernel, stride): depthwise layers of MobileNetV3-Small at 224 px
SHAPES = [(1, 112, 112, 16, 3, 2), (1, 56, 56, 72, 3, 2), (1, 28, 28, 88, 3, 1),
          (1, 14, 14, 96, 5, 2), (1, 7, 7, 576, 5, 1)]  # fmt: skip
TINY_SHAPES = [(1, 8, 8, 4, 3, 2), (2, 5, 5, 3, 5, 1)]
NAME, LABEL = "depthwise", "{}x{}x{}x{} k{} s{}"


def stock(x, w, stride):
    """x: NHWC; w: (k, k, 1, C), the HWIO kernel of a depthwise convolution."""
    p = (w.shape[0] - 1) // 2
    dims, groups = ("NHWC", "HWIO", "NHWC"), x.shape[-1]  # one group per channel
    return lax.conv_general_dilated(
        x, w, (stride,) * 2, [(p, p)] * 2, dimension_numbers=dims, feature_group_count=groups
    )


def window(xp, i, j, ho, wo, stride):
    """The pixels of the padded input xp that kernel tap (i, j) meets, one per output pixel."""
    n, _, _, c = xp.shape
    end = (n, i + (ho - 1) * stride + 1, j + (wo - 1) * stride + 1, c)
    return lax.slice(xp, (0, i, j, 0), end, (1, stride, stride, 1))


def rewrite(x, w, stride):
    """The same convolution as k*k strided windows of the padded input, each times its weight."""
    k = w.shape[0]
    p = (k - 1) // 2
    _, h, wd, _ = x.shape
    xp = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    ho, wo = (h + 2 * p - k) // stride + 1, (wd + 2 * p - k) // stride + 1
    terms = [window(xp, i, j, ho, wo, stride) * w[i, j, 0] for i in range(k) for j in range(k)]
    return sum(terms[1:], terms[0])


def inputs(shape, dtype, seed=0):
    n, h, w, c, k, _ = shape
    rng = np.random.default_rng(seed)
    x, kernel = rng.standard_normal((n, h, w, c)), rng.standard_normal((k, k, 1, c))
    return x.astype(dtype), kernel.astype(dtype)


def check_same_function(candidate=rewrite, shapes=SHAPES, tol=1e-10):
    """Max over shapes of max|stock - candidate| / max|stock| in float64; raises if above tol."""
    worst = 0.0
    with jax.enable_x64(True):  # float64 only for the check; the timing stays fp32
        for shape in shapes:
            x, w = (jnp.asarray(a) for a in inputs(shape, np.float64, seed=1))
            a = jax.jit(stock, static_argnums=2)(x, w, shape[-1])
            b = jax.jit(candidate, static_argnums=2)(x, w, shape[-1])
            assert x.dtype == jnp.float64 and a.shape == b.shape, (shape, a.shape, b.shape)
            worst = max(worst, float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a))))
    if not worst <= tol:
        raise AssertionError(f"rewrite differs from stock: max relative difference {worst:.2e}")
    return worst


def time_pair(fa, fb, args, iters=None, budget_s=2.0):
    """Median ms per call of each. Calls alternate so that drift and cache state hit both alike;
    without iters, as many as fit in about budget_s (5 to 500 per arm)."""
    for _ in range(3):  # the first calls allocate buffers and wake the thread pool
        t0 = time.perf_counter()
        fa(*args).block_until_ready(), fb(*args).block_until_ready()
    iters = iters or min(500, max(5, int(budget_s / (time.perf_counter() - t0))))
    times = ([], [])
    for r in range(iters):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            t0 = time.perf_counter()
            (fa, fb)[i](*args).block_until_ready()
            times[i].append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


def conv_hlo(compiled):
    """The convolution instruction as XLA:CPU runs it, after its HLO passes."""
    lines = [ln for ln in compiled.as_text().splitlines() if " convolution(" in ln]
    return lines[0].split(" = ", 1)[1].split(", metadata")[0] if lines else "(no convolution)"


def describe_cpu():
    try:  # the first processor's block names the model
        lines = Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
    except OSError:
        lines = []
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    keys = ("vendor_id", "cpu family", "model", "model name")
    return ", ".join(f"{k}: {fields.get(k, '?')}" for k in keys)


def main(argv=None):
    ap = argparse.ArgumentParser(formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.description = __doc__  # what it shows and what it measured, with the figures
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, few calls (CI smoke test)")
    ap.add_argument("--iters", type=int, help="timed calls per arm and shape (default: as many "
                    "as fit in about 2 s per shape, 0.2 s with --tiny)")  # fmt: skip
    opts = ap.parse_args(argv)
    shapes = TINY_SHAPES if opts.tiny else SHAPES
    print(f"cpu: {describe_cpu()}")
    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, devices {jax.devices()}")
    err = check_same_function(shapes=shapes)
    print(f"float64 check: max relative difference {err:.2e} <= 1e-10")
    ratios = []
    for shape in shapes:
        x, w = (jnp.asarray(a) for a in inputs(shape, np.float32))
        args = (x, w, shape[-1])
        fa, fb = (jax.jit(f, static_argnums=2).lower(*args).compile() for f in (stock, rewrite))
        ms_a, ms_b = time_pair(fa, fb, (x, w), opts.iters, 0.2 if opts.tiny else 2.0)
        ratios.append(ms_a / ms_b)
        print(f"  {LABEL.format(*shape):<24} stock {ms_a:8.3f} ms, rewrite {ms_b:7.3f} ms, "
              f"stock / rewrite = {ms_a / ms_b:5.2f}x")  # fmt: skip
        print(f"    stock after XLA passes: {conv_hlo(fa)}")
    gmean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    print(f"{NAME}: stock / rewrite = {gmean:.1f}x (geometric mean over {len(ratios)} layers)")


if __name__ == "__main__":
    main()
