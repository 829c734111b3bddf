"""The registry: twins with exact torchvision metadata, and any other torchvision classification
model on the PyTorch side alone, with one clear message when its JAX side is asked for."""

import pytest
import torch

from fwbench.models import registry


def test_a_torchvision_model_without_a_twin_gets_a_torch_only_spec():
    spec = registry.get_spec("densenet121")
    assert not spec.has_twin and spec.kind == "cnn"
    with torch.device("meta"):
        built = spec.torch_model()
    assert sum(p.numel() for p in built.parameters()) == spec.param_count == 7_978_856
    assert registry.get_spec("swin_t").kind == "transformer"
    assert registry.get_spec("efficientnet_b4").image_size == 380  # torchvision's crop size
    assert registry.is_known("densenet121") and not registry.is_known("resnet51")


def test_the_jax_side_of_a_model_without_a_twin_is_one_clear_error():
    with pytest.raises(ValueError, match="densenet121 has no Flax twin") as info:
        registry.build_pair("densenet121")
    assert "resnet50" in str(info.value) and "vit_b_16" in str(info.value)
    registry.require_twin("resnet50")


def test_an_unknown_model_names_both_kinds_of_model():
    with pytest.raises(KeyError, match="resnet51.*torchvision classification model"):
        registry.get_spec("resnet51")


def test_every_twin_module_builds_every_variant_it_is_registered_for():
    """The registry's flax_kwargs reach build_flax: each variant builds (shapes only) with
    torchvision's parameter count. The variants' own test files count theirs through the registry
    (about 40 s of building for the large EfficientNets alone), so the rest are counted here."""
    import jax
    from flax import nnx

    from tests.test_models_variants_mobile_efficientnet import NAMES as MOBILE_VARIANTS
    from tests.test_models_variants_resnet_vit import COUNTED as RESNET_VIT_VARIANTS

    counted_there = {*MOBILE_VARIANTS, *RESNET_VIT_VARIANTS}
    rest = [name for name in registry.twin_models() if name not in counted_there]
    assert len(rest) >= 4  # each module's default (ResNet-50, ViT-B/16, MobileNetV3-S, B0) at least
    for name in rest:
        spec = registry.get_spec(name)
        model = nnx.eval_shape(lambda spec=spec: spec.build_flax(1000, rngs=nnx.Rngs(0)))
        count = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
        assert count == spec.param_count, name
