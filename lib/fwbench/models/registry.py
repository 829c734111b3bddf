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
    flax_module: (
        str  # module with build_flax(num_classes, rngs), port_state_dict, export_state_dict
    )

    def torch_model(self, num_classes: int = 1000):
        """The torchvision reference with random (seeded by the caller) initialisation."""
        import torchvision

        return getattr(torchvision.models, self.name)(weights=None, num_classes=num_classes)

    def flax_impl(self):
        return importlib.import_module(self.flax_module)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("resnet50", "cnn", 25_557_032, 4.089, 224, "fwbench.models.flax_resnet"),
        ModelSpec("vit_b_16", "transformer", 86_567_656, 17.564, 224, "fwbench.models.flax_vit"),
        ModelSpec(
            "mobilenet_v3_small", "cnn", 2_542_856, 0.057, 224, "fwbench.models.flax_mobilenet_v3"
        ),
        ModelSpec(
            "efficientnet_b0", "cnn", 5_288_548, 0.39, 224, "fwbench.models.flax_efficientnet"
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None


def build_pair(name: str, *, seed: int = 0, num_classes: int = 1000, state_dict=None):
    """The torchvision model and its Flax twin holding the same weights, both in eval mode.

    Weights come from ``state_dict`` when given (e.g. ``porting.load_torchvision_weights``), else from
    torchvision's own initialisation under ``torch.manual_seed(seed)``; the Flax side is always
    ported from the torch side so the two can never drift apart.
    """
    import torch
    from flax import nnx

    from fwbench.models import porting

    spec = get_spec(name)
    torch.manual_seed(seed)
    torch_model = spec.torch_model(num_classes)
    if state_dict is not None:
        torch_model.load_state_dict(state_dict)
    impl = spec.flax_impl()
    flax_model = impl.build_flax(num_classes, rngs=nnx.Rngs(seed))
    porting.port_state_dict(impl.links(flax_model), torch_model.state_dict())
    torch_model.eval()
    flax_model.eval()
    return torch_model, flax_model
