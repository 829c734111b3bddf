"""Models declared from outside the library: a campaign's ``models:`` section or a package's
entry points, by import path, so that nobody edits ``lib/`` to compare their own model.

A declaration is a mapping (DESIGN.md section 3)::

    tinycnn:
      torch: my_model.torch_side:build   # builder(num_classes) -> torch.nn.Module (required)
      flax: my_model.flax_twin           # build_flax(num_classes, *, rngs) and links(model)
      path: .                            # a folder put on sys.path (campaigns: from the file)
      image_size: 32                     # the native input size (default 224)
      kind: cnn                          # cnn or transformer (default cnn)
      label: TinyCNN                     # how tables and charts name it (default: its name)
      lineage: resnet                    # the lineage it is held out with (default: its own)

A declared model is an image classifier like the registry's: it takes a (batch, 3, H, W) batch
and returns (batch, num_classes) logits; its Flax twin takes the same batch channels-last. Its
parameter count and FLOPs are counted on the model itself (built on the meta device, so nothing
is allocated; FLOPs by torch's ``FlopCounterMode`` at one image of the native size), never taken
from the declaration: there is no key to give them.

``lineage`` names the architecture family the predictor's hold-outs leave out with the model
(``models.lineage``: a known one's name, such as ``resnet``, joins it; any other groups the
declared models that name it). Without it a declared model is a lineage of its own, whatever its
name starts with: ``resnet_mine`` says nothing about its blocks.

The declarations a campaign makes reach its notebooks' kernels (and their worker processes) as
JSON in ``FWBENCH_MODELS``; a package ships models through the ``fwbench.models`` entry-point
group, each entry point naming a model and loading to its mapping (``path`` is not needed there).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

_ENV_MODELS = "FWBENCH_MODELS"
_ENTRY_POINT_GROUP = "fwbench.models"
KEYS = {"torch", "flax", "path", "image_size", "kind", "label", "lineage"}
KINDS = ("cnn", "transformer")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_MODULE_RE = re.compile(r"^[A-Za-z_][\w.]*$")


class DeclarationError(ValueError):
    """A declaration that cannot be used: reported as one line, before anything runs."""


@dataclass(frozen=True)
class Declaration:
    name: str
    torch: str  # "module:builder"
    flax: str | None = None  # the twin's module
    path: str | None = None  # absolute, once parsed
    image_size: int = 224
    kind: str = "cnn"
    label: str | None = None
    lineage: str | None = None  # the hold-outs' group (``models.lineage``); None: its own

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "name" and v is not None}


@dataclass(frozen=True)
class Counted:
    """What the model itself says about its size: the parameters and the MACs of one image."""

    param_count: int
    gmacs: float


def parse(name: str, mapping, *, base: Path | None = None, where: str = "") -> Declaration:
    """A checked declaration; ``base`` resolves a relative ``path`` (a campaign file's folder)."""
    where = f"{where}: model {name!r}" if where else f"model {name!r}"
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise DeclarationError(
            f"{where}: a declared model's name is lower-case letters, digits and '_'"
        )
    if not isinstance(mapping, dict):
        raise DeclarationError(f"{where}: a declaration is a mapping with at least 'torch'")
    unknown = set(mapping) - KEYS
    if unknown:
        extra = (
            "; the parameter count and FLOPs are counted on the model, never declared"
            if unknown & {"param_count", "params", "gmacs", "flops"}
            else ""
        )
        raise DeclarationError(
            f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(KEYS)}{extra}"
        )
    torch_target = mapping.get("torch")
    if not isinstance(torch_target, str) or not _TARGET_RE.match(torch_target):
        raise DeclarationError(
            f"{where}: 'torch' must name a builder as 'module:function', got {torch_target!r}"
        )
    flax_module = mapping.get("flax")
    if flax_module is not None and not (
        isinstance(flax_module, str) and _MODULE_RE.match(flax_module)
    ):
        raise DeclarationError(f"{where}: 'flax' must name a module, got {flax_module!r}")
    image_size = mapping.get("image_size", 224)
    if not isinstance(image_size, int) or isinstance(image_size, bool) or image_size <= 0:
        raise DeclarationError(f"{where}: 'image_size' must be a positive integer")
    kind = mapping.get("kind", "cnn")
    if kind not in KINDS:
        raise DeclarationError(f"{where}: 'kind' must be one of {', '.join(KINDS)}")
    label = mapping.get("label")
    if label is not None and not isinstance(label, str):
        raise DeclarationError(f"{where}: 'label' must be text")
    lineage = mapping.get("lineage")
    if lineage is not None and not (isinstance(lineage, str) and lineage.strip()):
        raise DeclarationError(f"{where}: 'lineage' must be a name, such as resnet")
    path = mapping.get("path")
    if path is not None:
        folder = Path(path) if base is None else (base / str(path))
        if not folder.is_dir():
            raise DeclarationError(f"{where}: 'path' {path} is not a folder (looked for {folder})")
        path = str(folder.resolve())
    return Declaration(name, torch_target, flax_module, path, image_size, kind, label, lineage)


