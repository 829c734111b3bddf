"""Numerical parity checks between a torchvision model and its Flax NNX twin.

Generic over every model that follows the registry contract (``build_flax`` + ``links``): logits
are compared on the same input (NCHW for torch, NHWC for Flax) and gradients are mapped to torch's
keys and layouts through the same ``Link.to_torch`` transforms that export weights, so a layout
bug in the port shows up here as a gradient mismatch rather than being compared away.

On a CPU, compilation dominates these checks. ``jit=True`` (the default) compiles the network
once per model and mode, cheapest for a CNN whose every layer has its own shapes; ``jit=False``
runs eagerly, compiling each distinct operation once, cheapest for a stack of identical
transformer layers that XLA would otherwise compile unrolled.

Float64 copies of both models (``torch_float64``, and ``flax_float64`` inside ``float64_on_cpu``)
compute the same function with rounding near 1e-16: where they agree to 1e-10, the port is right,
whatever fp32 rounding on a given CPU does.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from fwbench.measure import precision
from fwbench.models import porting


def max_rel_err(actual, reference) -> float:
    """max|actual - reference| / max|reference|: scale-free, and strict where values are large."""
    actual, reference = np.asarray(actual, np.float64), np.asarray(reference, np.float64)
    if actual.shape != reference.shape:
        raise ValueError(f"shape mismatch: {actual.shape} vs {reference.shape}")
    if not (np.isfinite(actual).all() and np.isfinite(reference).all()):
        return float("inf")  # NaN compares false to any tolerance and would otherwise slip through
    scale = np.abs(reference).max()
    diff = np.abs(actual - reference).max()
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return float(diff / scale)


def unlinked_variables(flax_model, links: list[porting.Link]) -> list[tuple]:
    """Paths of weights and statistics in the Flax model that no Link fills: should be empty."""
    linked = {id(link.variable) for link in links}
    return [
        path
        for path, node in nnx.iter_graph(flax_model)
        if isinstance(node, nnx.Param | nnx.BatchStat) and id(node) not in linked
    ]


def randomize_torch_(model, seed: int = 0) -> None:
    """Give every constant-initialised tensor random values, in place.

    torchvision starts BatchNorm at mean 0 / var 1 / weight 1 / bias 0 and zeroes some heads and
    tokens; with those values a swapped mean and var, or a head ported transposed, would still
    produce matching (or all-zero) logits. Randomly initialised weights are left as they are.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.is_floating_point():
                continue
            if name.endswith("running_var"):
                # variances must stay positive; this range keeps activations of deep nets finite
                tensor.copy_(torch.empty_like(tensor).uniform_(0.5, 2.0, generator=gen))
            elif name.endswith("running_mean"):
                tensor.copy_(0.2 * torch.randn(tensor.shape, generator=gen))
            elif tensor.numel() == 1 or bool((tensor == tensor.flatten()[0]).all()):
                tensor.add_(0.1 * torch.randn(tensor.shape, generator=gen))


@contextlib.contextmanager
def float64_on_cpu():
    """JAX with 64-bit types enabled and the CPU as its default device, for the block's duration.

    Scoped rather than global so the rest of a notebook keeps JAX's 32-bit defaults; on the CPU
    because some accelerators have no (or only emulated) float64.
    """
    with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
        yield


def flax_float64(flax_model):
    """A float64 copy of a Flax model on the CPU; call it inside ``float64_on_cpu()``.

    Without x64 JAX would silently keep float32 where float64 was asked for, so this refuses.
    """
    if not jax.config.jax_enable_x64:
        raise RuntimeError("flax_float64 needs JAX's x64 mode: call it inside float64_on_cpu()")
    graphdef, state = nnx.split(flax_model)
    state = jax.device_put(state, jax.devices("cpu")[0])
    return nnx.merge(graphdef, precision.cast_floating(state, jnp.float64))


def torch_float64(torch_model):
    """A float64 copy of a torch model on the CPU whose backward pass is float64 throughout.

    torch's float64 ``hardsigmoid`` backward multiplies by the float32 constant 1/6, 2.98e-8 off
    in relative terms: every gradient behind a MobileNetV3 squeeze-excitation gate would carry
    that error and fail a 1e-8 gate. The copy computes each ``nn.Hardsigmoid`` as relu6(x + 3) / 6
    from autograd ops: the same function, with an exact float64 backward.
    """
    import torch

    class Float64Hardsigmoid(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.relu6(x + 3.0) / 6.0

    model64 = copy.deepcopy(torch_model).to(device="cpu", dtype=torch.float64)
    for parent in model64.modules():
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.Hardsigmoid):
                setattr(parent, name, Float64Hardsigmoid())
    return model64


def _torch_input(torch_model, x_nchw):
    # follow the model's dtype so a float64 copy of the model can serve as the exact reference
    import torch

    dtype = next(torch_model.parameters()).dtype
    return torch.from_numpy(np.array(x_nchw, copy=True)).to(dtype)


def flax_float_dtype(flax_model):
    """The dtype of the Flax model's floating-point parameters (its inputs are cast to it)."""
    for leaf in jax.tree.leaves(nnx.state(flax_model, nnx.Param)):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf.dtype
    raise ValueError("the Flax model has no floating-point parameters")


def _flax_input(flax_model, x_nhwc):
    # follow the model's dtype, as ``_torch_input`` does, so a float64 twin gets float64 inputs
    return jnp.asarray(x_nhwc, flax_float_dtype(flax_model))


