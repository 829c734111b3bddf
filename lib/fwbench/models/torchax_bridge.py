"""Any PyTorch model as a JAX function, through torchax: the same weights, PyTorch's own graph
lowered to XLA (``torchax.extract_jax``), proven equal to PyTorch eager in float64 before use.

torchax 0.0.13 (the newest on PyPI) does not import with the torch this project pins: at import
and on first use it names aten overloads torch has since removed (the named-tensor ``Dimname``
overloads, ``aten.cholesky``, ``aten.qr``), only as keys of its tables. ``load`` imports it with
those lookups answered by inert placeholders, then puts torch's lookups back; ``SHIMMED`` lists
the names that needed one (empty: the shim can go). torchax also registers its "jax" device as
available, after which ``torch.compile`` fails in that process; ``load`` reports it unavailable
again, and forbids ``torch.compile`` in the process all the same: fwbench times torch.compile
and torchax in separate kernels, so neither pays for the other's patches.

torchax 0.0.13 also loses an in-place write through a slice view when the in-place op is one it
runs as PyTorch's decomposition (``b[2:4].zero_()`` leaves ``b`` as it was; torchvision's Swin V2
zeroes its key bias so): ``load`` registers those ops as writing through views
(``_keep_view_writes``), and ``VIEW_WRITES`` names them. docs/upstream/torchax_slice_view_write.py
shows the bug on stock torchax; when it no longer does, this shim can go.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

import numpy as np

# torchax's modules that name aten ops but are imported only when its environment is first built
_LATE_MODULES = (
    "decompositions",
    "ops.jaten",
    "ops.jtorch",
    "ops.jc10d",
    "ops.jtorchvision_nms",
    "ops.jimage",
    "export",
    "interop",
)
# the same-function bar of the float64 proof, relative to the largest logit
FLOAT64_TOLERANCE = 1e-10

SHIMMED: list[str] = []
# the in-place ops made to write through slice views in torchax's default environment
VIEW_WRITES: list[str] = []


class TorchaxUnavailable(RuntimeError):
    """torch.compile asked for in a process that imported torchax."""


class _Absent:
    """Stands for an aten op or overload this torch no longer has: hashable, equal only to
    itself, so a table keyed by it never matches a real op."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, key: str):
        if key.startswith("__"):
            raise AttributeError(key)
        return _Absent(f"{self.name}.{key}")

    def __repr__(self) -> str:
        return f"<aten op absent from this torch: {self.name}>"


@contextlib.contextmanager
def _absent_aten_names(found: list[str]):
    from torch import _ops

    namespace_get = _ops._OpNamespace.__getattr__
    packet_get = _ops.OpOverloadPacket.__getattr__

    def namespace_getattr(self, name):
        try:
            return namespace_get(self, name)
        except AttributeError:
            if name.startswith("__") or self.name != "aten":
                raise
            found.append(f"aten.{name}")
            return _Absent(f"aten.{name}")

    def packet_getattr(self, key):
        try:
            return packet_get(self, key)
        except AttributeError:
            if key.startswith("__"):
                raise
            found.append(f"{self}.{key}")
            return _Absent(f"{self}.{key}")

    _ops._OpNamespace.__getattr__ = namespace_getattr
    _ops.OpOverloadPacket.__getattr__ = packet_getattr
    try:
        yield
    finally:
        _ops._OpNamespace.__getattr__ = namespace_get
        _ops.OpOverloadPacket.__getattr__ = packet_get


def _no_compile(*_args, **_kwargs):
    raise TorchaxUnavailable(
        "torch.compile in a process that imported torchax: fwbench runs the two in separate "
        "kernels (torchax's device registration changes what torch.compile sees)"
    )


def load():
    """torchax, imported with the shim (once per process); torch.compile refuses from here on."""
    if "torchax" in sys.modules:
        return sys.modules["torchax"]
    import torch

    found: list[str] = []
    with _absent_aten_names(found):
        torchax = importlib.import_module("torchax")
        for name in _LATE_MODULES:
            importlib.import_module(f"torchax.{name}")
    SHIMMED[:] = sorted(set(found))
    VIEW_WRITES[:] = _keep_view_writes(torchax.default_env())  # the env extract_jax uses
    torchax.device_module.is_available = lambda: False
    torch.compile = _no_compile
    return torchax


