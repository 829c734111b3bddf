"""A wav2vec2 speech encoder in Flax NNX, ``transformers``' ``Wav2Vec2Model`` module for module.

Raw 16 kHz audio of any length goes through the convolutional feature encoder (seven 1-D
convolutions, the first followed by a per-channel GroupNorm, each by an exact GELU), the feature
projection (LayerNorm, Linear), the convolutional position embedding (one grouped convolution
under weight normalisation, its last frame dropped when the kernel is even, GELU), a LayerNorm and
the post-norm Transformer layers (attention, residual, LayerNorm, feed-forward, residual,
LayerNorm). The output is the last hidden state, (batch, frames, hidden).

The attribute tree follows ``transformers``' names so that the port is a list of renames. The
position embedding keeps weight normalisation's two tensors, as torch's parametrisation stores
them (``original0``, the gain g of shape (1, 1, K), and ``original1``, the direction v), and
computes the weight w = g · v / ‖v‖ in the forward as torch does, the norm over every axis but
the kernel's (``weight_norm(dim=2)``). Dropout and the masking of training are left out: this twin
computes the encoder of inference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting

LN_EPS = 1e-5  # transformers' Wav2Vec2Config.layer_norm_eps


@dataclass(frozen=True)
class _SpeechConfig:
    conv_dim: tuple[int, ...] = (512,) * 7
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    num_conv_pos_embeddings: int = 128
    num_conv_pos_embedding_groups: int = 16

    def frames(self, samples: int) -> int:
        """Output frames for ``samples`` input samples (no padding in the feature encoder)."""
        for kernel, stride in zip(self.conv_kernel, self.conv_stride, strict=True):
            samples = (samples - kernel) // stride + 1
        return samples


# ``base`` is wav2vec2-base's encoder (about 94 M parameters); ``tiny`` keeps its shape at a width
# of 256 and four layers (about 4.7 M), for tests and the browser's software WebGPU.
SIZES = {
    "base": _SpeechConfig(),
    "tiny": _SpeechConfig(
        conv_dim=(256,) * 7,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
    ),
}


def _gelu(x):
    return jax.nn.gelu(x, approximate=False)  # torch's default, erf-based


def _layer_norm(dim: int, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(dim, epsilon=LN_EPS, use_fast_variance=False, rngs=rngs)


class _ChannelGroupNorm(nnx.Module):
    """GroupNorm with one group per channel, over time: the first feature layer's norm."""

    def __init__(self, channels: int):
        self.weight = nnx.Param(jnp.ones((channels,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((channels,), jnp.float32))

    def __call__(self, x):  # (batch, time, channels)
        mean = jnp.mean(x, axis=1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + LN_EPS) * self.weight[...] + self.bias[...]


class _FeatureLayer(nnx.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, norm: bool, rngs):
        self.conv = nnx.Conv(
            c_in,
            c_out,
            kernel_size=(kernel,),
            strides=(stride,),
            padding="VALID",
            use_bias=False,
            rngs=rngs,
        )
        self.layer_norm = _ChannelGroupNorm(c_out) if norm else None

    def __call__(self, x):
        x = self.conv(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return _gelu(x)


class _FeatureEncoder(nnx.Module):
    def __init__(self, config: _SpeechConfig, rngs: nnx.Rngs):
        widths = (1, *config.conv_dim)
        self.conv_layers = nnx.List(
            [
                _FeatureLayer(widths[i], widths[i + 1], k, s, i == 0, rngs)
                for i, (k, s) in enumerate(zip(config.conv_kernel, config.conv_stride, strict=True))
            ]
        )

    def __call__(self, audio):  # (batch, samples) -> (batch, frames, channels)
        x = audio[:, :, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x


class _FeatureProjection(nnx.Module):
    def __init__(self, config: _SpeechConfig, rngs: nnx.Rngs):
        self.layer_norm = _layer_norm(config.conv_dim[-1], rngs)
        self.projection = nnx.Linear(config.conv_dim[-1], config.hidden_size, rngs=rngs)

    def __call__(self, x):
        return self.projection(self.layer_norm(x))


class _PositionalConvEmbedding(nnx.Module):
    def __init__(self, config: _SpeechConfig):
        dim, k, groups = (
            config.hidden_size,
            config.num_conv_pos_embeddings,
            config.num_conv_pos_embedding_groups,
        )
        self.kernel, self.groups = k, groups
        # torch layout (out, in / groups, kernel), as the parametrisation stores it
        self.weight_g = nnx.Param(jnp.ones((1, 1, k), jnp.float32))
        self.weight_v = nnx.Param(jnp.zeros((dim, dim // groups, k), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((dim,), jnp.float32))

    def __call__(self, x):  # (batch, frames, hidden)
        v = self.weight_v[...]
        norm = jnp.sqrt(jnp.sum(jnp.square(v), axis=(0, 1), keepdims=True))
        weight = self.weight_g[...] * v / norm
        pad = self.kernel // 2
        y = (
            jax.lax.conv_general_dilated(
                x,
                jnp.transpose(weight, (2, 1, 0)),  # (kernel, in / groups, out)
                window_strides=(1,),
                padding=[(pad, pad)],
                dimension_numbers=("NWC", "WIO", "NWC"),
                feature_group_count=self.groups,
            )
            + self.bias[...]
        )
        if self.kernel % 2 == 0:  # transformers' SamePadLayer
            y = y[:, :-1]
        return _gelu(y)


class Attention(nnx.Module):
    def __init__(self, dim: int, heads: int, rngs: nnx.Rngs):
        self.heads = heads
        self.q_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.k_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.v_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.out_proj = nnx.Linear(dim, dim, rngs=rngs)

    def __call__(self, x):
        n, t, dim = x.shape
        head_dim = dim // self.heads

        def heads(y):
            return y.reshape(n, t, self.heads, head_dim).transpose(0, 2, 1, 3)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        with jax.named_scope("attention"):
            logits = jnp.einsum("nhqd,nhkd->nhqk", q, k) / math.sqrt(head_dim)
            out = jnp.einsum("nhqk,nhkd->nqhd", jax.nn.softmax(logits, axis=-1), v)
        return self.out_proj(out.reshape(n, t, dim))


class _FeedForward(nnx.Module):
    def __init__(self, dim: int, inner: int, rngs: nnx.Rngs):
        self.intermediate_dense = nnx.Linear(dim, inner, rngs=rngs)
        self.output_dense = nnx.Linear(inner, dim, rngs=rngs)

    def __call__(self, x):
        return self.output_dense(_gelu(self.intermediate_dense(x)))


class _EncoderLayer(nnx.Module):
    def __init__(self, config: _SpeechConfig, rngs: nnx.Rngs):
        dim = config.hidden_size
        self.attention = Attention(dim, config.num_attention_heads, rngs)
        self.layer_norm = _layer_norm(dim, rngs)
        self.feed_forward = _FeedForward(dim, config.intermediate_size, rngs)
        self.final_layer_norm = _layer_norm(dim, rngs)

    def __call__(self, x):
        x = self.layer_norm(x + self.attention(x))
        return self.final_layer_norm(x + self.feed_forward(x))


class Encoder(nnx.Module):
    def __init__(self, config: _SpeechConfig, rngs: nnx.Rngs):
        self.pos_conv_embed = _PositionalConvEmbedding(config)
        self.layer_norm = _layer_norm(config.hidden_size, rngs)
        self.layers = nnx.List(
            [_EncoderLayer(config, rngs) for _ in range(config.num_hidden_layers)]
        )

    def __call__(self, x):
        x = self.layer_norm(x + self.pos_conv_embed(x))
        for layer in self.layers:
            x = layer(x)
        return x


class Wav2Vec2(nnx.Module):
    def __init__(self, config: _SpeechConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.feature_extractor = _FeatureEncoder(config, rngs)
        self.feature_projection = _FeatureProjection(config, rngs)
        self.encoder = Encoder(config, rngs)
        # the learned vector that training's time masking writes over masked frames: ported so the
        # port stays one-to-one with torch's state_dict, unused by inference
        self.masked_spec_embed = nnx.Param(jnp.zeros((config.hidden_size,), jnp.float32))

    def __call__(self, audio):
        return self.encoder(self.feature_projection(self.feature_extractor(audio)))


def _conv1d_to_flax(w):
    return w.transpose(2, 1, 0)  # (out, in, kernel) -> (kernel, in, out)


def _conv1d_to_torch(w):
    return w.transpose(2, 1, 0)


def links(model: Wav2Vec2) -> list[porting.Link]:
    """Every Flax variable and the ``transformers`` state_dict key that fills it."""
    out = [porting.Link("masked_spec_embed", model.masked_spec_embed)]
    for i, layer in enumerate(model.feature_extractor.conv_layers):
        prefix = f"feature_extractor.conv_layers.{i}"
        out.append(
            porting.Link(
                f"{prefix}.conv.weight", layer.conv.kernel, _conv1d_to_flax, _conv1d_to_torch
            )
        )
        if layer.layer_norm is not None:
            out += [
                porting.Link(f"{prefix}.layer_norm.weight", layer.layer_norm.weight),
                porting.Link(f"{prefix}.layer_norm.bias", layer.layer_norm.bias),
            ]
    out += porting.layernorm_links(
        model.feature_projection.layer_norm, "feature_projection.layer_norm"
    )
    out += porting.linear_links(
        model.feature_projection.projection, "feature_projection.projection"
    )
    pos = model.encoder.pos_conv_embed
    prefix = "encoder.pos_conv_embed.conv"
    out += [
        porting.Link(f"{prefix}.parametrizations.weight.original0", pos.weight_g),
        porting.Link(f"{prefix}.parametrizations.weight.original1", pos.weight_v),
        porting.Link(f"{prefix}.bias", pos.bias),
    ]
    out += porting.layernorm_links(model.encoder.layer_norm, "encoder.layer_norm")
    for i, layer in enumerate(model.encoder.layers):
        prefix = f"encoder.layers.{i}"
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out += porting.linear_links(
                getattr(layer.attention, name), f"{prefix}.attention.{name}"
            )
        out += porting.layernorm_links(layer.layer_norm, f"{prefix}.layer_norm")
        out += porting.linear_links(
            layer.feed_forward.intermediate_dense, f"{prefix}.feed_forward.intermediate_dense"
        )
        out += porting.linear_links(
            layer.feed_forward.output_dense, f"{prefix}.feed_forward.output_dense"
        )
        out += porting.layernorm_links(layer.final_layer_norm, f"{prefix}.final_layer_norm")
    return out
