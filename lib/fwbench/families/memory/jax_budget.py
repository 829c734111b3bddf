"""A JAX checkpoint policy that meets a memory budget, the way fwbench's μ-TWO plan does in PyTorch.

JAX's standard policies save a fixed kind of value (every matmul's output, or nothing). A user who
wants "keep at most this share of the activations" names the values a block makes
(``jax.ad_checkpoint.checkpoint_name``, as the BERT and ResNet twins do) and saves only some of
them (``jax.checkpoint_policies.save_only_these_names``). Which ones is a knapsack: keep the
names whose recomputation would cost the most, within the budget's bytes, recompute the rest.

- ``named_activations`` reads the names off the traced forward pass: per name, the bytes its
  values take over all blocks, and the work that recomputing them repeats (every operation since
  the previous named value: a matmul's 2·M·N·K, an elementwise operation one per value).
- ``choose`` solves the knapsack exactly (scipy's ``milp``).
- ``policy`` is the ``save_only_these_names`` policy of the chosen names.

The budget is the share of the named activations' bytes kept for the backward pass, the
counterpart of the μ-TWO budget's share of the activation memory left at the peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import numpy as np
from jax.extend import core as jex
from scipy.optimize import Bounds, LinearConstraint, milp

_TIE = 1e-4  # the weight of the bytes kept against the work kept (both as shares of their total)


@dataclass(frozen=True)
class Named:
    name: str
    nbytes: int  # over every value of this name in one forward pass
    flops: float  # the work since the previous named value, which recomputing it repeats


def _sub_jaxprs(params: dict):
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jex.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jex.Jaxpr):
                yield item


def _flops(eqn) -> float:
    out = eqn.outvars[0].aval if eqn.outvars else None
    size = float(math.prod(getattr(out, "shape", ()) or (1,)))
    if eqn.primitive.name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval
        return 2.0 * size * math.prod(lhs.shape[i] for i in lhs_contract)
    return size


def _walk(jaxpr, found: dict, pending: list[float]) -> None:
    """Add each named value's bytes and the work since the last one to ``found``."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "name":
            aval = eqn.invars[0].aval
            nbytes, flops = found.get(eqn.params["name"], (0, 0.0))
            found[eqn.params["name"]] = (
                nbytes + aval.size * aval.dtype.itemsize,
                flops + pending[0],
            )
            pending[0] = 0.0
            continue
        subs = list(_sub_jaxprs(eqn.params))
        for sub in subs:
            _walk(sub, found, pending)
        if not subs:
            pending[0] += _flops(eqn)


def named_activations(fn, *args) -> list[Named]:
    """The values ``fn(*args)`` names with ``checkpoint_name``, in the order first met."""
    found: dict[str, tuple[int, float]] = {}
    _walk(jax.make_jaxpr(fn)(*args).jaxpr, found, [0.0])
    return [Named(name, nbytes, flops) for name, (nbytes, flops) in found.items()]


def choose(named: list[Named], budget: float) -> list[str]:
    """The names to save: the most recomputation avoided with at most ``budget`` (0 to 1) of
    the named bytes kept (a 0/1 knapsack, solved to optimality by scipy's mixed-integer solver);
    between savings of work within 0.01% of all the work, the one that keeps fewer bytes."""
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"a budget is a share of the named activations, 0 to 1: {budget}")
    if not named:
        raise ValueError("the model names no activations (checkpoint_name): no budget to plan")
    work = np.array([n.flops for n in named]) / max(sum(n.flops for n in named), 1.0)
    share = np.array([float(n.nbytes) for n in named]) / max(sum(n.nbytes for n in named), 1)
    found = milp(
        -work + _TIE * share,  # milp minimises: the most work kept, then the fewest bytes
        constraints=LinearConstraint(share[None, :], -np.inf, budget + 1e-12),
        integrality=np.ones(len(named)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    if not found.success:  # keeping nothing always fits: this is the solver's failure
        raise RuntimeError(
            f"the knapsack of {len(named)} named activations failed: {found.message}"
        )
    return [n.name for n, x in zip(named, found.x, strict=True) if x > 0.5]


def policy(names: list[str]):
    """JAX's policy that saves the values with these names and recomputes every other."""
    return jax.checkpoint_policies.save_only_these_names(*names)
