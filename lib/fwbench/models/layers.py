"""Flax NNX layers whose semantics match torch's exactly, where Flax's built-ins differ.

``nnx.BatchNorm`` updates its running variance with the biased batch variance and uses the
momentum convention ``ra = m * ra + (1 - m) * x``; torch uses the unbiased variance and
``ra = (1 - m) * ra + m * x`` with m = 0.1. Training parity across frameworks needs torch's rule.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name


def stats_dtype(dtype):
    """The dtype normalisation statistics are computed in: ``dtype`` promoted to at least fp32."""
    return jnp.promote_types(dtype, jnp.float32)


def named(x, name: str):
    """``x`` under a name a checkpoint policy can save it by (``families/memory/jax_budget.py``).

    Without such a policy the compiled program is the same: the name is metadata only."""
    return checkpoint_name(x, name)


class TorchBatchNorm(nnx.Module):
    """BatchNorm over the last (channel) axis with torch.nn.BatchNorm2d's training semantics."""

    def __init__(self, num_features: int, *, eps: float = 1e-5, momentum: float = 0.1):
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.use_running_average = False  # flipped by Module.eval() / Module.train()
        self.scale = nnx.Param(jnp.ones((num_features,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((num_features,), jnp.float32))
        self.mean = nnx.BatchStat(jnp.zeros((num_features,), jnp.float32))
        self.var = nnx.BatchStat(jnp.ones((num_features,), jnp.float32))

    def __call__(self, x):
        # the scope names these ops in the compiled program's metadata: a profile counts them as
        # normalisation where XLA does not fuse them into the convolution before
        with jax.named_scope("batch_norm"):
            return self._normalise(x)

    def _normalise(self, x):
        if self.use_running_average:
            mean, var = self.mean[...], self.var[...]
        else:
            axes = tuple(range(x.ndim - 1))
            # statistics in at least fp32 (bf16 activations are promoted, as torch's kernels
            # accumulate them); an fp64 model keeps fp64, or the fp64 parity gate would be void
            xs = x.astype(stats_dtype(x.dtype))
            mean = jnp.mean(xs, axis=axes)
            var = jnp.mean(jnp.square(xs - mean), axis=axes)
            count = x.size // x.shape[-1]
            unbiased = var * (count / max(count - 1, 1))
            m = self.momentum
            self.mean[...] = (1 - m) * self.mean[...] + m * mean
            self.var[...] = (1 - m) * self.var[...] + m * unbiased
        inv = (self.scale[...] * jnp.reciprocal(jnp.sqrt(var + self.eps))).astype(x.dtype)
        shift = self.bias[...] - mean * self.scale[...] * jnp.reciprocal(jnp.sqrt(var + self.eps))
        return x * inv + shift.astype(x.dtype)