def _import(declaration: Declaration, module: str):
    if declaration.path and declaration.path not in sys.path:
        sys.path.insert(0, declaration.path)
    try:
        return importlib.import_module(module)
    except Exception as exc:  # any error importing the user's code is the declaration's
        raise DeclarationError(
            f"model {declaration.name!r}: cannot import {module!r} ({type(exc).__name__}: {exc})"
        ) from None


def builder(declaration: Declaration):
    module, attribute = declaration.torch.split(":")
    found = getattr(_import(declaration, module), attribute, None)
    if not callable(found):
        raise DeclarationError(
            f"model {declaration.name!r}: {module} has no function {attribute!r}"
        )
    return found


def flax_module(declaration: Declaration):
    """The twin's module, checked to have the two functions a twin needs."""
    module = _import(declaration, declaration.flax)
    missing = [f for f in ("build_flax", "links") if not callable(getattr(module, f, None))]
    if missing:
        raise DeclarationError(
            f"model {declaration.name!r}: the Flax twin {declaration.flax} lacks {missing}"
        )
    return module


def build(declaration: Declaration, num_classes: int = 1000):
    """The declared PyTorch model, checked to be one; the caller seeds its initialisation."""
    import torch

    model = builder(declaration)(num_classes=num_classes)
    if not isinstance(model, torch.nn.Module):
        raise DeclarationError(
            f"model {declaration.name!r}: {declaration.torch} returned "
            f"{type(model).__name__}, not a torch.nn.Module"
        )
    return model


def count(declaration: Declaration) -> Counted:
    """Parameters and GMACs from the model: built on the meta device (no memory, no weights),
    one image of the native size through ``FlopCounterMode`` (2 FLOPs per multiply-add)."""
    import torch

    size = declaration.image_size
    return count_module(
        lambda: build(declaration),
        lambda: torch.empty(1, 3, size, size, device="meta"),
        f"model {declaration.name!r}: one {size}px image",
    )


def count_module(make_model, make_input, what: str) -> Counted:
    """``make_model()`` built on the meta device: its parameters, and the GMACs of one call on
    ``make_input()`` (a meta tensor) by ``FlopCounterMode``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = make_model()
    params = sum(p.numel() for p in model.parameters())
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(make_input())
    except Exception as exc:  # the user's forward: any failure is the declaration's
        raise DeclarationError(
            f"{what} does not go through it ({type(exc).__name__}: {exc})"
        ) from None
    return Counted(int(params), counter.get_total_flops() / 2e9)


def to_environment(declarations: dict[str, Declaration]) -> dict[str, str]:
    """The kernel environment that carries ``declarations`` to a notebook (empty when none)."""
    if not declarations:
        return {}
    return {_ENV_MODELS: json.dumps({n: d.as_dict() for n, d in sorted(declarations.items())})}


def from_environment(environ=None) -> dict[str, Declaration]:
    text = (os.environ if environ is None else environ).get(_ENV_MODELS)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DeclarationError(f"{_ENV_MODELS} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DeclarationError(f"{_ENV_MODELS} must map model names to declarations")
    return {name: parse(name, mapping, where=_ENV_MODELS) for name, mapping in data.items()}


def from_entry_point(name: str) -> Declaration | None:
    """The declaration an installed package ships under ``name``, or None."""
    from importlib.metadata import entry_points

    for point in entry_points(group=_ENTRY_POINT_GROUP):
        if point.name == name:
            try:
                mapping = point.load()
            except Exception as exc:
                raise DeclarationError(
                    f"model {name!r}: entry point {point.value} does not load "
                    f"({type(exc).__name__}: {exc})"
                ) from None
            return parse(name, mapping, where=f"entry point {point.value}")
    return None
