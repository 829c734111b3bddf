"""XLA:CPU across processes: an all-reduce of many gradient arrays costs per array, although the
compiled HLO holds one all-reduce for all of them.

What it shows: two processes on one machine (``jax.distributed.initialize`` on localhost, one CPU
device each, JAX's default CPU collectives) average a pytree shaped like a small CNN's gradients
(by default 151 float32 arrays of 1.8 M values, most of them small, as a mobile CNN's) in three forms
written as a JAX user would:
  per-leaf   ``shard_map`` with one ``jax.lax.pmean`` per array (what data parallelism reads as)
  sharded    ``jax.jit`` of a mean over a ``NamedSharding``-sharded leading axis, replicated out
  flattened  ``shard_map`` of one ``pmean`` over ``ravel_pytree``'s single vector
Each is checked to give the same averages in float64, then timed in float32, interleaved, per
call (median of the calls). The script also counts the all-reduce instructions in each
executable's optimised HLO and the arrays each one carries. On jaxlib 0.10.2 XLA combines the
per-leaf form into a few variadic all-reduces, yet that form and the sharded one cost many times
the flattened one: the time goes in the CPU collectives' runtime, per array, not in the number of
all-reduce instructions the program asks for.

Run: python xla_cpu_allreduce_per_array.py   (starts its two worker processes itself; needs jax
and numpy; about 10 s on an idle machine; --tiny: 20 small arrays, a few seconds)

Measured on AMD EPYC (cpu family 26, model 2; 2 cores, nothing else running), jax/jaxlib 0.10.2,
three runs: per-leaf 44-62 ms a call, sharded 41-48 ms, flattened 6.1-7.3 ms (per-leaf 7.1-9.9x
and sharded 5.7-7.9x the flattened form); in each, the per-leaf and sharded executables hold one
all-reduce carrying all 151 arrays. With a test suite running beside the two processes, both
forms took about 580 ms and the flattened one 12-14 ms (43-49x).
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

FORMS = ("per-leaf", "sharded", "flattened")


def shapes(tiny: bool) -> list[tuple[int, ...]]:
    """A small mobile CNN's gradient shapes: depthwise and 1x1 kernels, per-channel scales and
    biases, and a two-layer classifier; most arrays are small, as in MobileNetV3-Small."""
    if tiny:
        return [(16, 16, 3, 3), (16,), (16,)] * 6 + [(1000, 64), (1000,)]
    out = []
    for i in range(49):
        c = 16 * (1 + i // 7)  # 16 to 112 channels
        out += [(c, 1, 3, 3) if i % 2 else (c, c, 1, 1), (c,), (c,)]
    return out + [(1024, 576), (1024,), (1000, 1024), (1000,)]


def worker(rank: int, port: int, tiny: bool, calls: int) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.distributed.initialize(f"127.0.0.1:{port}", 2, rank)
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("d",))
    rep, lead = NamedSharding(mesh, P()), NamedSharding(mesh, P("d"))

    def per_leaf(tree):
        return jax.tree.map(lambda a: jax.lax.pmean(a, "d"), tree)

    def flattened(tree):
        flat, unflatten = ravel_pytree(tree)
        return unflatten(jax.lax.pmean(flat, "d"))

    def mapped(body):
        # each process's shard is its own gradients; the averaged tree comes back replicated
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P()))

    fns = {
        "per-leaf": mapped(lambda t: per_leaf(jax.tree.map(lambda a: a[0], t))),
        "sharded": jax.jit(lambda t: jax.tree.map(lambda a: a.mean(0), t), out_shardings=rep),
        "flattened": mapped(lambda t: flattened(jax.tree.map(lambda a: a[0], t))),
    }

    def tree_of(dtype):
        rng = np.random.default_rng(rank)
        local = [rng.standard_normal((1, *s)).astype(dtype) for s in shapes(tiny)]
        return [jax.make_array_from_process_local_data(lead, a, (2, *a.shape[1:])) for a in local]

    def wanted(dtype):  # both processes' draws, averaged on the host
        draws = [np.random.default_rng(r) for r in (0, 1)]
        per = [[g.standard_normal(s).astype(dtype) for s in shapes(tiny)] for g in draws]
        return [(a + b) / 2 for a, b in zip(*per, strict=True)]

    proof = {}
    t64 = tree_of(np.float64)
    for name, fn in fns.items():
        got = [np.asarray(a.addressable_data(0)) for a in fn(t64)]
        proof[name] = max(
            float(np.max(np.abs(g - w))) for g, w in zip(got, wanted(np.float64), strict=True)
        )
    wrong = {name: err for name, err in proof.items() if err > 1e-12}
    if wrong:  # not the same averages: timing them would compare different functions
        sys.exit(f"rank {rank}: float64 averages differ from the host's: {wrong}")
    t32 = tree_of(np.float32)
    hlo = {}
    for name, fn in fns.items():
        text = fn.lower(t32).compile().as_text()
        # each all-reduce instruction's result type: one array, or a tuple of the arrays it carries
        ops = re.findall(r"^\s*%\S+ = (.*?) all-reduce(?:-start)?\(", text, re.MULTILINE)
        hlo[name] = (len(ops), sum(len(re.findall(r"\b[a-z]+\d*\[", o)) for o in ops))
        jax.block_until_ready(fn(t32))  # warm
    times = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():  # interleaved, so drift hits every form alike
            start = time.perf_counter()
            jax.block_until_ready(fn(t32))
            times[name].append((time.perf_counter() - start) * 1e3)
    if rank == 0:
        n, values = len(shapes(tiny)), sum(int(np.prod(s)) for s in shapes(tiny))
        print(f"{n} float32 arrays, {values / 1e6:.2f} M values, 2 processes, {calls} calls each")
        flat = float(np.median(times["flattened"]))
        for name in fns:
            ms = float(np.median(times[name]))
            print(f"  {name:<10} {ms:8.2f} ms a call ({ms / flat:5.1f}x flattened); "
                  f"HLO: {hlo[name][0]} all-reduce(s) over {hlo[name][1]} arrays; "
                  f"float64 max error {proof[name]:.1e}")  # fmt: skip
    jax.distributed.shutdown()


def describe_cpu() -> str:
    try:  # the first processor's block names the model
        lines = Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
    except OSError:
        lines = []
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    keys = ("vendor_id", "cpu family", "model", "model name")
    return ", ".join(f"{k}: {fields.get(k, '?')}" for k in keys)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.description = __doc__
    ap.add_argument("--tiny", action="store_true", help="20 small arrays, 5 calls: a few seconds")
    ap.add_argument("--calls", type=int, default=20, help="timed calls per form (default 20)")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    calls = 5 if args.tiny else args.calls
    if args.rank is not None:
        worker(args.rank, args.port, args.tiny, calls)
        return 0
    with socket.socket() as s:  # a free port for the coordinator
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import jax

    print(f"cpu: {describe_cpu()}; jax {jax.__version__}")
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, __file__, "--port", str(port), "--calls", str(calls)]
    cmd += ["--tiny"] if args.tiny else []
    # each worker's stdout apart, so that gloo's connection lines never split rank 0's table
    procs = [
        subprocess.Popen([*cmd, "--rank", str(r)], env=env, stdout=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    print("".join(ln for ln in outs[0].splitlines(True) if not ln.startswith("[Gloo]")), end="")
    return max(p.returncode for p in procs)


if __name__ == "__main__":
    sys.exit(main())