def _forward(model, x):
    return model(x)


_jit_forward = nnx.jit(_forward)


def torch_logits(torch_model, x_nchw: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return torch_model(_torch_input(torch_model, x_nchw)).numpy()


def flax_logits(flax_model, x_nchw: np.ndarray, *, jit: bool = True) -> np.ndarray:
    """The Flax model on the same batch as torch, given in torch's NCHW layout."""
    x_nhwc = _flax_input(flax_model, np.ascontiguousarray(np.asarray(x_nchw).transpose(0, 2, 3, 1)))
    return np.asarray((_jit_forward if jit else _forward)(flax_model, x_nhwc))


def compare_logits(
    torch_model, flax_model, x_nchw: np.ndarray, *, jit: bool = True
) -> tuple[float, np.ndarray]:
    """Run both models in their current train/eval mode; return (rel err, torch logits)."""
    reference = torch_logits(torch_model, x_nchw)
    return max_rel_err(flax_logits(flax_model, x_nchw, jit=jit), reference), reference


def torch_param_grads(torch_model) -> dict[str, np.ndarray]:
    """The ``.grad`` of every parameter after a backward pass, keyed like the state_dict."""
    grads = {}
    for name, param in torch_model.named_parameters():
        if param.grad is None:
            raise ValueError(f"{name} received no gradient; the model leaves a parameter unused")
        grads[name] = param.grad.detach().numpy().copy()
    return grads


def torch_grads(torch_model, x_nchw: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of the mean cross-entropy w.r.t. every parameter, keyed like the state_dict."""
    return torch_logits_and_grads(torch_model, x_nchw, labels)[1]


def torch_logits_and_grads(
    torch_model, x_nchw: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``torch_grads`` and the logits of the same forward pass (one pass instead of two)."""
    import torch
    import torch.nn.functional as F

    torch_model.zero_grad(set_to_none=True)
    logits = torch_model(_torch_input(torch_model, x_nchw))
    F.cross_entropy(logits, torch.from_numpy(np.asarray(labels, np.int64))).backward()
    return logits.detach().numpy(), torch_param_grads(torch_model)


def flax_param_grads(
    loss_fn, flax_model, links: list[porting.Link], *, jit: bool = True
) -> dict[str, np.ndarray]:
    """Gradients of ``loss_fn(flax_model)`` w.r.t. every linked Param, in torch keys and layouts.

    The layouts go through the same ``Link.to_torch`` transforms as exported weights, so a port
    that transposes or reorders a tensor wrongly shows up as a gradient mismatch. ``nnx.grad``
    writes batch-statistic updates back to the model, so in train mode the Flax model advances
    its running statistics just as the torch model does in ``torch_grads``.
    """
    grad_fn = nnx.jit(nnx.grad(loss_fn)) if jit else nnx.grad(loss_fn)
    return _in_torch_layout(grad_fn(flax_model), flax_model, links)


def _in_torch_layout(grads, flax_model, links: list[porting.Link]) -> dict[str, np.ndarray]:
    grad_by_path = {path: np.asarray(v.get_value()) for path, v in nnx.to_flat_state(grads)}
    path_by_var = {
        id(node): path for path, node in nnx.iter_graph(flax_model) if isinstance(node, nnx.Param)
    }
    return {
        link.key: link.to_torch(grad_by_path[path_by_var[id(link.variable)]])
        for link in links
        if isinstance(link.variable, nnx.Param)
    }


def flax_grads(
    flax_model,
    links_fn: Callable[[object], list[porting.Link]],
    x_nhwc: np.ndarray,
    labels: np.ndarray,
    *,
    jit: bool = True,
) -> dict[str, np.ndarray]:
    """The Flax counterpart of ``torch_grads``: mean cross-entropy, torch keys and layouts."""
    return flax_logits_and_grads(flax_model, links_fn, x_nhwc, labels, jit=jit)[1]


def flax_logits_and_grads(
    flax_model,
    links_fn: Callable[[object], list[porting.Link]],
    x_nhwc: np.ndarray,
    labels: np.ndarray,
    *,
    jit: bool = True,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``flax_grads`` and the logits of the same forward pass (one compile instead of two)."""
    x = _flax_input(flax_model, x_nhwc)
    y = jnp.asarray(labels, jnp.int32)
    fn = _jit_cross_entropy_grads if jit else _cross_entropy_grads
    logits, grads = fn(flax_model, x, y)
    return np.asarray(logits), _in_torch_layout(grads, flax_model, links_fn(flax_model))


def _cross_entropy_grads(model, x, labels):
    def loss_fn(model):
        logits = model(x)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1)), logits

    (_, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return logits, grads


_jit_cross_entropy_grads = nnx.jit(_cross_entropy_grads)


def grad_errors(
    actual: dict[str, np.ndarray], reference: dict[str, np.ndarray]
) -> dict[str, float]:
    """Per-tensor ``max_rel_err``; the two sides must cover exactly the same parameters."""
    if actual.keys() != reference.keys():
        missing = sorted(reference.keys() - actual.keys())
        extra = sorted(actual.keys() - reference.keys())
        raise KeyError(f"gradient keys differ: missing {missing[:5]}, extra {extra[:5]}")
    return {key: max_rel_err(actual[key], reference[key]) for key in reference}
