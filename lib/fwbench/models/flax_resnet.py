"""ResNet-18/34/50/101/152, ResNeXt-50 32x4d and Wide ResNet-50-2 in Flax NNX, layer for layer
as torchvision builds them.

Like torchvision, 18 and 34 stack ``BasicBlock`` (two 3x3 convs) and 50, 101 and 152 stack
``Bottleneck`` (1x1, 3x3, 1x1, four times wider out than in) in v1.5 form: the stride sits on the
3x3 conv, not on the first 1x1 as in the paper. Depths differ only in the block and in how many
blocks each of the four stages holds (``BLOCKS``); stem, stage widths and strides are shared.
ResNeXt and Wide ResNet are Bottleneck ResNets whose 3x3 convolution is grouped (``groups``) or
wider (``width_per_group``): its width is ``planes * width_per_group / 64 * groups``, as
torchvision computes it.

Every padding is written out as ((p, p), (p, p)) like torch's symmetric ``padding=p``. Flax's
"SAME" would pad (0, 1) for a stride-2 3x3 conv on an even input, which shifts every window by one
pixel and breaks parity with torch, so it is never used here.

Each block names the values it makes (``layers.named``: conv1, bn1, relu1, ..., shortcut), so a
JAX checkpoint policy can save some of them by name (``families/memory/jax_budget.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting
from fwbench.models.conv import Conv
from fwbench.models.layers import TorchBatchNorm, named

WIDTHS, STRIDES = (64, 128, 256, 512), (1, 2, 2, 2)  # per layerN: the block's inner width, stride


def _conv(cin: int, cout: int, k: int, stride: int, rngs: nnx.Rngs, groups: int = 1) -> Conv:
    pad = k // 2
    return Conv(
        cin,
        cout,
        (k, k),
        (stride, stride),
        padding=((pad, pad), (pad, pad)),
        feature_group_count=groups,
        use_bias=False,
        rngs=rngs,
    )


def _downsample(cin: int, cout: int, stride: int, rngs: nnx.Rngs) -> nnx.Sequential | None:
    # torchvision projects the shortcut whenever the shape changes: for Bottleneck that includes
    # layer1's 64 -> 256 at stride 1, while BasicBlock's layer1 (64 -> 64) keeps the identity
    if stride == 1 and cin == cout:
        return None
    return nnx.Sequential(_conv(cin, cout, 1, stride, rngs), TorchBatchNorm(cout))


class BasicBlock(nnx.Module):
    expansion = 1  # output channels per unit of inner width, torchvision's ``block.expansion``
    convs = 2  # conv1..conv2, each with its bn1..bn2: what ``block_links`` walks

    def __init__(self, cin: int, width: int, stride: int, *, rngs: nnx.Rngs, **_shape):
        # torchvision builds BasicBlock with one group of 64 only (``ResNet`` refuses the rest)
        cout = width * self.expansion
        self.conv1 = _conv(cin, width, 3, stride, rngs)
        self.bn1 = TorchBatchNorm(width)
        self.conv2 = _conv(width, cout, 3, 1, rngs)
        self.bn2 = TorchBatchNorm(cout)
        self.downsample = _downsample(cin, cout, stride, rngs)

    def __call__(self, x):
        identity = x
        y = named(jax.nn.relu(named(self.bn1(named(self.conv1(x), "conv1")), "bn1")), "relu1")
        y = named(self.bn2(named(self.conv2(y), "conv2")), "bn2")
        if self.downsample is not None:
            identity = named(self.downsample(x), "shortcut")
        return jax.nn.relu(y + identity)


class Bottleneck(nnx.Module):
    expansion = 4
    convs = 3

    def __init__(
        self,
        cin: int,
        planes: int,
        stride: int,
        *,
        rngs: nnx.Rngs,
        groups: int = 1,
        width_per_group: int = 64,
    ):
        cout = planes * self.expansion
        width = int(planes * (width_per_group / 64.0)) * groups
        self.conv1 = _conv(cin, width, 1, 1, rngs)
        self.bn1 = TorchBatchNorm(width)
        self.conv2 = _conv(width, width, 3, stride, rngs, groups)
        self.bn2 = TorchBatchNorm(width)
        self.conv3 = _conv(width, cout, 1, 1, rngs)
        self.bn3 = TorchBatchNorm(cout)
        self.downsample = _downsample(cin, cout, stride, rngs)

    def __call__(self, x):
        identity = x
        y = named(jax.nn.relu(named(self.bn1(named(self.conv1(x), "conv1")), "bn1")), "relu1")
        y = named(jax.nn.relu(named(self.bn2(named(self.conv2(y), "conv2")), "bn2")), "relu2")
        y = named(self.bn3(named(self.conv3(y), "conv3")), "bn3")
        if self.downsample is not None:
            identity = named(self.downsample(x), "shortcut")
        return jax.nn.relu(y + identity)


# torchvision's resnet18 ... resnet152: the block type and the block count of layer1..layer4
BLOCKS = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


class ResNet(nnx.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        *,
        depth: int = 50,
        groups: int = 1,
        width_per_group: int = 64,
        rngs: nnx.Rngs,
    ):
        if depth not in BLOCKS:
            raise ValueError(f"no ResNet-{depth}: torchvision builds depths {sorted(BLOCKS)}")
        block, counts = BLOCKS[depth]
        if block is BasicBlock and (groups, width_per_group) != (1, 64):
            raise ValueError("BasicBlock has one group of width 64, as in torchvision")
        self.conv1 = Conv(
            3, 64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False, rngs=rngs
        )
        self.bn1 = TorchBatchNorm(64)
        stages, cin = [], 64
        for width, blocks, stride in zip(WIDTHS, counts, STRIDES, strict=True):
            stage = []
            for i in range(blocks):
                stage.append(
                    block(
                        cin,
                        width,
                        stride if i == 0 else 1,
                        rngs=rngs,
                        groups=groups,
                        width_per_group=width_per_group,
                    )
                )
                cin = width * block.expansion
            stages.append(nnx.List(stage))
        self.stages = nnx.List(stages)
        self.fc = nnx.Linear(cin, num_classes, rngs=rngs)

    def __call__(self, x):
        x = self.stem(x)
        for block in self.blocks():
            x = block(x)
        return self.head(x)

    # the three parts a planner of activation memory works with (families/memory/jax_remat.py)
    def stem(self, x):
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        # max_pool pads with its init value -inf, matching torch's MaxPool2d padding semantics
        return nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))

    def blocks(self) -> list:
        """The residual blocks in order, each feeding the next: what checkpointing segments."""
        return [block for stage in self.stages for block in stage]

    def head(self, x):
        return self.fc(jnp.mean(x, axis=(1, 2)))


def build_flax(
    num_classes: int = 1000,
    *,
    rngs: nnx.Rngs,
    image_size: int = 224,
    depth: int = 50,
    groups: int = 1,
    width_per_group: int = 64,
) -> ResNet:
    """ResNet-``depth`` (a ResNeXt with ``groups``, a Wide ResNet with ``width_per_group``);
    ``image_size`` is accepted for a uniform contract but a CNN does not depend on it."""
    del image_size
    return ResNet(
        num_classes, depth=depth, groups=groups, width_per_group=width_per_group, rngs=rngs
    )


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def block_links(block: BasicBlock | Bottleneck, prefix: str = "") -> list[porting.Link]:
    """One block's links; ``prefix`` is its torch path, e.g. "layer2.0" ("" for a bare block)."""
    out = []
    for i in range(1, block.convs + 1):
        out += porting.conv_links(getattr(block, f"conv{i}"), _join(prefix, f"conv{i}"))
        out += porting.batchnorm_links(getattr(block, f"bn{i}"), _join(prefix, f"bn{i}"))
    if block.downsample is not None:
        conv, bn = block.downsample.layers
        out += porting.conv_links(conv, _join(prefix, "downsample.0"))
        out += porting.batchnorm_links(bn, _join(prefix, "downsample.1"))
    return out


def links(model: ResNet) -> list[porting.Link]:
    out = porting.conv_links(model.conv1, "conv1") + porting.batchnorm_links(model.bn1, "bn1")
    for s, stage in enumerate(model.stages):
        for b, block in enumerate(stage):
            out += block_links(block, f"layer{s + 1}.{b}")
    return out + porting.linear_links(model.fc, "fc")
