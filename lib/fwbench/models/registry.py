"""The one registry of models. Adding a model with a Flax twin means adding one ``ModelSpec`` here.

Each entry of ``MODELS`` names the torchvision builder (the PyTorch reference), the module holding
the native Flax NNX twin with its weight converter, the keyword arguments that select the variant
(a depth, a patch size, a width), and torchvision's published metadata. Flax modules are imported
lazily so that ``import fwbench`` stays cheap and torch-only users never import JAX.

Any other torchvision classification model is accepted on the PyTorch side only: ``get_spec``
builds its spec from torchvision's own metadata (``get_model_weights``, read without downloading
anything), and ``require_twin`` turns a request for its JAX side into one clear message.

A model from outside the library (``fwbench.models.declared``: a campaign's ``models:`` section,
``FWBENCH_MODELS`` in a kernel, or a package's entry point) gets a spec whose parameter count and
GMACs are counted on the model itself; ``declare`` registers it in this process.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass

from fwbench.models import declared


@dataclass(frozen=True)
class ModelSpec:
    name: str  # torchvision's name
    kind: str  # "cnn" or "transformer"
    param_count: int  # torchvision's count, which both sides must equal
    gmacs: float  # torchvision's published GMACs at ``image_size`` (FLOPs ~ 2 x MACs)
    image_size: int  # native input size
    flax_module: str | None  # module with build_flax(num_classes, *, rngs, ...) and links(model)
    label: str  # how tables, charts and sentences name it
    flax_kwargs: tuple = ()  # (name, value) pairs build_flax takes to build this variant
    declaration: declared.Declaration | None = None  # a model from outside the library
    builder: str | None = None  # "module:function" building a non-torchvision library model
    inputs: str = "image"  # what one input is: "image", "tokens" or "audio" (samples)

    @property
    def has_twin(self) -> bool:
        return self.flax_module is not None

    @property
    def published(self) -> bool:
        """Whether ``param_count`` and ``gmacs`` are torchvision's published figures (a declared
        model's are counted on the model, so checking the model against them proves nothing)."""
        return self.declaration is None and self.builder is None

    def input_shape(self, batch_size: int, size: int | None = None) -> tuple:
        """One batch's shape: images NCHW, token ids or audio samples (batch, length)."""
        size = size or self.image_size
        return (batch_size, 3, size, size) if self.inputs == "image" else (batch_size, size)

    def size_kwargs(self, image_size: int | None) -> dict:
        """Builder kwargs for a non-native input size; only a ViT's architecture depends on it
        (its position embedding has one entry per patch). Other transformers, such as Swin, take
        any size without being rebuilt."""
        if image_size is None or not self.name.startswith("vit_"):
            return {}
        return {"image_size": image_size}

    def torch_model(self, num_classes: int = 1000, *, image_size: int | None = None):
        """The torchvision reference with random (seeded by the caller) initialisation."""
        if self.declaration is not None:
            return declared.build(self.declaration, num_classes)
        if self.builder is not None:
            module, function = self.builder.split(":")
            return getattr(importlib.import_module(module), function)(num_classes)
        import torchvision

        builder = getattr(torchvision.models, self.name)
        return builder(weights=None, num_classes=num_classes, **self.size_kwargs(image_size))

    def flax_impl(self):
        require_twin(self.name)
        if self.declaration is not None:
            return declared.flax_module(self.declaration)
        return importlib.import_module(self.flax_module)

    def build_flax(self, num_classes: int, *, rngs, **size_kwargs):
        return self.flax_impl().build_flax(
            num_classes, rngs=rngs, **dict(self.flax_kwargs), **size_kwargs
        )


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "resnet50", "cnn", 25_557_032, 4.089, 224, "fwbench.models.flax_resnet", "ResNet-50"
        ),
        ModelSpec(
            "resnet18",
            "cnn",
            11_689_512,
            1.814,
            224,
            "fwbench.models.flax_resnet",
            "ResNet-18",
            (("depth", 18),),
        ),
        ModelSpec(
            "resnet34",
            "cnn",
            21_797_672,
            3.664,
            224,
            "fwbench.models.flax_resnet",
            "ResNet-34",
            (("depth", 34),),
        ),
        ModelSpec(
            "resnet101",
            "cnn",
            44_549_160,
            7.801,
            224,
            "fwbench.models.flax_resnet",
            "ResNet-101",
            (("depth", 101),),
        ),
        ModelSpec(
            "resnet152",
            "cnn",
            60_192_808,
            11.514,
            224,
            "fwbench.models.flax_resnet",
            "ResNet-152",
            (("depth", 152),),
        ),
        # a grouped 3x3 convolution (ResNeXt) and a twice-wider one (Wide ResNet)
        ModelSpec(
            "resnext50_32x4d",
            "cnn",
            25_028_904,
            4.23,
            224,
            "fwbench.models.flax_resnet",
            "ResNeXt-50 32x4d",
            (("groups", 32), ("width_per_group", 4)),
        ),
        ModelSpec(
            "resnext101_32x8d",
            "cnn",
            88_791_336,
            16.414,
            224,
            "fwbench.models.flax_resnet",
            "ResNeXt-101 32x8d",
            (("depth", 101), ("groups", 32), ("width_per_group", 8)),
        ),
        ModelSpec(
            "wide_resnet50_2",
            "cnn",
            68_883_240,
            11.398,
            224,
            "fwbench.models.flax_resnet",
            "Wide ResNet-50-2",
            (("width_per_group", 128),),
        ),
        ModelSpec(
            "vit_b_16",
            "transformer",
            86_567_656,
            17.564,
            224,
            "fwbench.models.flax_vit",
            "ViT-B/16",
        ),
        ModelSpec(
            "vit_b_32",
            "transformer",
            88_224_232,
            4.409,
            224,
            "fwbench.models.flax_vit",
            "ViT-B/32",
            (("patch", 32),),
        ),
        ModelSpec(
            "mobilenet_v3_small",
            "cnn",
            2_542_856,
            0.057,
            224,
            "fwbench.models.flax_mobilenet_v3",
            "MobileNetV3-S",
        ),
        ModelSpec(
            "mobilenet_v3_large",
            "cnn",
            5_483_032,
            0.217,
            224,
            "fwbench.models.flax_mobilenet_v3",
            "MobileNetV3-L",
            (("arch", "large"),),
        ),
        ModelSpec(
            "efficientnet_b0",
            "cnn",
            5_288_548,
            0.39,
            224,
            "fwbench.models.flax_efficientnet",
            "EfficientNet-B0",
        ),
        *(
            ModelSpec(
                f"efficientnet_b{b}",
                "cnn",
                params,
                gmacs,
                size,
                "fwbench.models.flax_efficientnet",
                f"EfficientNet-B{b}",
                (("variant", b),),
            )
            for b, params, gmacs, size in (
                (1, 7_794_184, 0.687, 240),
                (2, 9_109_994, 1.088, 288),
                (3, 12_233_232, 1.827, 300),
                (4, 19_341_616, 4.394, 380),
                (5, 30_389_784, 10.266, 456),
                (6, 43_040_704, 19.068, 528),
                (7, 66_347_960, 37.746, 600),
            )
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    """The twin's spec, a declared model's, or for any other torchvision classification model a
    PyTorch-only spec."""
    spec = _find(name)
    if spec is None:
        raise KeyError(unknown_model(name))
    return spec


# where a model of one's own comes from, as a campaign's checks say it; a command that reads no
# campaign of its own passes the advice that works for it
OWN_MODEL = "a model of your own is declared in a campaign's 'models:' section (CONTRIBUTING.md)"


def unknown_model(name: str, own: str = OWN_MODEL) -> str:
    """The one line refusing an unknown model: the names that work, then ``own``."""
    return (
        f"unknown model {name!r}: the models with a Flax twin are "
        f"{', '.join(twin_models())}, any torchvision classification model runs on PyTorch "
        f"alone (torchvision.models.list_models(module=torchvision.models)), and {own}"
    )


def _find(name: str) -> ModelSpec | None:
    if name in MODELS:
        return MODELS[name]
    if name in DECLARED:
        return DECLARED[name]
    if name in _torchvision_models():
        return _torchvision_spec(name)
    if name in _hf_names():
        return _hf_spec(name)
    if not isinstance(name, str) or not declared.NAME_RE.match(name):
        return None
    found = declared.from_environment().get(name) or declared.from_entry_point(name)
    return declare(found) if found else None


def is_known(name: str) -> bool:
    return _find(name) is not None


# the models declared in this process (a campaign's, or found in FWBENCH_MODELS or an entry point)
DECLARED: dict[str, ModelSpec] = {}


def declare(declaration: declared.Declaration) -> ModelSpec:
    """Register a declared model in this process: its builder and twin imported, its size counted
    on the model. Raises ``declared.DeclarationError`` with one line on any problem."""
    name = declaration.name
    if name in MODELS or name in _torchvision_models() or name in _hf_names():
        raise declared.DeclarationError(
            f"model {name!r}: the registry already has a model of that name; choose another"
        )
    if name in DECLARED and DECLARED[name].declaration == declaration:
        return DECLARED[name]
    counted = declared.count(declaration)
    if declaration.flax:
        declared.flax_module(declaration)
    spec = ModelSpec(
        name=name,
        kind=declaration.kind,
        param_count=counted.param_count,
        gmacs=counted.gmacs,
        image_size=declaration.image_size,
        flax_module=declaration.flax,
        label=declaration.label or name,
        declaration=declaration,
    )
    DECLARED[name] = spec
    return spec


def twin_models() -> list[str]:
    return [name for name, spec in {**MODELS, **DECLARED}.items() if spec.has_twin]


def require_twin(name: str) -> None:
    """Raise the one-line answer to a request for the JAX side of a model that has none."""
    spec = _find(name)
    if spec is None or not spec.has_twin:
        raise ValueError(
            f"{name} has no Flax twin, so it runs on PyTorch only; the models with a JAX side "
            f"are: {', '.join(twin_models())}"
        )


@functools.cache
def _torchvision_models() -> frozenset[str]:
    """torchvision's classification models (its detection, video and quantized ones excluded)."""
    import torchvision

    return frozenset(torchvision.models.list_models(module=torchvision.models))


_TRANSFORMER_PREFIXES = ("vit_", "swin_", "maxvit_")


@functools.cache
def _torchvision_spec(name: str) -> ModelSpec:
    from torchvision.models import get_model_weights

    # metadata only: building the enum downloads nothing, and every entry carries the same
    # architecture's count; the first is the one torchvision's documentation tables quote
    weights = next(iter(get_model_weights(name)))
    crop = weights.transforms().crop_size
    return ModelSpec(
        name=name,
        kind="transformer" if name.startswith(_TRANSFORMER_PREFIXES) else "cnn",
        param_count=int(weights.meta["num_params"]),
        gmacs=float(weights.meta["_ops"]),
        image_size=int(crop[0] if isinstance(crop, (list, tuple)) else crop),
        flax_module=None,
        label=name,
    )


def _hf_names() -> frozenset[str]:
    from fwbench.models import hf_models

    return frozenset(hf_models.MODELS)


@functools.cache
def _hf_spec(name: str) -> ModelSpec:
    """A transformers model's spec, its size counted on the model (on the meta device)."""
    import torch

    from fwbench.models import hf_models

    entry = hf_models.MODELS[name]
    spec = ModelSpec(
        name=name,
        kind=entry.kind,
        param_count=0,
        gmacs=0.0,
        image_size=entry.native_size,
        flax_module=None,
        label=entry.label,
        builder=entry.builder,
        inputs=entry.inputs,
    )
    dtype = torch.long if entry.inputs == "tokens" else torch.float32
    counted = declared.count_module(
        spec.torch_model,
        lambda: torch.zeros(spec.input_shape(1), dtype=dtype, device="meta"),
        f"{name}: one input",
    )
    return dataclasses.replace(spec, param_count=counted.param_count, gmacs=counted.gmacs)


def build_torch(
    name: str,
    *,
    seed: int = 0,
    num_classes: int = 1000,
    state_dict=None,
    image_size: int | None = None,
):
    """The torchvision model exactly as ``build_pair`` builds it, in eval mode, without JAX.

    A PyTorch-only cell needs no Flax twin; not importing JAX and Flax saves it seconds of start-up.
    """
    import torch

    torch.manual_seed(seed)
    torch_model = get_spec(name).torch_model(num_classes, image_size=image_size)
    if state_dict is not None:
        torch_model.load_state_dict(state_dict)
    return torch_model.eval()


def build_pair(
    name: str,
    *,
    seed: int = 0,
    num_classes: int = 1000,
    state_dict=None,
    image_size: int | None = None,
):
    """The torchvision model and its Flax twin holding the same weights, both in eval mode.

    Weights come from ``state_dict`` when given (e.g. ``porting.load_torchvision_weights``), else from
    torchvision's own initialisation under ``torch.manual_seed(seed)``; the Flax side is always
    ported from the torch side so the two can never drift apart. ``image_size`` rebuilds a ViT for
    that input size (its position embedding depends on it); CNNs take any size and ignore it.
    """
    from fwbench.models import porting

    spec = get_spec(name)
    impl = spec.flax_impl()  # first: a model without a twin fails before torch builds anything
    torch_model = build_torch(
        name, seed=seed, num_classes=num_classes, state_dict=state_dict, image_size=image_size
    )
    flax_model = _abstract_flax(spec, num_classes, seed, spec.size_kwargs(image_size))
    porting.port_state_dict(impl.links(flax_model), torch_model.state_dict())
    _check_concrete(flax_model, name)
    torch_model.eval()
    flax_model.eval()
    return torch_model, flax_model


def _abstract_flax(spec: ModelSpec, num_classes: int, seed: int, size_kwargs: dict):
    """The Flax model with shapes only, and concrete rng state for dropout/stochastic depth.

    Flax's own random initialisation costs one XLA compile per weight shape (about 30 s per model
    on a small CPU) and the port overwrites every weight anyway, so weights are never materialised.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    model = nnx.eval_shape(lambda: spec.build_flax(num_classes, rngs=nnx.Rngs(seed), **size_kwargs))
    base = jax.random.key(seed)
    for i, (_, node) in enumerate(nnx.iter_graph(model)):
        if isinstance(node, nnx.RngKey):
            node.set_value(jax.random.fold_in(base, i))
        elif isinstance(node, nnx.RngCount):
            node.set_value(jnp.zeros((), jnp.uint32))
    return model


def _check_concrete(model, name: str) -> None:
    """Every variable must have been filled by the port; an abstract leaf means a missing link."""
    import jax
    from flax import nnx

    abstract = [
        "/".join(map(str, path))
        for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model))
        if isinstance(leaf, jax.ShapeDtypeStruct)
    ]
    if abstract:
        raise ValueError(f"{name}: the port left Flax variables without weights: {abstract[:5]}")
