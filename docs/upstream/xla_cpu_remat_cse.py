"""On XLA:CPU, `jax.checkpoint` saves no memory: the compiled step holds as much as without it.

What it shows: a chain of `tanh(h @ w)` layers, differentiated under `jax.jit`, without
`jax.checkpoint` and with it around every run of `--segment` layers (the segments
`torch.utils.checkpoint` users write). With checkpointing, only each segment's input should stay
alive for the backward pass, which recomputes the inside; the buffers XLA plans for the step
(`compiled.memory_analysis().temp_size_in_bytes`) should shrink by about the segment length. On
XLA:CPU they do not shrink, they grow. The lowered program carries the recomputation (more dots,
and the `optimization_barrier`s `prevent_cse=True` adds); after XLA:CPU's passes the extra dots
are gone (common-subexpression elimination merges them with the forward pass's), and with the
`cse` pass disabled they stay but the planned memory is still not lower.

The script checks in float64 that the checkpointed gradients are the plain ones (so the program is
right, only its memory is not what checkpointing promises), then prints, per variant, the dots in
the lowered and the compiled program and the planned temporaries in MB.

Run: python xla_cpu_remat_cse.py [--tiny]; needs jax and numpy; a few seconds.

Measured on an AMD EPYC (cpu family 26, model 2), 2 cores, jax and jaxlib 0.10.2, fp32, 48
layers of 64 channels at batch 4096 (1 MiB of activation a layer), segments of 8:
  no checkpoint            dots 143 lowered, 143 compiled, temporaries 51.4 MB
  checkpoint every 8       dots 191 lowered, 143 compiled, temporaries 56.6 MB
  checkpoint, cse disabled dots 191 lowered, 191 compiled, temporaries 56.6 MB
Expected with checkpointing: about 6 segment inputs + 8 layers inside one segment = 14 MiB.
"""

import argparse
import platform

import jax
import jax.numpy as jnp
import numpy as np

SHAPES = {"full": (4096, 64, 48, 8), "tiny": (256, 16, 16, 4)}  # batch, width, layers, segment


def cpu_line() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            found = dict(
                line.split(":", 1) for line in info if ":" in line and line.split(":")[0].strip()
                in ("vendor_id", "cpu family", "model", "model name")
            )  # fmt: skip
        return "cpu: " + "; ".join(f"{k.strip()}: {v.strip()}" for k, v in found.items())
    except OSError:
        return f"cpu: vendor_id: {platform.processor() or 'unknown'}"


def segment(weights, h):
    for w in weights:
        h = jnp.tanh(h @ w)
    return h


def loss(weights, x, size: int):
    """The chain's loss; ``size`` > 0 puts ``jax.checkpoint`` around every ``size`` layers."""
    if size < 1:
        return jnp.mean(segment(weights, x) ** 2)
    h = x
    for start in range(0, len(weights), size):
        h = jax.checkpoint(segment)(weights[start : start + size], h)
    return jnp.mean(h**2)


def inputs(batch: int, width: int, layers: int, dtype):
    rng = np.random.default_rng(0)
    weights = [jnp.asarray(rng.standard_normal((width, width)) * 0.2, dtype) for _ in range(layers)]
    return weights, jnp.asarray(rng.standard_normal((batch, width)), dtype)


def check_same_function(batch, width, layers, size) -> float:
    """Largest absolute difference between the plain and the checkpointed gradients, float64."""
    with jax.enable_x64(True):
        weights, x = inputs(batch, width, layers, jnp.float64)
        plain = jax.grad(loss)(weights, x, 0)
        planned = jax.grad(loss)(weights, x, size)
        return max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(plain, planned, strict=True))


def planned(weights, x, size: int, options: dict) -> tuple[int, int, float]:
    """Dots in the lowered and the compiled program, and the planned temporaries in MB."""
    lowered = jax.jit(jax.grad(loss), static_argnums=2).lower(weights, x, size)
    compiled = lowered.compile(compiler_options=options)
    text = compiled.as_text()
    return (
        lowered.as_text().count("dot_general"),
        text.count(" dot("),
        compiled.memory_analysis().temp_size_in_bytes / 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small shapes: a few seconds")
    args = parser.parse_args()
    batch, width, layers, size = SHAPES["tiny" if args.tiny else "full"]
    print(cpu_line())
    print(f"jax {jax.__version__}; {layers} layers of {width} at batch {batch}, segments of {size}")
    diff = check_same_function(min(batch, 64), width, layers, size)
    print(f"float64 check: max absolute difference of the gradients {diff:.1e}")
    if diff > 1e-10:
        raise SystemExit("the checkpointed gradients differ from the plain ones")
    weights, x = inputs(batch, width, layers, jnp.float32)
    for name, seg, options in (
        ("no checkpoint", 0, {}),
        (f"checkpoint every {size}", size, {}),
        ("checkpoint, cse disabled", size, {"xla_disable_hlo_passes": "cse"}),
    ):
        lowered, compiled, temp = planned(weights, x, seg, options)
        print(f"{name:<26} dots {lowered} lowered, {compiled} compiled, temporaries {temp:.1f} MB")


if __name__ == "__main__":
    main()
