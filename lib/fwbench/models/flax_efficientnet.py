"""EfficientNet-B0 to B7 in Flax NNX, layer for layer torchvision's ``efficientnet_b0`` to ``_b7``.

Taken from torchvision rather than the paper: the squeeze-excitation width is
``max(1, in_channels // 4)`` (the block's *input* channels, not the expanded ones) with SiLU inside
and a sigmoid gate; BatchNorm is torch's default (eps 1e-5, momentum 0.1) for B0 to B4, unlike
MobileNetV3, and eps 1e-3, momentum 0.01 for B5 to B7 (torchvision's builders pass that norm layer
to every BatchNorm of those three); stochastic depth ("row" mode, one draw per sample) grows
linearly with the block index, ``0.2 * i / total_blocks`` (16 blocks in B0), and only acts on
residual blocks.

B1 to B7 are B0's table scaled as torchvision scales it: channels
``_make_divisible(c * width_mult, 8)``, layers per stage ``ceil(n * depth_mult)`` (so B1, at depth
1.1, has two layers wherever B0 has one), the head 4x the last stage's scaled width, and dropout
0.2 (B0, B1), 0.3 (B2, B3), 0.4 (B4, B5) or 0.5 (B6, B7).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting
from fwbench.models.flax_mobilenet_v3 import ConvNormActivation, SqueezeExcitation, make_divisible

BN_EPS, BN_MOMENTUM = 1e-5, 0.1


class _StageConfig(NamedTuple):
    expand_ratio: int
    kernel: int
    stride: int  # of the stage's first block; the others use 1
    in_channels: int
    out_channels: int
    num_layers: int


# torchvision's ``_efficientnet_conf("efficientnet_b*")`` table before scaling, which is B0's
# (width and depth multipliers 1.0 change nothing in it).
_B0_SETTING = (
    _StageConfig(1, 3, 1, 32, 16, 1),
    _StageConfig(6, 3, 2, 16, 24, 2),
    _StageConfig(6, 5, 2, 24, 40, 2),
    _StageConfig(6, 3, 2, 40, 80, 3),
    _StageConfig(6, 5, 1, 80, 112, 3),
    _StageConfig(6, 5, 2, 112, 192, 4),
    _StageConfig(6, 3, 1, 192, 320, 1),
)


class _Variant(NamedTuple):
    width_mult: float
    depth_mult: float
    dropout: float  # the classifier's; torchvision's builders set it per variant
    bn_eps: float = BN_EPS
    bn_momentum: float = BN_MOMENTUM


# torchvision's ``efficientnet_b0`` .. ``efficientnet_b7`` builders.
_VARIANTS = {
    0: _Variant(1.0, 1.0, 0.2),
    1: _Variant(1.0, 1.1, 0.2),
    2: _Variant(1.1, 1.2, 0.3),
    3: _Variant(1.2, 1.4, 0.3),
    4: _Variant(1.4, 1.8, 0.4),
    5: _Variant(1.6, 2.2, 0.4, 1e-3, 0.01),
    6: _Variant(1.8, 2.6, 0.5, 1e-3, 0.01),
    7: _Variant(2.0, 3.1, 0.5, 1e-3, 0.01),
}


def _scaled_setting(width_mult: float, depth_mult: float) -> tuple[_StageConfig, ...]:
    """B0's table scaled as torchvision's ``MBConvConfig`` scales it.

    Written as torchvision's own float expressions rather than from a table of results, so a
    product a rounding error off an integer (3 * 1.1 is 3.3000000000000003) rounds as torch's does.
    """
    return tuple(
        cfg._replace(
            in_channels=make_divisible(cfg.in_channels * width_mult, 8),
            out_channels=make_divisible(cfg.out_channels * width_mult, 8),
            num_layers=int(math.ceil(cfg.num_layers * depth_mult)),
        )
        for cfg in _B0_SETTING
    )


class StochasticDepth(nnx.Module):
    """``torchvision.ops.StochasticDepth(rate, "row")``: drop whole samples of a residual branch."""

    def __init__(self, rate: float, *, rngs: nnx.Rngs, rng_collection: str = "dropout"):
        self.rate = rate
        self.deterministic = False  # flipped by Module.eval() / Module.train(), like nnx.Dropout
        self.rngs = rngs[rng_collection].fork()

    def __call__(self, x):
        if self.deterministic or self.rate == 0.0:
            return x
        survival = 1.0 - self.rate
        if survival == 0.0:
            return jnp.zeros_like(x)
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        keep = jax.random.bernoulli(self.rngs(), survival, shape)
        return x * (keep.astype(x.dtype) / jnp.asarray(survival, x.dtype))


class MBConv(nnx.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        expand_ratio: int,
        kernel: int,
        stride: int,
        stochastic_depth_rate: float,
        bn_eps: float = BN_EPS,
        bn_momentum: float = BN_MOMENTUM,
        rngs: nnx.Rngs,
    ):
        bn = dict(bn_eps=bn_eps, bn_momentum=bn_momentum, rngs=rngs)
        expanded = make_divisible(in_channels * expand_ratio, 8)
        layers = []
        if expanded != in_channels:
            layers.append(
                ConvNormActivation(in_channels, expanded, 1, activation=jax.nn.silu, **bn)
            )
        layers.append(
            ConvNormActivation(
                expanded,
                expanded,
                kernel,
                stride=stride,
                groups=expanded,
                activation=jax.nn.silu,
                **bn,
            )
        )
        layers.append(
            SqueezeExcitation(
                expanded,
                max(1, in_channels // 4),
                activation=jax.nn.silu,
                gate=jax.nn.sigmoid,
                rngs=rngs,
            )
        )
        layers.append(ConvNormActivation(expanded, out_channels, 1, activation=None, **bn))
        self.block = nnx.List(layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_rate, rngs=rngs)
        self.use_residual = stride == 1 and in_channels == out_channels

    def __call__(self, x):
        y = x
        for layer in self.block:
            y = layer(y)
        return self.stochastic_depth(y) + x if self.use_residual else y

    def torch_links(self, prefix: str) -> list[porting.Link]:
        return [
            link
            for i, layer in enumerate(self.block)
            for link in layer.torch_links(f"{prefix}.block.{i}")
        ]


class EfficientNet(nnx.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        *,
        variant: int = 0,
        dropout: float | None = None,
        stochastic_depth_prob: float = 0.2,
        rngs: nnx.Rngs,
    ):
        """``dropout`` None takes the variant's, as torchvision's builders do."""
        if variant not in _VARIANTS:
            raise ValueError(
                f"unknown EfficientNet variant {variant!r}: one of {', '.join(map(str, _VARIANTS))}"
            )
        width_mult, depth_mult, default_dropout, bn_eps, bn_momentum = _VARIANTS[variant]
        dropout = default_dropout if dropout is None else dropout
        setting = _scaled_setting(width_mult, depth_mult)
        bn = dict(bn_eps=bn_eps, bn_momentum=bn_momentum, rngs=rngs)
        stem = ConvNormActivation(
            3, setting[0].in_channels, 3, stride=2, activation=jax.nn.silu, **bn
        )
        # the rate's denominator counts the scaled variant's blocks, not B0's 16: every variant's
        # last block drops with close to ``stochastic_depth_prob``, as in torchvision
        total_blocks = sum(cfg.num_layers for cfg in setting)
        block_id = 0
        stages = []
        for cfg in setting:
            stage = []
            for i in range(cfg.num_layers):
                stage.append(
                    MBConv(
                        cfg.in_channels if i == 0 else cfg.out_channels,
                        cfg.out_channels,
                        expand_ratio=cfg.expand_ratio,
                        kernel=cfg.kernel,
                        stride=cfg.stride if i == 0 else 1,
                        stochastic_depth_rate=stochastic_depth_prob * block_id / total_blocks,
                        **bn,
                    )
                )
                block_id += 1
            stages.append(nnx.List(stage))
        last_in = setting[-1].out_channels
        head = ConvNormActivation(last_in, 4 * last_in, 1, activation=jax.nn.silu, **bn)
        self.features = nnx.List([stem, *stages, head])
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        init_range = 1.0 / num_classes**0.5  # torchvision's uniform(-1/sqrt(out), 1/sqrt(out))
        self.fc = nnx.Linear(
            4 * last_in,
            num_classes,
            kernel_init=lambda key, shape, dtype: jax.random.uniform(
                key, shape, dtype, -init_range, init_range
            ),
            bias_init=nnx.initializers.zeros,
            rngs=rngs,
        )

    def __call__(self, x):
        for layer in self.features:
            if isinstance(layer, nnx.List):
                for block in layer:
                    x = block(x)
            else:
                x = layer(x)
        x = jnp.mean(x, axis=(1, 2))
        return self.fc(self.dropout(x))

    def torch_links(self) -> list[porting.Link]:
        found = []
        for i, layer in enumerate(self.features):
            if isinstance(layer, nnx.List):
                for j, block in enumerate(layer):
                    found += block.torch_links(f"features.{i}.{j}")
            else:
                found += layer.torch_links(f"features.{i}")
        # torch's classifier is Sequential(Dropout, Linear)
        return found + porting.linear_links(self.fc, "classifier.1")


# The default variant is B0, so the name that predates B1 to B7 still builds what it always built.
_EfficientNetB0 = EfficientNet


def build_flax(
    num_classes: int = 1000, *, rngs: nnx.Rngs, image_size: int = 224, variant: int = 0
) -> nnx.Module:
    """The twin of ``torchvision.models.efficientnet_b{variant}``, in train mode as torch builds it.

    ``image_size`` is accepted for a uniform registry interface; a CNN does not depend on it (B1 to
    B7 are only published at larger sizes, 240 to 600, not built differently for them).
    """
    del image_size
    return EfficientNet(num_classes, variant=variant, rngs=rngs)


def links(model: EfficientNet) -> list[porting.Link]:
    return model.torch_links()