def _written(op) -> list[tuple[int, str]]:
    """(position, name) of each argument ``op`` writes to, from its schema: ``self`` of an
    in-place op, ``out`` of an out= variant."""
    schema = getattr(op, "_schema", None)
    arguments = schema.arguments if schema is not None else []
    return [(i, a.name) for i, a in enumerate(arguments) if a.alias_info and a.alias_info.is_write]


def _keep_view_writes(env) -> list[str]:
    """Makes each in-place op that ``env`` runs as PyTorch's decomposition write through a
    slice view, as torchax's own in-place ops do; returns their names.

    Why it is needed: ``b[2:4]`` is a torchax ``View`` (view.py: a parent and a slice), and
    ``Environment.dispatch`` (tensor.py) gives an op not registered as a view op a copy of each
    View argument (``v2t_iso``, i.e. ``View.torch()``). A decomposition such as ``aten.zero_``'s
    then zeroes the copy and the parent never changes. torchax's own in-place ops (``copy_``,
    ``InplaceOp``) are view ops and write back with ``View.update``; ``force_materialize_views``
    does not help, as it turns ``b[2:4]`` itself into a copy. The override goes through torchax's
    public ``override_op_definition``, and only where the decomposition is what would run."""
    from torchax.decompositions import DECOMPOSITIONS

    kept = []
    for op, decomposition in DECOMPOSITIONS.items():
        written = _written(op)
        if not written or env._get_op_or_decomp(op).func is not decomposition:
            continue
        env.override_op_definition(op, _through_views(env, decomposition, written), is_view_op=True)
        kept.append(str(op))
    return sorted(kept)


def _through_views(env, decomposition, written):
    """``decomposition``, run on copies of its View arguments as torchax would run it, whose new
    values are then written back into the views' parents (``View.update``)."""
    from torchax.view import View

    def run(*args, **kwargs):
        args, kwargs = list(args), dict(kwargs)
        pairs = []  # (a View written to, the copy the decomposition writes instead)
        for position, name in written:
            box, key = (args, position) if position < len(args) else (kwargs, name)
            if (box is args or key in box) and isinstance(box[key], View):
                pairs.append((box[key], box[key].torch()))
                box[key] = pairs[-1][1]
        # the other View arguments become copies, as dispatch makes them for a non-view op
        args, kwargs = env.v2t_iso((args, kwargs))
        result = decomposition(*args, **kwargs)
        for view, copy in pairs:
            view.update(copy)
        # an in-place op returns what it wrote to: the view, not the copy
        return next((view for view, copy in pairs if result is copy), result)

    return run


def jax_function(model):
    """(weights, fn): ``fn(weights, x)`` runs ``model`` as a pure JAX function of its weights."""
    torchax = load()
    weights, fn = torchax.extract_jax(model)
    return weights, lambda w, x: fn(w, (x,))


def float64_agreement(model, x) -> float:
    """The largest |torchax − PyTorch eager| over the largest |eager| logit, both in float64.

    ``model`` and ``x`` (a torch tensor) are cast to float64; JAX's 64-bit mode must be on, and
    the JAX output must come back in float64, or the proof would be of float32."""
    import jax
    import torch

    if not jax.config.jax_enable_x64:
        raise ValueError("the float64 proof needs jax_enable_x64 on (jax.config.update)")
    model = model.double().eval()
    x = x.double() if x.is_floating_point() else x  # token ids stay integers
    with torch.no_grad():
        want = model(x).numpy()
    weights, fn = jax_function(model)
    got = jax.jit(fn)(weights, jax.numpy.asarray(x.numpy()))
    got = np.asarray(jax.block_until_ready(got))
    if got.dtype != np.float64:
        raise ValueError(f"torchax returned {got.dtype}, not float64")
    scale = np.max(np.abs(want))
    if not scale > 0:
        raise ValueError(
            "PyTorch's logits are all zero: they prove nothing (give the model weights)"
        )
    return float(np.max(np.abs(got - want)) / scale)


def without_zero_weights(model, seed: int = 0):
    """A copy of ``model`` whose all-zero parameters (a zero-initialised classifier head, as
    torchvision's ViT has, or zero biases) are drawn afresh: the same function of other weights,
    whose logits are not all zero, so a proof on it compares something."""
    import copy

    import torch

    model = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.numel() and not param.any():
                param.copy_(torch.randn(param.shape, generator=gen, dtype=param.dtype) * 0.02)
    return model
