"""XLA:CPU's collectives cost per array: averaging a model's gradients across 2 CPU devices takes
far longer array by array than as one flattened buffer, although XLA combines either into one
variadic all-reduce.

What it shows: the gradients of ResNet-18's 62 parameter arrays (11.7 M floats), one copy per
device on 2 host-platform devices, averaged three ways: (per-leaf) `lax.pmean` on each array
inside `shard_map`, as data-parallel code writes it; (sharded) `jax.jit` over arrays sharded on
a device axis with a `NamedSharding`, reduced with `mean(0)`, the idiomatic form that leaves the
collective to XLA; (flattened) the arrays concatenated into one vector, one `pmean`, split back.
The compiled HLO of each is printed with its count of all-reduce instructions and their
operands: XLA's all-reduce combiner merges the per-array collectives into one (or few) variadic
all-reduces, so the difference is not in the graph but in how XLA:CPU's collective runtime
handles many operands.

Run: python xla_cpu_allreduce_per_array.py [--tiny] [--iters N]; needs only jax and numpy,
< 1 min. It checks in float64 that the three forms give the same average, then times them in
fp32, compiled ahead of time and interleaved call by call (median ms per call).

Measured on AMD EPYC (cpu family 25, model 17; 2 cores), jax/jaxlib 0.10.2, 2 host devices:
  see docs/upstream/README.md for the figures of the committed run.
"""

import argparse
import os
import statistics
import time
from pathlib import Path

# two host-platform devices: set before jax is imported, and only for this process
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

try:  # jax >= 0.6 has shard_map at the top level
    from jax import shard_map
except ImportError:  # pragma: no cover - older jax
    from jax.experimental.shard_map import shard_map

NAME = "all-reduce per array"


def resnet18_shapes():
    """ResNet-18's parameter arrays: convolution kernels, batch-norm scales and shifts, the
    classifier; 62 arrays."""
    shapes = [(7, 7, 3, 64), (64,), (64,)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            first = block == 0
            shapes += [(3, 3, cin if first else cout, cout), (cout,), (cout,)]
            shapes += [(3, 3, cout, cout), (cout,), (cout,)]
            if first and (stride != 1 or cin != cout):
                shapes += [(1, 1, cin, cout), (cout,), (cout,)]
        cin = cout
    return shapes + [(512, 1000), (1000,)]


SHAPES = resnet18_shapes()
TINY_SHAPES = [(3, 3, 4, 8), (8,), (8,), (3, 3, 8, 8), (8,), (8, 10)]


def gradients(shapes, dtype, devices=2, seed=0):
    """One gradient per device for each array, stacked on a leading device axis."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((devices, *s)).astype(dtype) for s in shapes]


def forms(mesh):
    """The three ways to average, each a function of the stacked gradients (a list)."""
    spec = P("d")

    def per_leaf(grads):
        return [lax.pmean(g, "d") for g in grads]

    def flattened(grads):
        flat = jnp.concatenate([g.ravel() for g in grads])
        flat = lax.pmean(flat, "d")
        out, start = [], 0
        for g in grads:
            out.append(flat[start : start + g.size].reshape(g.shape))
            start += g.size
        return out

    def mapped(f):
        # each device sees its own (1, ...) slice; the result is the same on every device
        body = shard_map(f, mesh=mesh, in_specs=spec, out_specs=spec)
        return lambda grads: [g[0] for g in body(grads)]

    def sharded(grads):
        return [g.mean(0) for g in grads]

    return {"per-leaf": mapped(per_leaf), "sharded": sharded, "flattened": mapped(flattened)}


def compiled_forms(mesh, grads):
    on_devices = NamedSharding(mesh, P("d"))
    placed = [jax.device_put(g, on_devices) for g in grads]
    built = {
        name: jax.jit(f).lower(placed).compile() for name, f in forms(mesh).items()
    }
    return built, placed


def check_same_average(shapes=SHAPES, tol=1e-12):
    """Max over arrays and forms of max|form - numpy mean| / max|mean| in float64."""
    worst = 0.0
    with jax.enable_x64(True):
        mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
        grads = gradients(shapes, np.float64, seed=1)
        built, placed = compiled_forms(mesh, grads)
        for name, f in built.items():
            for g, got in zip(grads, f(placed), strict=True):
                want = g.mean(0)
                assert got.dtype == jnp.float64 and got.shape == want.shape, (name, got.shape)
                scale = float(np.max(np.abs(want))) or 1.0
                worst = max(worst, float(np.max(np.abs(np.asarray(got) - want))) / scale)
    if not worst <= tol:
        raise AssertionError(f"the forms differ: max relative difference {worst:.2e}")
    return worst


def all_reduces(compiled):
    """The all-reduce instructions XLA:CPU runs, and how many arrays each carries."""
    lines = [ln for ln in compiled.as_text().splitlines() if "all-reduce(" in ln]
    return [ln.split("all-reduce(", 1)[1].split(")", 1)[0].count("%") or 1 for ln in lines]


def time_forms(built, args, iters=None, budget_s=2.0):
    """Median ms per call of each form, calls interleaved so drift hits all alike."""
    names = list(built)
    for _ in range(3):  # the first calls allocate buffers and wake the thread pool
        t0 = time.perf_counter()
        for n in names:
            jax.block_until_ready(built[n](args))
    iters = iters or min(200, max(5, int(budget_s / (time.perf_counter() - t0))))
    times = {n: [] for n in names}
    for r in range(iters):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            jax.block_until_ready(built[n](args))
            times[n].append((time.perf_counter() - t0) * 1e3)
    return {n: statistics.median(t) for n, t in times.items()}


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
    ap.description = __doc__
    ap.add_argument("--tiny", action="store_true", help="6 small arrays, few calls (CI)")
    ap.add_argument("--iters", type=int, help="timed calls per form (default: as many as fit in "
                    "about 2 s per form, 0.2 s with --tiny)")  # fmt: skip
    opts = ap.parse_args(argv)
    shapes = TINY_SHAPES if opts.tiny else SHAPES
    print(f"cpu: {describe_cpu()}")
    print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, devices {jax.devices()}")
    err = check_same_average(shapes=shapes)
    print(f"float64 check: max relative difference {err:.2e} <= 1e-12")
    mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
    built, placed = compiled_forms(mesh, gradients(shapes, np.float32))
    floats = sum(int(np.prod(s)) for s in shapes)
    print(f"{len(shapes)} arrays, {floats:,} floats per device")
    for name, f in built.items():
        ops = all_reduces(f)
        print(f"  {name:<10} {len(ops)} all-reduce instruction(s) carrying {ops} arrays")
    ms = time_forms(built, placed, opts.iters, 0.2 if opts.tiny else 2.0)
    for name, value in ms.items():
        print(f"  {name:<10} {value:9.3f} ms per call")
    print(
        f"sharded / flattened = {ms['sharded'] / ms['flattened']:.1f}x; "
        f"{NAME}: per-leaf / flattened = {ms['per-leaf'] / ms['flattened']:.1f}x "
        f"({len(shapes)} arrays)"
    )


if __name__ == "__main__":
    main()
