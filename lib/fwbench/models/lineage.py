"""Each model's architectural lineage: the unit a prediction hold-out leaves out.

A name pattern is not a lineage: ResNeXt and Wide ResNet are ResNets with wider or grouped
bottlenecks, and MnasNet and EfficientNet are built from MobileNetV2's inverted-residual (MBConv)
blocks. A hold-out that leaves out "resnet" but trains on ResNeXt, or "mobilenet" but trains on
EfficientNet, has seen the held-out blocks and scores as if it generalised. So a lineage groups
every model built from the same blocks, and the prediction family's hold-outs leave a whole
lineage out.

``LINEAGES`` is ordered: the first pattern a name starts with decides. A declared model (a
campaign's ``models:`` key, ``FWBENCH_MODELS`` or an entry point, once this process has declared
it) is a lineage of its own unless its declaration names one (``lineage:``); the name's prefix
never decides for it, since a user's ``resnet_mine`` may share no block with a ResNet.
"""

from __future__ import annotations

from fwbench.models import registry

# lineage -> the name prefixes of its models (torchvision's names, the transformers models'
# registry names)
LINEAGES: dict[str, tuple[str, ...]] = {
    "resnet": ("resnet", "resnext", "wide_resnet"),
    "mbconv": ("mobilenet", "mnasnet", "efficientnet"),
    "regnet": ("regnet",),
    "densenet": ("densenet",),
    "shufflenet/squeezenet": ("shufflenet", "squeezenet"),
    "vision transformer": ("vit_", "swin", "maxvit", "hf_vit"),
    "convnext": ("convnext",),
    "vgg/alexnet": ("vgg", "alexnet"),
    "inception": ("googlenet", "inception"),
    "text transformer": ("hf_bert",),
    "speech transformer": ("hf_wav2vec2", "wav2vec2"),
    "metaformer": ("hf_poolformer", "hf_focalnet"),
    "mobilevit": ("hf_mobilevit",),
    "levit": ("hf_levit",),
    "swiftformer": ("hf_swiftformer",),
    "cvt": ("hf_cvt",),
}


def lineage(name: str, declared: str | None = None) -> str:
    """The lineage of a model by its registry name; ``declared`` (a declared model's own
    ``lineage``) wins, then the declaration this process holds for ``name``, and an unknown name
    is a lineage of its own."""
    if declared:
        return declared
    if name in registry.DECLARED:
        return registry.DECLARED[name].declaration.lineage or name
    for found, prefixes in LINEAGES.items():
        if name.startswith(prefixes):
            return found
    return name
