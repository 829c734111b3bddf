"""The float64 gradient gate on the baselines: a checkpointing or compiler plan may change when
activations exist, never what the step computes.

The μ-TWO rewrites have their own proof (``study.exact_equivalence`` over the traced graph). The
baselines a user would reach for instead, ``torch.utils.checkpoint`` on segments of blocks and
torch.compile under ``activation_memory_budget``, are gated here the same way: the case built in
float64 in training mode, dropout active, one forward and backward pass under the plan against
the eager pass from the same generator state, gradient by gradient. Within ``TOLERANCE`` it
passes; otherwise the gate names the parameter whose gradient is furthest off.

Dropout is why the gate exists. A recompute that draws fresh random numbers computes the loss of
one mask and the gradient of another, with no error: ``torch.utils.checkpoint`` does it when told
not to keep the generator state (``preserve_rng_state=False``, the deliberately wrong recompute
the tests use), and pytorch#190758 reports that torch.compile's partitioner does it at any
``activation_memory_budget`` below 1.0. In float64 such a gradient is off by far more than any
rounding.

Compiled steps run with Inductor's ``fallback_random``: Inductor then draws from torch's generator
as eager does, so one seed gives both the same masks; with its own generator no eager reference
could match, planned or not. The unplanned compiled step (budget 1.0) is the check that this
holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch

from fwbench.families.memory import footprint, torch_internals
from fwbench.families.memory.cases import ModelCase
from fwbench.vocab import MEMORY_EXACT_TOLERANCE

TOLERANCE = MEMORY_EXACT_TOLERANCE  # as the μ-TWO rewrites' float64 proof


@dataclass(frozen=True)
class Gate:
    method: str
    max_abs_diff: float  # the largest gradient difference from the unplanned step's, any tensor
    worst: str  # the parameter whose gradient differs most
    loss_diff: float  # the planned forward's loss against the unplanned one's

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= TOLERANCE and self.loss_diff <= TOLERANCE

    def reason(self) -> str | None:
        """One line saying why a plan failed; None when it passed."""
        if self.passed:
            return None
        if self.loss_diff > TOLERANCE:
            return f"{self.method} computes another loss (off by {self.loss_diff:.2g})"
        return (
            f"{self.method} computes another gradient: {self.worst} is off by "
            f"{self.max_abs_diff:.2g} at most, the forward's loss the same"
        )


Gradients = tuple[float, dict[str, torch.Tensor]]


def step_gradients(
    case: ModelCase, module: torch.nn.Module | None = None, seed: int = 0
) -> Gradients:
    """The loss and every parameter's gradient of one step of ``module`` (the case's model by
    default), the generator seeded first so that every call draws the same dropout masks."""
    torch.manual_seed(seed)
    module = case.model if module is None else module
    named = list(case.model.named_parameters())
    loss = case.loss_fn(module(case.batch), case.targets)
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return loss.item(), {
        name: torch.zeros_like(p) if g is None else g.detach()
        for (name, p), g in zip(named, grads, strict=True)
    }


def compare(method: str, planned: Gradients, reference: Gradients) -> Gate:
    diffs = {
        name: (planned[1][name] - grad).abs().max().item() for name, grad in reference[1].items()
    }
    worst = max(diffs, key=lambda name: diffs[name])
    # a NaN gradient is as far off as a gradient can be
    worst_diff = math.inf if math.isnan(diffs[worst]) else diffs[worst]
    return Gate(method, worst_diff, worst, abs(planned[0] - reference[0]))


def check(
    case: ModelCase,
    method: str,
    plan: Callable[[], AbstractContextManager[torch.nn.Module]],
    reference: Gradients,
    seed: int = 0,
) -> Gate:
    """``plan()`` opens the planned model for the block; its step against ``reference``."""
    with plan() as module:
        return compare(method, step_gradients(case, module, seed), reference)


@contextmanager
def checkpointed(case: ModelCase, size: int) -> Iterator[torch.nn.Module]:
    with footprint.checkpoint_segments(case.blocks, size):
        yield case.model


@contextmanager
def compiled(case: ModelCase, budget: float, backend: str) -> Iterator[torch.nn.Module]:
    torch.compiler.reset()
    with (
        torch_internals.activation_memory_budget(budget),
        torch_internals.inductor_fallback_random(),
    ):
        try:
            yield torch.compile(case.model, backend=backend)
        finally:
            torch.compiler.reset()


def gate_baselines(
    case: ModelCase,
    *,
    checkpoint_every: list[int] = (1,),
    sqrt_n: bool = False,
    compile_budgets: list[float] = (),
    compile_backend: str = "inductor",
    seed: int = 0,
) -> dict[str, Gate]:
    """Every baseline the study measures, by method name, gated against the eager step.

    ``case`` must be in float64 and in training mode, as the measured case is."""
    if case.batch.is_floating_point() and case.batch.dtype != torch.float64:
        raise ValueError(f"the gate runs in float64, not {case.batch.dtype}")
    reference = step_gradients(case, seed=seed)
    sizes = footprint.checkpoint_sizes(case.blocks, checkpoint_every, sqrt_n)
    gates = {
        method: check(case, method, lambda size=size: checkpointed(case, size), reference, seed)
        for size, method in sizes
    }
    for budget in compile_budgets:
        method = footprint.compile_method(budget)
        plan = lambda budget=budget: compiled(case, budget, compile_backend)  # noqa: E731
        gates[method] = check(case, method, plan, reference, seed)
    return gates
