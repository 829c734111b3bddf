"""What notebooks/01_validation.py checks: same function, same weights, same FLOPs on both sides.

"Same function" is proven in float64: JAX with x64 enabled and torch in ``.double()``, on the
CPU, with the same weights and inputs. There the two frameworks' rounding is ~1e-16, so logits
must agree to 1e-10 and every parameter gradient to 1e-8, and a port bug cannot hide below
rounding. fp32 agreement of an ill-conditioned network (ResNet-50 at random init) measures how a
CPU's kernels round (3e-7 on one Intel Xeon, 7e-3 on an AMD EPYC for the same gradient), so fp32
gradients are reported per tensor against the fp64 result, not gated.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pandas as pd
from flax import nnx

from fwbench.measure import device as fw_device
from fwbench.measure import flops, precision
from fwbench.models import build_pair, get_spec
from fwbench.models.equivalence import (
    flax_float64,
    flax_grads,
    flax_logits,
    flax_logits_and_grads,
    float64_on_cpu,
    grad_errors,
    max_rel_err,
    randomize_torch_,
    torch_float64,
    torch_grads,
    torch_logits,
    torch_logits_and_grads,
)


def prepare_pair(model: str, seed: int, image_size: int, randomize: bool = True):
    """The model pair with identical weights; ``randomize`` perturbs torchvision's constant inits.

    torchvision starts BatchNorm at mean 0 / var 1 and some tensors at constants; with those a
    swapped mean and variance would still agree, so the check runs on perturbed weights.
    """
    torch_model, _ = build_pair(model, seed=seed, image_size=image_size)
    if randomize:
        randomize_torch_(torch_model, seed)
    return build_pair(model, seed=seed, image_size=image_size, state_dict=torch_model.state_dict())


def param_counts(torch_model, flax_model) -> tuple[int, int]:
    n_torch = sum(p.numel() for p in torch_model.parameters())
    n_jax = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(flax_model, nnx.Param)))
    return n_torch, n_jax


def precision_flags() -> dict:
    """The precision settings in force now, on both sides (what a record should say was used)."""
    import torch

    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
        "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
    }


def logits_on_device(torch_model, flax_model, x_nchw: np.ndarray, kind: str, prec: str):
    """Both frameworks' eval logits (as float64 numpy) computed on ``kind`` in ``prec``.

    Runs under whatever TF32 flags are in force; ``fp32_reference_logits`` is the way to get fp32.
    Both models are left as they were: casting the torch model to bf16 and back in place would
    round its weights, and every later check would compare different weights.
    """
    import torch

    dtype = precision.torch_dtype(prec)
    tm = copy.deepcopy(torch_model).to(device=kind, dtype=dtype).eval()
    with torch.no_grad():
        ref = tm(torch.from_numpy(x_nchw).to(device=kind, dtype=dtype)).float().cpu().numpy()
    jdev = fw_device.jax_device(kind)
    jdtype = precision.jax_dtype(prec)
    graphdef, state = nnx.split(flax_model)
    state = jax.device_put(precision.cast_floating(state, jdtype), jdev)
    x = jax.device_put(np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1)), jdev).astype(jdtype)
    out = jax.jit(lambda s, v: nnx.merge(graphdef, s)(v))(state, x)
    return ref.astype(np.float64), np.asarray(out, dtype=np.float64)


def fp32_reference_logits(
    torch_model, flax_model, x_nchw: np.ndarray, kind: str, requested_precision: str
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Both sides' logits at fp32 with TF32 off, whatever precision the notebook runs at.

    Returns (torch logits, JAX logits, the precision flags in force while they were computed).
    The requested precision is applied again afterwards, also when the computation fails: a
    reference computed with TF32 still on would make a TF32 run's error read about zero.
    """
    precision.configure("torch", "fp32")
    precision.configure("jax", "fp32")
    try:
        torch_ref, jax_ref = logits_on_device(torch_model, flax_model, x_nchw, kind, "fp32")
        flags = precision_flags()
    finally:
        precision.configure("torch", requested_precision)
        precision.configure("jax", requested_precision)
    return torch_ref, jax_ref, flags


def float64_logits_and_grads(
    torch_model, flax_model, links_fn, x_nchw: np.ndarray, labels: np.ndarray | None
) -> dict:
    """Both sides' eval logits and (if ``labels`` is given) cross-entropy gradients in float64.

    Runs on the CPU whatever the notebook's device: some accelerators have no float64. The
    models are copied (``torch_float64``, ``flax_float64``); the originals stay float32. The
    returned ``jax_dtypes`` lists what JAX actually computed in, so a caller can prove x64 held.
    """
    with float64_on_cpu():
        torch64 = torch_float64(torch_model).eval()
        flax64 = flax_float64(flax_model)
        flax64.eval()
        if labels is None:
            result = {
                "torch_logits": torch_logits(torch64, x_nchw),
                "jax_logits": flax_logits(flax64, x_nchw),
            }
        else:
            x_nhwc = np.ascontiguousarray(np.asarray(x_nchw).transpose(0, 2, 3, 1))
            t_logits, t_grads = torch_logits_and_grads(torch64, x_nchw, labels)
            j_logits, j_grads = flax_logits_and_grads(flax64, links_fn, x_nhwc, labels)
            result = {
                "torch_logits": t_logits,
                "jax_logits": j_logits,
                "torch_grads": t_grads,
                "jax_grads": j_grads,
            }
    jax_arrays = [result["jax_logits"], *result.get("jax_grads", {}).values()]
    result["jax_dtypes"] = sorted({str(a.dtype) for a in jax_arrays})
    return result


