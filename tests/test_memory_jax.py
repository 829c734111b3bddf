"""JAX's activation-memory planners (families/memory/jax_remat.py): the memory XLA plans for a
step agrees with PyTorch's allocator on a model whose activations are known by hand, the methods
name the torch baselines' segments, and the gradient gate catches a recompute that draws fresh
randomness. The planners on a real Flax ResNet, with their float64 gate, run in
tests/test_memory_notebook.py through 12_memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from fwbench.families.memory import footprint, jax_remat
from fwbench.measure.timing import StopRule
from fwbench.models import equivalence
from fwbench.vocab import MEMORY_EXACT_TOLERANCE

RULE = StopRule(min_iters=2, min_seconds=0.0)
BATCH, WIDTH, LAYERS = 4096, 64, 48  # activations 1 MiB a layer, weights 16 KiB


class Chain(nnx.Module):
    """``LAYERS`` bias-free linear layers: each keeps its input for the backward pass, so the
    activations a step holds are known by hand, ``(LAYERS - 1) * BATCH * WIDTH`` floats beyond
    the batch itself, on both sides."""

    def __init__(self, rngs: nnx.Rngs):
        self.layers = nnx.List(
            [nnx.Linear(WIDTH, WIDTH, use_bias=False, rngs=rngs) for _ in range(LAYERS)]
        )

    def stem(self, x):
        return x

    def blocks(self):
        return list(self.layers)

    def head(self, x):
        return x


def _torch_peak_beyond_inputs() -> int:
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)))
    x = torch.randn(BATCH, WIDTH)
    y = torch.randint(0, WIDTH, (BATCH,))
    optimizer = torch.optim.Adam(model.parameters(), foreach=False)

    def step():
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # Adam's state exists before the measured step, as in footprint.measure
    state = [t for s in optimizer.state.values() for t in s.values() if t.dim()]
    inputs = [*model.parameters(), *state, x, y]
    return footprint.measure_peak(step, inputs, "cpu") - footprint.storage_bytes(inputs)


def test_xla_and_the_torch_allocator_count_the_same_activations():
    by_hand = (LAYERS - 1) * BATCH * WIDTH * 4
    torch_bytes = _torch_peak_beyond_inputs()
    model = Chain(nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((BATCH, WIDTH)), jnp.float32)
    y = jnp.asarray(np.random.default_rng(1).integers(0, WIDTH, BATCH), jnp.int32)
    found = jax_remat.measure(model, x, y, "jax_none", 0, None, RULE)
    jax_bytes = found.peak_bytes - found.argument_bytes
    assert jax_bytes == pytest.approx(torch_bytes, rel=0.05), (jax_bytes, torch_bytes, by_hand)
    for measured in (jax_bytes, torch_bytes):  # the rest is the backward pass's working buffers
        assert by_hand <= measured <= 1.10 * by_hand


def test_the_methods_name_the_same_segments_as_the_torch_baselines():
    found = jax_remat.methods(16, [1, 2], True, list(jax_remat.POLICIES))
    assert [(name, size) for name, size, _ in found] == [
        ("jax_none", 0), ("jax_remat_every_1", 1), ("jax_remat_every_2", 2),
        ("jax_remat_sqrt_n", 4), ("jax_policy_dots_saveable", 1),
        ("jax_policy_dots_with_no_batch_dims_saveable", 1), ("jax_policy_nothing_saveable", 1),
    ]  # fmt: skip
    assert found[4][2] is jax.checkpoint_policies.dots_saveable
    with pytest.raises(ValueError, match="unknown JAX checkpoint policy"):
        jax_remat.method_name(policy="everything")


def _mask(key, shape):
    return jax.random.bernoulli(key, 0.5, shape) * 2.0


def _dropout_recomputed(fresh: bool):
    """Dropout that saves nothing and draws its mask again for the backward pass, as a
    recomputing plan does: from the same key (a correct recompute) or a fresh one (the bug
    torch's partitioner has under an activation budget, pytorch#190758)."""

    @jax.custom_vjp
    def drop(x):
        return x * _mask(jax.random.key(0), x.shape)

    def fwd(x):
        return drop(x), x.shape

    def bwd(shape, g):
        return (g * _mask(jax.random.key(1 if fresh else 0), shape),)

    drop.defvjp(fwd, bwd)
    return drop


def _with_dropout(drop):
    def run(model, x):
        for layer in model.blocks()[:4]:
            x = drop(layer(x))
        return x

    return run


@pytest.mark.parametrize("fresh", [False, True])
def test_the_gate_fails_a_recompute_with_fresh_randomness(fresh):
    def plain(x):  # autodiff keeps the mask it drew
        return x * _mask(jax.random.key(0), x.shape)

    with equivalence.float64_on_cpu():
        model = equivalence.flax_float64(Chain(nnx.Rngs(0)))
        x = jnp.asarray(np.random.default_rng(0).standard_normal((8, WIDTH)))
        y = jnp.asarray(np.arange(8), jnp.int32)
        gated = jax_remat.gate(
            model, x, y, MEMORY_EXACT_TOLERANCE,
            run=_with_dropout(_dropout_recomputed(fresh)), plain=_with_dropout(plain),
        )  # fmt: skip
    assert gated["passed"] is (not fresh), gated
    if fresh:
        assert gated["worst_tensor"] and gated["exact_max_abs_diff"] > 1e-3
