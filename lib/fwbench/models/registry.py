"""The one registry of models. Adding a model means adding one ``ModelSpec`` here.

Each entry names the torchvision builder (the PyTorch reference), the module holding the native Flax
NNX twin with its weight converter, and torchvision's published metadata. Flax modules are imported
lazily so that ``import fwbench`` stays cheap and torch-only users never import JAX.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str  # torchvision's name
    kind: str  # "cnn" or "transformer"
    param_count: int  # torchvision's count, which both sides must equal
    gmacs: float  # torchvision's published GMACs at 224x224 (FLOPs ~ 2 x MACs)
    image_size: int  # native input size
    flax_module: str  # module with build_flax(num_classes, *, rngs) and links(model)
    label: str  # how tables, charts and sentences name it

    def size_kwargs(self, image_size: int | None) -> dict:
        """Builder kwargs for a non-native input size; only a ViT's architecture depends on it."""
        if image_size is None or self.kind != "transformer":
            return {}
        return {"image_size": image_size}

    def torch_model(self, num_classes: int = 1000, *, image_size: int | None = None):
        """The torchvision reference with random (seeded by the caller) initialisation."""
        import torchvision

        builder = getattr(torchvision.models, self.name)
        return builder(weights=None, num_classes=num_classes, **self.size_kwargs(image_size))

    def flax_impl(self):
        return importlib.import_module(self.flax_module)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "resnet50", "cnn", 25_557_032, 4.089, 224, "fwbench.models.flax_resnet", "ResNet-50"
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
            "mobilenet_v3_small",
            "cnn",
            2_542_856,
            0.057,
            224,
            "fwbench.models.flax_mobilenet_v3",
            "MobileNetV3-S",
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
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None


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
    torch_model = build_torch(
        name, seed=seed, num_classes=num_classes, state_dict=state_dict, image_size=image_size
    )
    impl = spec.flax_impl()
    flax_model = _abstract_flax(impl, num_classes, seed, spec.size_kwargs(image_size))
    porting.port_state_dict(impl.links(flax_model), torch_model.state_dict())
    _check_concrete(flax_model, name)
    torch_model.eval()
    flax_model.eval()
    return torch_model, flax_model


def _abstract_flax(impl, num_classes: int, seed: int, size_kwargs: dict):
    """The Flax model with shapes only, and concrete rng state for dropout/stochastic depth.

    Flax's own random initialisation costs one XLA compile per weight shape (about 30 s per model
    on a small CPU) and the port overwrites every weight anyway, so weights are never materialised.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    model = nnx.eval_shape(lambda: impl.build_flax(num_classes, rngs=nnx.Rngs(seed), **size_kwargs))
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
