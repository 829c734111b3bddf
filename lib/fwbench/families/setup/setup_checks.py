"""The checks behind notebooks/00_setup.py: can this machine run the study at all?"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass

import numpy as np

from fwbench.measure import precision

REQUIRED = ("torch", "torchvision", "jax", "flax", "optax", "papermill", "altair")
# Needed only where runs are indexed: a GPU node without it runs `fwbench run --no-index` (its
# offline kit carries no DuckDB) and its runs are indexed where the index lives.
OPTIONAL = ("duckdb",)


@dataclass
class _Check:
    name: str
    framework: str
    device: str
    passed: bool
    detail: str
    seconds: float = 0.0


def check_imports() -> list[_Check]:
    checks = []
    for name in REQUIRED + OPTIONAL:
        try:
            module = importlib.import_module(name)
            checks.append(
                _Check(f"import {name}", "-", "-", True, getattr(module, "__version__", "?"))
            )
        except Exception as exc:  # an import can fail with any error (e.g. torchvision's nms op)
            why = f"{type(exc).__name__}: {exc}"
            if name in OPTIONAL:
                why = f"absent ({why}); index this machine's runs elsewhere: fwbench ingest"
            checks.append(_Check(f"import {name}", "-", "-", name in OPTIONAL, why))
    return checks


def _reference_matmul(size: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    return a, b, (a.astype(np.float64) @ b.astype(np.float64))


def _matmul_check(framework: str, device: str, result: np.ndarray, ref: np.ndarray, secs: float):
    rel = float(np.abs(result - ref).max() / np.abs(ref).max())
    # fp32 with TF32 off accumulates to ~1e-6 relative at these sizes; TF32 would give ~1e-3
    return _Check(
        "fp32 matmul vs float64 numpy",
        framework,
        device,
        rel < 1e-5,
        f"max rel err {rel:.2e}",
        secs,
    )


def check_torch_matmul(device: str, size: int = 256, seed: int = 0) -> _Check:
    import torch

    precision.configure("torch", "fp32")
    a, b, ref = _reference_matmul(size, seed)
    t0 = time.perf_counter()
    out = (torch.from_numpy(a).to(device) @ torch.from_numpy(b).to(device)).cpu().numpy()
    return _matmul_check("torch", device, out, ref, time.perf_counter() - t0)


def check_jax_matmul(jax_device, device: str, size: int = 256, seed: int = 0) -> _Check:
    import jax
    import jax.numpy as jnp

    a, b, ref = _reference_matmul(size, seed)
    t0 = time.perf_counter()
    with jax.default_matmul_precision("highest"):
        x, y = jax.device_put(a, jax_device), jax.device_put(b, jax_device)
        out = np.asarray(jnp.matmul(x, y))
    return _matmul_check("jax", device, out, ref, time.perf_counter() - t0)


def check_xla_compile(jax_device, device: str) -> _Check:
    import jax
    import jax.numpy as jnp

    def f(x):
        return jnp.tanh(x @ x.T).sum()

    x = jax.device_put(jnp.ones((64, 64), jnp.float32) * 0.01, jax_device)
    t0 = time.perf_counter()
    try:
        # fp32 as the study means it: a GPU's default rounds the matmul to TF32 (1e-4 off)
        with jax.default_matmul_precision("highest"):
            lowered = jax.jit(f).lower(x)
        compiled = lowered.compile()
        value = float(compiled(x))
        want = float(np.tanh(np.full((64, 64), 64 * 1e-4)).sum())
        ok = np.isclose(value, want, rtol=1e-5)
        detail = f"AOT lower+compile ok, result {value:.4f}" + ("" if ok else f", not {want:.4f}")
    except Exception as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return _Check("XLA jit compile", "jax", device, bool(ok), detail, time.perf_counter() - t0)


def check_torch_compile(device: str) -> _Check:
    import torch

    def f(x):
        return torch.tanh(x @ x.T).sum()

    x = torch.full((64, 64), 0.01, device=device)
    t0 = time.perf_counter()
    try:
        torch._dynamo.reset()
        value = float(torch.compile(f)(x))
        ok = abs(value - float(f(x))) <= 1e-4 * abs(float(f(x)))
        detail = f"inductor compile ok, result {value:.4f}"
    except Exception as exc:
        ok, detail = False, f"{type(exc).__name__}: {str(exc)[:300]}"
    return _Check("torch.compile", "torch", device, bool(ok), detail, time.perf_counter() - t0)
