"""Device ceilings measured through each framework: peak matmul FLOP/s and copy bandwidth.

The roofline and MFU (computed by the analysis, 20_analysis) divide by these, so they are measured
on the same device, framework and precision as the benchmarks, never copied from a datasheet.
"""

from __future__ import annotations

import numpy as np

from fwbench.measure import device as fw_device
from fwbench.measure import precision
from fwbench.measure.timing import StopRule, measure_latency


def _torch_ops(device: str, prec: str):
    import torch

    dtype = precision.torch_dtype(prec)

    def matmul_case(n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
        return (lambda x: x @ b), [a]

    def copy_case(n_elems: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n_elems, generator=g).to(device=device, dtype=dtype)
        out = torch.empty_like(x)
        return (lambda v: torch.add(v, 1.0, out=out)), [x]

    def sync(_):
        fw_device.torch_sync(device)

    return matmul_case, copy_case, sync, torch.empty((), dtype=dtype).element_size()


def _jax_ops(device: str, prec: str):
    import jax

    dtype = precision.jax_dtype(prec)
    jdev = fw_device.jax_device(device)

    def matmul_case(n: int, seed: int):
        rng = np.random.default_rng(seed)
        a = jax.device_put(rng.standard_normal((n, n), dtype=np.float32), jdev).astype(dtype)
        b = jax.device_put(rng.standard_normal((n, n), dtype=np.float32), jdev).astype(dtype)
        f = jax.jit(lambda x, y: x @ y)
        f(a, b).block_until_ready()
        return (lambda x: f(x, b)), [a]

    def copy_case(n_elems: int, seed: int):
        rng = np.random.default_rng(seed)
        x = jax.device_put(rng.standard_normal(n_elems, dtype=np.float32), jdev).astype(dtype)
        f = jax.jit(lambda v: v + 1.0)  # reads and writes every element once, as torch.add does
        f(x).block_until_ready()
        return f, [x]

    return matmul_case, copy_case, fw_device.jax_sync, np.dtype(dtype).itemsize


def measure_ceilings(
    framework: str, device: str, prec: str, matmul_sizes: list[int], copy_mib: int, rule: StopRule
) -> dict:
    """Best median matmul TFLOP/s over the sizes tried, and copy bandwidth in GB/s."""
    ops = _torch_ops if framework == "torch" else _jax_ops
    matmul_case, copy_case, sync, itemsize = ops(device, prec)
    matmuls = []
    for n in matmul_sizes:
        fn, inputs = matmul_case(n, seed=n)
        timing = measure_latency(fn, inputs, sync, rule, warmup=3)
        s = timing.summary
        matmuls.append(
            {
                "size": n,
                "tflops": 2 * n**3 / s["p50"] / 1e12,
                "ci_low": 2 * n**3 / s["median_ci_high"] / 1e12,
                "ci_high": 2 * n**3 / s["median_ci_low"] / 1e12,
                "n": s["n"],
            }
        )
    n_elems = copy_mib * 2**20 // itemsize
    fn, inputs = copy_case(n_elems, seed=1)
    s = measure_latency(fn, inputs, sync, rule, warmup=3).summary
    copy = _bandwidth(2 * n_elems * itemsize, s)  # bytes read plus bytes written
    return {"matmul": matmuls, "copy": copy}


def _bandwidth(n_bytes: int, summary: dict) -> dict:
    """GB/s of moving ``n_bytes`` in the median call time, with the median's interval."""
    return {
        "bytes": n_bytes,
        "gbs": n_bytes / summary["p50"] / 1e9,
        "ci_low": n_bytes / summary["median_ci_high"] / 1e9,
        "ci_high": n_bytes / summary["median_ci_low"] / 1e9,
        "n": summary["n"],
    }


def host_device_bandwidth(copy_mib: int, rule: StopRule) -> dict[str, dict] | None:
    """Pinned host-to-device and device-to-host copy bandwidth (GB/s) through torch, which the
    memory family's swap plans need; None without a CUDA device (a CPU has no device memory
    to swap from)."""
    import torch

    if not torch.cuda.is_available():
        return None
    n_bytes = copy_mib * 2**20
    host = torch.empty(n_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")

    def sync(_):
        torch.cuda.synchronize()

    out = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        s = measure_latency(
            lambda v, d=dst: d.copy_(v, non_blocking=True), [src], sync, rule, warmup=3
        ).summary
        out[name] = _bandwidth(n_bytes, s)
    return out
