"""EfficientNet-B0 in Flax NNX, layer for layer torchvision's ``efficientnet_b0``.

Taken from torchvision rather than the paper: the squeeze-excitation width is
``max(1, in_channels // 4)`` (the block's *input* channels, not the expanded ones) with SiLU inside
and a sigmoid gate; BatchNorm is torch's default (eps 1e-5, momentum 0.1) for B0, unlike
MobileNetV3; stochastic depth ("row" mode, one draw per sample) grows linearly with the block index,
``0.2 * i / 16``, and only acts on residual blocks.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting
from fwbench.models.flax_mobilenet_v3 import ConvNormActivation, SqueezeExcitation, make_divisible

BN_EPS, BN_MOMENTUM = 1e-5, 0.1


class StageConfig(NamedTuple):
    expand_ratio: int
    kernel: int
    stride: int  # of the stage's first block; the others use 1
    in_channels: int
    out_channels: int
    num_layers: int


# torchvision's ``_efficientnet_conf("efficientnet_b0")``: width and depth multipliers are 1.0.
B0_SETTING = (
    StageConfig(1, 3, 1, 32, 16, 1),
    StageConfig(6, 3, 2, 16, 24, 2),
    StageConfig(6, 5, 2, 24, 40, 2),
    StageConfig(6, 3, 2, 40, 80, 3),
    StageConfig(6, 5, 1, 80, 112, 3),
    StageConfig(6, 5, 2, 112, 192, 4),
    StageConfig(6, 3, 1, 192, 320, 1),
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
        rngs: nnx.Rngs,
    ):
        bn = dict(bn_eps=BN_EPS, bn_momentum=BN_MOMENTUM, rngs=rngs)
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


class EfficientNetB0(nnx.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        *,
        dropout: float = 0.2,
        stochastic_depth_prob: float = 0.2,
        rngs: nnx.Rngs,
    ):
        bn = dict(bn_eps=BN_EPS, bn_momentum=BN_MOMENTUM, rngs=rngs)
        stem = ConvNormActivation(
            3, B0_SETTING[0].in_channels, 3, stride=2, activation=jax.nn.silu, **bn
        )
        total_blocks = sum(cfg.num_layers for cfg in B0_SETTING)
        block_id = 0
        stages = []
        for cfg in B0_SETTING:
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
                        rngs=rngs,
                    )
                )
                block_id += 1
            stages.append(nnx.List(stage))
        last_in = B0_SETTING[-1].out_channels
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


def build_flax(num_classes: int = 1000, *, rngs: nnx.Rngs, image_size: int = 224) -> nnx.Module:
    """The twin of ``torchvision.models.efficientnet_b0``, in train mode as torch builds it.

    ``image_size`` is accepted for a uniform registry interface; a CNN does not depend on it.
    """
    del image_size
    return EfficientNetB0(num_classes, rngs=rngs)


def links(model: EfficientNetB0) -> list[porting.Link]:
    return model.torch_links()
