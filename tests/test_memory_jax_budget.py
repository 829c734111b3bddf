"""The budget-matched JAX policy (families/memory/jax_budget.py): the names and sizes it reads off
a traced program are the ones a hand count gives, and its knapsack keeps the most work within the
budget's bytes."""

import jax.numpy as jnp
import pytest
from jax.ad_checkpoint import checkpoint_name

from fwbench.families.memory import jax_budget
from fwbench.families.memory.jax_budget import Named


def test_the_names_carry_their_bytes_and_the_work_since_the_previous_name():
    def block(x, w):
        h = checkpoint_name(x @ w, "matmul")  # 2 * 4 * 16 * 8 flops, 4 * 16 float32
        return checkpoint_name(jnp.tanh(h), "act")  # one a value

    found = jax_budget.named_activations(block, jnp.ones((4, 8)), jnp.ones((8, 16)))
    assert found == [Named("matmul", 256, 1024.0), Named("act", 256, 64.0)]


def test_a_name_used_twice_adds_both_values():
    def two(x):
        x = checkpoint_name(x * 2.0, "scaled")
        return checkpoint_name(x * 3.0, "scaled")

    assert jax_budget.named_activations(two, jnp.ones((10,))) == [Named("scaled", 80, 20.0)]


NAMED = [Named("a", 100, 10.0), Named("b", 100, 1.0), Named("c", 50, 8.0), Named("d", 50, 7.0)]


@pytest.mark.parametrize(
    "budget, kept",
    [
        (0.0, []),
        (0.2, ["c"]),
        (0.5, ["a", "c"]),
        (0.7, ["a", "c", "d"]),
        (1.0, ["a", "b", "c", "d"]),
    ],
)
def test_the_knapsack_keeps_the_most_work_within_the_budget(budget, kept):
    assert jax_budget.choose(NAMED, budget) == kept


def test_a_tie_in_work_keeps_fewer_bytes():
    tied = [Named("big", 100, 5.0), Named("small", 40, 5.0)]
    assert jax_budget.choose(tied, 1.0 * 100 / 140) == ["small"]


def test_a_budget_outside_zero_to_one_or_a_model_without_names_is_refused():
    with pytest.raises(ValueError, match="0 to 1"):
        jax_budget.choose(NAMED, 1.5)
    with pytest.raises(ValueError, match="names no activations"):
        jax_budget.choose([], 0.5)
