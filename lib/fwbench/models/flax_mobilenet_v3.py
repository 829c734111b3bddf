"""MobileNetV3 in Flax NNX, layer for layer torchvision's ``mobilenet_v3_small`` and ``_large``.

Details that a from-the-paper reimplementation tends to get wrong, all taken from torchvision:
expanded widths are given as channel counts (72, 88, 96, ...), never as rounded ratios; the
squeeze-excitation gate is hard-sigmoid and its width is ``_make_divisible(expanded // 4, 8)``
(Large's 72-wide blocks squeeze to 24, not 18 or 16); BatchNorm uses eps 1e-3 and momentum 0.01;
dropout sits between the two classifier layers. Both sizes differ only in their block table and
the classifier's hidden width (1024 for Small, 1280 for Large).

Only what the classification builders build is reproduced: width 1.0, no reduced tail and no
dilation (torchvision's ``dilated=True`` serves its segmentation backbones), so no block here
needs a dilated convolution.

The building blocks (``ConvNormActivation``, ``SqueezeExcitation``) mirror torchvision's
``ops.misc`` and are shared with the EfficientNet twin, as they are in torchvision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting
from fwbench.models.conv import Conv
from fwbench.models.layers import TorchBatchNorm

# torchvision's initialisation, so a model trained from scratch starts where torch's does.
_kaiming_fan_out = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """torchvision's ``_make_divisible``: round to a multiple of ``divisor``, losing at most 10%."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvNormActivation(nnx.Module):
    """torchvision's ``Conv2dNormActivation``: bias-free conv, BatchNorm, optional activation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        groups: int = 1,
        activation: Callable | None,
        bn_eps: float,
        bn_momentum: float,
        rngs: nnx.Rngs,
    ):
        # Explicit symmetric padding as torch pads; "SAME" would pad asymmetrically at stride 2.
        pad = (kernel_size - 1) // 2
        self.conv = Conv(
            in_channels,
            out_channels,
            (kernel_size, kernel_size),
            strides=stride,
            padding=((pad, pad), (pad, pad)),
            feature_group_count=groups,
            use_bias=False,
            kernel_init=_kaiming_fan_out,
            rngs=rngs,
        )
        self.bn = TorchBatchNorm(out_channels, eps=bn_eps, momentum=bn_momentum)
        self.activation = activation

    def __call__(self, x):
        x = self.bn(self.conv(x))
        return x if self.activation is None else self.activation(x)

    def torch_links(self, prefix: str) -> list[porting.Link]:
        # torch holds these as a Sequential: index 0 the conv, 1 the norm
        return porting.conv_links(self.conv, f"{prefix}.0") + porting.batchnorm_links(
            self.bn, f"{prefix}.1"
        )


class SqueezeExcitation(nnx.Module):
    """torchvision's ``SqueezeExcitation``: 1x1 convs (with bias) on the pooled features."""

    def __init__(
        self,
        channels: int,
        squeeze_channels: int,
        *,
        activation: Callable,
        gate: Callable,
        rngs: nnx.Rngs,
    ):
        self.fc1 = Conv(channels, squeeze_channels, (1, 1), kernel_init=_kaiming_fan_out, rngs=rngs)
        self.fc2 = Conv(squeeze_channels, channels, (1, 1), kernel_init=_kaiming_fan_out, rngs=rngs)
        self.activation = activation
        self.gate = gate

    def __call__(self, x):
        scale = jnp.mean(x, axis=(1, 2), keepdims=True)
        scale = self.fc2(self.activation(self.fc1(scale)))
        return x * self.gate(scale)

    def torch_links(self, prefix: str) -> list[porting.Link]:
        return porting.conv_links(self.fc1, f"{prefix}.fc1") + porting.conv_links(
            self.fc2, f"{prefix}.fc2"
        )


class _BlockConfig(NamedTuple):
    in_channels: int
    kernel: int
    expanded_channels: int
    out_channels: int
    use_se: bool
    use_hardswish: bool  # else ReLU
    stride: int


# torchvision's ``_mobilenet_v3_conf(arch)`` tables at width 1.0. Every channel count in them is
# already a multiple of 8, so ``adjust_channels`` (``_make_divisible(c * 1.0, 8)``) changes
# nothing; the tests hold both tables to torchvision's through the parameter counts and logits.
_SMALL_SETTING = (
    _BlockConfig(16, 3, 16, 16, True, False, 2),
    _BlockConfig(16, 3, 72, 24, False, False, 2),
    _BlockConfig(24, 3, 88, 24, False, False, 1),
    _BlockConfig(24, 5, 96, 40, True, True, 2),
    _BlockConfig(40, 5, 240, 40, True, True, 1),
    _BlockConfig(40, 5, 240, 40, True, True, 1),
    _BlockConfig(40, 5, 120, 48, True, True, 1),
    _BlockConfig(48, 5, 144, 48, True, True, 1),
    _BlockConfig(48, 5, 288, 96, True, True, 2),
    _BlockConfig(96, 5, 576, 96, True, True, 1),
    _BlockConfig(96, 5, 576, 96, True, True, 1),
)
_LARGE_SETTING = (
    _BlockConfig(16, 3, 16, 16, False, False, 1),
    _BlockConfig(16, 3, 64, 24, False, False, 2),
    _BlockConfig(24, 3, 72, 24, False, False, 1),
    _BlockConfig(24, 5, 72, 40, True, False, 2),
    _BlockConfig(40, 5, 120, 40, True, False, 1),
    _BlockConfig(40, 5, 120, 40, True, False, 1),
    _BlockConfig(40, 3, 240, 80, False, True, 2),
    _BlockConfig(80, 3, 200, 80, False, True, 1),
    _BlockConfig(80, 3, 184, 80, False, True, 1),
    _BlockConfig(80, 3, 184, 80, False, True, 1),
    _BlockConfig(80, 3, 480, 112, True, True, 1),
    _BlockConfig(112, 3, 672, 112, True, True, 1),
    _BlockConfig(112, 5, 672, 160, True, True, 2),
    _BlockConfig(160, 5, 960, 160, True, True, 1),
    _BlockConfig(160, 5, 960, 160, True, True, 1),
)


