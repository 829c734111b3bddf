"""What notebooks/01_validation.py checks: same function, same weights, same FLOPs on both sides."""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd
from flax import nnx

from fwbench import device as fw_device
from fwbench import flops, precision
from fwbench.models import build_pair, get_spec
from fwbench.models.parity import max_rel_err, randomize_torch_


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


def logits_on_device(torch_model, flax_model, x_nchw: np.ndarray, kind: str, prec: str):
    """Both frameworks' eval logits (as float64 numpy) computed on ``kind`` in ``prec``."""
    import torch

    dtype = precision.torch_dtype(prec)
    tm = torch_model.to(device=kind, dtype=dtype).eval()
    with torch.no_grad():
        ref = tm(torch.from_numpy(x_nchw).to(device=kind, dtype=dtype)).float().cpu().numpy()
    jdev = fw_device.jax_device(kind)
    jdtype = precision.jax_dtype(prec)
    graphdef, state = nnx.split(flax_model)
    state = jax.device_put(precision.cast_floating(state, jdtype), jdev)
    x = jax.device_put(np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1)), jdev).astype(jdtype)
    out = jax.jit(lambda s, v: nnx.merge(graphdef, s)(v))(state, x)
    torch_model.to(device="cpu", dtype=torch.float32)
    return ref.astype(np.float64), np.asarray(out, dtype=np.float64)


def logit_errors(actual: np.ndarray, reference: np.ndarray) -> dict:
    return {
        "max_abs_err": float(np.abs(actual - reference).max()),
        "max_rel_err": max_rel_err(actual, reference),
        "top1_agreement": float(np.mean(actual.argmax(-1) == reference.argmax(-1))),
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


def torch_grads_fp64(torch_model, x_nchw: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """The same cross-entropy gradients as ``parity.torch_grads``, computed in float64.

    Deep CNN gradients have tensors whose entries nearly cancel (e.g. the bias of a BatchNorm
    followed by another normalisation); there fp32 rounding alone moves the result by more than
    1e-4 relative, in torch as much as in JAX. The fp64 result is the referee for those tensors.
    """
    import copy

    import torch
    import torch.nn.functional as F

    model64 = copy.deepcopy(torch_model).double()
    logits = model64(torch.from_numpy(np.asarray(x_nchw, np.float64)))
    F.cross_entropy(logits, torch.from_numpy(np.asarray(labels, np.int64))).backward()
    return {name: p.grad.numpy().copy() for name, p in model64.named_parameters()}


def grad_verdict(g_jax: dict, g_torch: dict, g_fp64: dict, tolerance: float) -> pd.DataFrame:
    """Per tensor: JAX vs torch, and both vs fp64; a tensor passes when JAX vs torch is within
    ``tolerance`` or JAX is no further from fp64 than 3x torch's own fp32 rounding error."""
    rows = []
    for key in g_torch:
        torch_vs_64 = max_rel_err(g_torch[key], g_fp64[key])
        jax_vs_64 = max_rel_err(g_jax[key], g_fp64[key])
        between = max_rel_err(g_jax[key], g_torch[key])
        rows.append(
            {
                "tensor": key,
                "jax_vs_torch": between,
                "torch_fp32_vs_fp64": torch_vs_64,
                "jax_fp32_vs_fp64": jax_vs_64,
                "passed": between <= tolerance or jax_vs_64 <= 3 * torch_vs_64,
            }
        )
    return pd.DataFrame(rows).sort_values("jax_vs_torch", ascending=False, ignore_index=True)