def fp32_grads(torch_model, flax_model, links_fn, x_nchw, labels, requested_precision: str):
    """Both sides' fp32 cross-entropy gradients on the CPU, TF32 off, as (torch, JAX) dicts."""
    precision.configure("torch", "fp32")
    precision.configure("jax", "fp32")
    try:
        with jax.default_device(jax.devices("cpu")[0]):
            g_torch = torch_grads(torch_model.cpu().float().eval(), x_nchw, labels)
            flax_model.eval()
            x_nhwc = np.ascontiguousarray(np.asarray(x_nchw).transpose(0, 2, 3, 1))
            g_jax = flax_grads(flax_model, links_fn, x_nhwc, labels)
    finally:
        precision.configure("torch", requested_precision)
        precision.configure("jax", requested_precision)
    return g_torch, g_jax


def logit_errors(actual: np.ndarray, reference: np.ndarray) -> dict:
    return {
        "max_abs_err": float(np.abs(actual - reference).max()),
        "max_rel_err": max_rel_err(actual, reference),
        "top1_agreement": float(np.mean(actual.argmax(-1) == reference.argmax(-1))),
    }


def grad_table(
    jax64: dict, torch64: dict, jax32: dict | None = None, torch32: dict | None = None
) -> pd.DataFrame:
    """One row per parameter tensor, worst fp64 disagreement first.

    ``fp64_jax_vs_torch`` is the gate. ``scale`` is the tensor's largest fp64 gradient entry
    relative to the network's largest, which says where a small gradient makes relative errors
    large. Given fp32 gradients, the row also measures each side's fp32 error against the fp64
    result (torch's, the reference) and the fp32 JAX-vs-torch difference.
    """
    columns = {"fp64_jax_vs_torch": grad_errors(jax64, torch64)}
    if jax32 is not None and torch32 is not None:
        columns["fp32_jax_vs_torch"] = grad_errors(jax32, torch32)
        columns["jax_fp32_vs_fp64"] = grad_errors(jax32, torch64)
        columns["torch_fp32_vs_fp64"] = grad_errors(torch32, torch64)
    largest = max(float(np.abs(g).max()) for g in torch64.values())
    rows = [
        {
            "tensor": key,
            "scale": float(np.abs(torch64[key]).max()) / largest if largest else 0.0,
            **{name: errors[key] for name, errors in columns.items()},
        }
        for key in torch64
    ]
    return pd.DataFrame(rows).sort_values(
        "fp64_jax_vs_torch", ascending=False, ignore_index=True, kind="stable"
    )


def worst(table: pd.DataFrame, column: str) -> tuple[float, str]:
    """The largest value of ``column`` and the tensor it belongs to."""
    row = table.loc[table[column].idxmax()]
    return float(row[column]), str(row["tensor"])


def per_tensor(table: pd.DataFrame) -> dict[str, dict]:
    """``grad_table`` as {tensor: {column: value}} for a record; non-finite values become None."""
    return {
        str(row.pop("tensor")): {k: float(v) if np.isfinite(v) else None for k, v in row.items()}
        for row in table.to_dict(orient="records")
    }


def count_flops(torch_model, flax_model, batch_size: int, image_size: int) -> dict:
    """Forward FLOPs per image from torch's FlopCounterMode and XLA's cost analysis (fp32, CPU)."""
    import torch

    x = np.random.default_rng(0).standard_normal((batch_size, 3, image_size, image_size))
    x = x.astype(np.float32)
    f_torch = flops.torch_forward_flops(torch_model.cpu().float().eval(), torch.from_numpy(x))
    graphdef, state = nnx.split(flax_model)
    lowered = jax.jit(lambda s, v: nnx.merge(graphdef, s)(v)).lower(state, x.transpose(0, 2, 3, 1))
    f_jax = flops.xla_cost(lowered.compile())["flops"]
    f_jax_mm = flops.xla_matmul_conv_flops(lowered.as_text())
    return {
        "flops_torch": f_torch / batch_size,
        "flops_jax": f_jax / batch_size,
        "flops_jax_matmul_conv": f_jax_mm / batch_size,
    }


def published_flops(model: str, image_size: int) -> float:
    """2 x torchvision's published GMACs, scaled for CNNs by input area (exact only at 224)."""
    spec = get_spec(model)
    return 2 * spec.gmacs * 1e9 * (image_size / spec.image_size) ** 2