class _Arch(NamedTuple):
    setting: tuple[_BlockConfig, ...]
    last_channel: int  # the classifier's hidden width, torchvision's ``last_channel``


_ARCHS = {"small": _Arch(_SMALL_SETTING, 1024), "large": _Arch(_LARGE_SETTING, 1280)}
BN_EPS, BN_MOMENTUM = 1e-3, 0.01


class _InvertedResidual(nnx.Module):
    def __init__(self, cfg: _BlockConfig, *, rngs: nnx.Rngs):
        act = jax.nn.hard_swish if cfg.use_hardswish else jax.nn.relu
        bn = dict(bn_eps=BN_EPS, bn_momentum=BN_MOMENTUM, rngs=rngs)
        layers = []
        if cfg.expanded_channels != cfg.in_channels:
            layers.append(
                ConvNormActivation(cfg.in_channels, cfg.expanded_channels, 1, activation=act, **bn)
            )
        layers.append(
            ConvNormActivation(
                cfg.expanded_channels,
                cfg.expanded_channels,
                cfg.kernel,
                stride=cfg.stride,
                groups=cfg.expanded_channels,
                activation=act,
                **bn,
            )
        )
        if cfg.use_se:
            squeeze = make_divisible(cfg.expanded_channels // 4, 8)
            layers.append(
                SqueezeExcitation(
                    cfg.expanded_channels,
                    squeeze,
                    activation=jax.nn.relu,
                    gate=jax.nn.hard_sigmoid,
                    rngs=rngs,
                )
            )
        layers.append(
            ConvNormActivation(cfg.expanded_channels, cfg.out_channels, 1, activation=None, **bn)
        )
        self.block = nnx.List(layers)
        self.use_residual = cfg.stride == 1 and cfg.in_channels == cfg.out_channels

    def __call__(self, x):
        y = x
        for layer in self.block:
            y = layer(y)
        return y + x if self.use_residual else y

    def torch_links(self, prefix: str) -> list[porting.Link]:
        return [
            link
            for i, layer in enumerate(self.block)
            for link in layer.torch_links(f"{prefix}.block.{i}")
        ]


class MobileNetV3(nnx.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        *,
        arch: str = "small",
        dropout: float = 0.2,
        rngs: nnx.Rngs,
    ):
        if arch not in _ARCHS:
            raise ValueError(f"unknown MobileNetV3 arch {arch!r}: one of {', '.join(_ARCHS)}")
        setting, last_channel = _ARCHS[arch]
        bn = dict(bn_eps=BN_EPS, bn_momentum=BN_MOMENTUM, rngs=rngs)
        first, last = setting[0].in_channels, setting[-1].out_channels
        features = [ConvNormActivation(3, first, 3, stride=2, activation=jax.nn.hard_swish, **bn)]
        features += [_InvertedResidual(cfg, rngs=rngs) for cfg in setting]
        features.append(ConvNormActivation(last, 6 * last, 1, activation=jax.nn.hard_swish, **bn))
        self.features = nnx.List(features)
        linear_init = dict(
            kernel_init=nnx.initializers.normal(0.01), bias_init=nnx.initializers.zeros, rngs=rngs
        )
        self.fc_hidden = nnx.Linear(6 * last, last_channel, **linear_init)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.fc_out = nnx.Linear(last_channel, num_classes, **linear_init)

    def __call__(self, x):
        for layer in self.features:
            x = layer(x)
        x = jnp.mean(x, axis=(1, 2))
        x = jax.nn.hard_swish(self.fc_hidden(x))
        return self.fc_out(self.dropout(x))

    def torch_links(self) -> list[porting.Link]:
        found = [
            link
            for i, layer in enumerate(self.features)
            for link in layer.torch_links(f"features.{i}")
        ]
        # torch's classifier is Sequential(Linear, Hardswish, Dropout, Linear)
        return (
            found
            + porting.linear_links(self.fc_hidden, "classifier.0")
            + porting.linear_links(self.fc_out, "classifier.3")
        )


# The default arch is Small, so the name that predates Large still builds what it always built.
_MobileNetV3Small = MobileNetV3


def build_flax(
    num_classes: int = 1000, *, rngs: nnx.Rngs, image_size: int = 224, arch: str = "small"
) -> nnx.Module:
    """The twin of ``torchvision.models.mobilenet_v3_{arch}``, in train mode as torch builds it.

    ``image_size`` is accepted for a uniform registry interface; a CNN does not depend on it.
    """
    del image_size
    return MobileNetV3(num_classes, arch=arch, rngs=rngs)


def links(model: MobileNetV3) -> list[porting.Link]:
    return model.torch_links()
