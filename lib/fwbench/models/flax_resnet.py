"""ResNet-50 in Flax NNX, layer for layer as torchvision builds it (v1.5: stride on the 3x3 conv).

Every padding is written out as ((p, p), (p, p)) like torch's symmetric ``padding=p``. Flax's
"SAME" would pad (0, 1) for a stride-2 3x3 conv on an even input, which shifts every window by one
pixel and breaks parity with torch, so it is never used here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting
from fwbench.models.layers import TorchBatchNorm

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride) per layerN
EXPANSION = 4


def _conv(cin: int, cout: int, k: int, stride: int, rngs: nnx.Rngs) -> nnx.Conv:
    pad = k // 2
    return nnx.Conv(
        cin,
        cout,
        (k, k),
        (stride, stride),
        padding=((pad, pad), (pad, pad)),
        use_bias=False,
        rngs=rngs,
    )


class Bottleneck(nnx.Module):
    def __init__(self, cin: int, width: int, stride: int, *, rngs: nnx.Rngs):
        cout = width * EXPANSION
        self.conv1 = _conv(cin, width, 1, 1, rngs)
        self.bn1 = TorchBatchNorm(width)
        self.conv2 = _conv(width, width, 3, stride, rngs)
        self.bn2 = TorchBatchNorm(width)
        self.conv3 = _conv(width, cout, 1, 1, rngs)
        self.bn3 = TorchBatchNorm(cout)
        # torchvision adds a projection whenever the shape changes, including layer1's 64 -> 256
        if stride != 1 or cin != cout:
            self.downsample = nnx.Sequential(
                _conv(cin, cout, 1, stride, rngs), TorchBatchNorm(cout)
            )
        else:
            self.downsample = None

    def __call__(self, x):
        identity = x
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        y = jax.nn.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        if self.downsample is not None:
            identity = self.downsample(x)
        return jax.nn.relu(y + identity)


class ResNet50(nnx.Module):
    def __init__(self, num_classes: int = 1000, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(
            3, 64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False, rngs=rngs
        )
        self.bn1 = TorchBatchNorm(64)
        stages, cin = [], 64
        for width, blocks, stride in STAGES:
            stage = []
            for i in range(blocks):
                stage.append(Bottleneck(cin, width, stride if i == 0 else 1, rngs=rngs))
                cin = width * EXPANSION
            stages.append(nnx.List(stage))
        self.stages = nnx.List(stages)
        self.fc = nnx.Linear(cin, num_classes, rngs=rngs)

    def __call__(self, x):
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        # max_pool pads with its init value -inf, matching torch's MaxPool2d padding semantics
        x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for stage in self.stages:
            for block in stage:
                x = block(x)
        return self.fc(jnp.mean(x, axis=(1, 2)))


def build_flax(num_classes: int = 1000, *, rngs: nnx.Rngs, image_size: int = 224) -> ResNet50:
    """ResNet-50; ``image_size`` is accepted for a uniform contract but a CNN does not depend on it."""
    del image_size
    return ResNet50(num_classes, rngs=rngs)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def bottleneck_links(block: Bottleneck, prefix: str = "") -> list[porting.Link]:
    """One block's links; ``prefix`` is its torch path, e.g. "layer2.0" ("" for a bare block)."""
    out = []
    for i in (1, 2, 3):
        out += porting.conv_links(getattr(block, f"conv{i}"), _join(prefix, f"conv{i}"))
        out += porting.batchnorm_links(getattr(block, f"bn{i}"), _join(prefix, f"bn{i}"))
    if block.downsample is not None:
        conv, bn = block.downsample.layers
        out += porting.conv_links(conv, _join(prefix, "downsample.0"))
        out += porting.batchnorm_links(bn, _join(prefix, "downsample.1"))
    return out


def links(model: ResNet50) -> list[porting.Link]:
    out = porting.conv_links(model.conv1, "conv1") + porting.batchnorm_links(model.bn1, "bn1")
    for s, stage in enumerate(model.stages):
        for b, block in enumerate(stage):
            out += bottleneck_links(block, f"layer{s + 1}.{b}")
    return out + porting.linear_links(model.fc, "fc")
