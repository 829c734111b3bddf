"""ViT-B/16 and ViT-B/32 in Flax NNX, torchvision's ``VisionTransformer`` module for module.

The attribute tree follows torchvision's names (conv_proj, class_token, encoder.pos_embedding,
encoder.layers[i].ln_1 / self_attention / ln_2 / mlp, encoder.ln, heads.head) so the port reads
as a list of renames. Attention uses one fused q|k|v projection because torch's
``nn.MultiheadAttention`` stores exactly that (``in_proj_weight`` of shape (3E, E)); the split into
q, k, v and then into heads happens in ``__call__`` in the same order torch uses.

ViT-B/32 is ViT-B/16 with 32x32 patches: the same encoder and widths, so only ``conv_proj``'s
kernel and the position embedding's length (one entry per patch, plus the class token) change.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from fwbench.models import porting
from fwbench.models.conv import Conv

PATCH, HIDDEN, LAYERS, HEADS, MLP_DIM = 16, 768, 12, 12, 3072  # PATCH: ViT-B/16's, the default
LN_EPS = 1e-6  # torchvision's partial(nn.LayerNorm, eps=1e-6), not torch's default 1e-5


def _layer_norm(dim: int, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # two-pass variance like torch; the fast E[x^2] - E[x]^2 form loses digits on large activations
    return nnx.LayerNorm(dim, epsilon=LN_EPS, use_fast_variance=False, rngs=rngs)


def _dropout(rate: float, rngs: nnx.Rngs) -> nnx.Dropout:
    # at rate 0 (torchvision's default) the layer draws nothing, so it holds no RNG stream and the
    # model's state is exactly its weights: it can be built abstractly and filled by the port
    return nnx.Dropout(rate, rngs=rngs if rate > 0 else None)


class MultiheadAttention(nnx.Module):
    def __init__(self, dim: int, heads: int, attention_dropout: float, *, rngs: nnx.Rngs):
        self.heads = heads
        self.in_proj = nnx.Linear(dim, 3 * dim, rngs=rngs)
        self.out_proj = nnx.Linear(dim, dim, rngs=rngs)
        self.attn_dropout = _dropout(attention_dropout, rngs)

    def __call__(self, x):
        n, s, dim = x.shape
        head_dim = dim // self.heads
        # torch chunks the 3E outputs into q, k, v first, then views each as (heads, head_dim)
        qkv = self.in_proj(x).reshape(n, s, 3, self.heads, head_dim)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        # the scope names the scaled-dot-product core in the compiled program's metadata, so a
        # profile counts it as attention, as torch's scaled_dot_product_attention is counted
        with jax.named_scope("attention"):
            logits = jnp.einsum("nhqd,nhkd->nhqk", q, k) / math.sqrt(head_dim)
            weights = self.attn_dropout(jax.nn.softmax(logits, axis=-1))
            out = jnp.einsum("nhqk,nhkd->nqhd", weights, v).reshape(n, s, dim)
        return self.out_proj(out)


def _normed(norm: nnx.LayerNorm, x):
    """A LayerNorm under a named scope, which a profile counts as normalisation."""
    with jax.named_scope("layer_norm"):
        return norm(x)


class _MLPBlock(nnx.Module):
    def __init__(self, dim: int, mlp_dim: int, dropout: float, *, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(dim, mlp_dim, rngs=rngs)  # torch key mlp.0
        self.dropout1 = _dropout(dropout, rngs)
        self.fc2 = nnx.Linear(mlp_dim, dim, rngs=rngs)  # torch key mlp.3
        self.dropout2 = _dropout(dropout, rngs)

    def __call__(self, x):
        x = self.dropout1(jax.nn.gelu(self.fc1(x), approximate=False))  # nn.GELU() is the erf form
        return self.dropout2(self.fc2(x))


class _EncoderBlock(nnx.Module):
    def __init__(self, dropout: float, attention_dropout: float, *, rngs: nnx.Rngs):
        self.ln_1 = _layer_norm(HIDDEN, rngs)
        self.self_attention = MultiheadAttention(HIDDEN, HEADS, attention_dropout, rngs=rngs)
        self.dropout = _dropout(dropout, rngs)
        self.ln_2 = _layer_norm(HIDDEN, rngs)
        self.mlp = _MLPBlock(HIDDEN, MLP_DIM, dropout, rngs=rngs)

    def __call__(self, x):
        x = x + self.dropout(self.self_attention(_normed(self.ln_1, x)))
        return x + self.mlp(_normed(self.ln_2, x))


class Encoder(nnx.Module):
    def __init__(self, seq_length: int, dropout: float, attention_dropout: float, *, rngs):
        self.pos_embedding = nnx.Param(
            0.02 * jax.random.normal(rngs.params(), (1, seq_length, HIDDEN))
        )
        self.dropout = _dropout(dropout, rngs)
        self.layers = nnx.List(
            [_EncoderBlock(dropout, attention_dropout, rngs=rngs) for _ in range(LAYERS)]
        )
        self.ln = _layer_norm(HIDDEN, rngs)

    def __call__(self, x):
        x = self.dropout(x + self.pos_embedding[...])
        for layer in self.layers:
            x = layer(x)
        return _normed(self.ln, x)


class VisionTransformer(nnx.Module):
    def __init__(
        self,
        num_classes: int = 1000,
        *,
        image_size: int = 224,
        patch: int = PATCH,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        rngs: nnx.Rngs,
    ):
        if image_size % patch:
            raise ValueError(f"image_size {image_size} is not a multiple of the patch size {patch}")
        self.conv_proj = Conv(3, HIDDEN, (patch, patch), (patch, patch), padding="VALID", rngs=rngs)
        self.class_token = nnx.Param(jnp.zeros((1, 1, HIDDEN), jnp.float32))
        seq_length = (image_size // patch) ** 2 + 1
        self.encoder = Encoder(seq_length, dropout, attention_dropout, rngs=rngs)
        self.head = nnx.Linear(HIDDEN, num_classes, rngs=rngs)  # torch key heads.head

    def __call__(self, x):
        patches = self.conv_proj(x)
        n, h, w, c = patches.shape
        # NHWC row-major flattening visits patches in the same order as torch's NCHW reshape
        tokens = patches.reshape(n, h * w, c)
        cls = jnp.broadcast_to(self.class_token[...], (n, 1, c))
        x = self.encoder(jnp.concatenate([cls, tokens], axis=1))
        return self.head(x[:, 0])


def build_flax(
    num_classes: int = 1000,
    *,
    rngs: nnx.Rngs,
    image_size: int = 224,
    patch: int = PATCH,
    dropout: float = 0.0,
    attention_dropout: float = 0.0,
) -> VisionTransformer:
    """ViT-B/``patch``; ``image_size`` sets the position-embedding length as in torchvision."""
    return VisionTransformer(
        num_classes,
        image_size=image_size,
        patch=patch,
        dropout=dropout,
        attention_dropout=attention_dropout,
        rngs=rngs,
    )


def _in_proj_to_flax(w):
    # in_proj_weight stacks Wq, Wk, Wv as row blocks of shape (E, E); each becomes a column block
    # of the (E, 3E) kernel, which __call__ reshapes as (3, heads, head_dim) in the same order.
    q, k, v = np.split(w, 3, axis=0)
    return np.concatenate([q.T, k.T, v.T], axis=1)


def _in_proj_to_torch(kernel):
    q, k, v = np.split(kernel, 3, axis=1)
    return np.concatenate([q.T, k.T, v.T], axis=0)


def _attention_links(attn: MultiheadAttention, prefix: str) -> list[porting.Link]:
    in_proj = attn.in_proj
    return [
        porting.Link(
            f"{prefix}.in_proj_weight", in_proj.kernel, _in_proj_to_flax, _in_proj_to_torch
        ),
        porting.Link(f"{prefix}.in_proj_bias", in_proj.bias),  # already q|k|v, same as the kernel
        *porting.linear_links(attn.out_proj, f"{prefix}.out_proj"),
    ]


def links(model: VisionTransformer) -> list[porting.Link]:
    out = porting.conv_links(model.conv_proj, "conv_proj")
    out.append(porting.Link("class_token", model.class_token))
    out.append(porting.Link("encoder.pos_embedding", model.encoder.pos_embedding))
    for i, layer in enumerate(model.encoder.layers):
        prefix = f"encoder.layers.encoder_layer_{i}"
        out += porting.layernorm_links(layer.ln_1, f"{prefix}.ln_1")
        out += _attention_links(layer.self_attention, f"{prefix}.self_attention")
        out += porting.layernorm_links(layer.ln_2, f"{prefix}.ln_2")
        out += porting.linear_links(layer.mlp.fc1, f"{prefix}.mlp.0")
        out += porting.linear_links(layer.mlp.fc2, f"{prefix}.mlp.3")
    out += porting.layernorm_links(model.encoder.ln, "encoder.ln")
    return out + porting.linear_links(model.head, "heads.head")
