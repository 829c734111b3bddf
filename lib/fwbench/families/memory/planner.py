"""The μ-TWO activation-checkpointing planner (Algorithm B): recompute or swap.

Greedy: while the simulated peak exceeds the budget, take the candidate that frees the most
bytes per millisecond the iteration gains. For recomputation that is ``recompute_ratio`` (bytes
per ms of replay). When a copy bandwidth is given, the planner also weighs swapping the largest
idle activation whose round trip fits in its idle time: the simulator says how much the copies
would stall the compute, and a swap that hides entirely behind compute frees its bytes for
nothing. The option with more bytes per added ms wins; a swap needs no replay, so it also serves
activations that cannot be recomputed (dropout's outputs). Choosing to recompute changes the
other candidates:

- Algorithm E: an already chosen recomputation that read the new one must now replay it too, so
  it inherits its sources and its replay time; each such dependant adds one to the new one's
  recomputation count.
- Algorithm F: a remaining candidate that read the new one inherits its sources and replay time;
  one that the new one reads will be replayed once more per dependant, so its total replay time
  grows with the count.

After every choice the simulator (Algorithm G) recomputes the peak. One deviation from the paper:
only candidates that are resident but idle at the current peak are considered, since freeing any
other activation costs time and saves nothing at the peak.

The rewriter executes recomputation only; a plan with swaps is simulated, not run, until the
rewriter can emit the copies on a GPU's side stream.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from fwbench.families.memory.liveness import GraphAnalysis
from fwbench.families.memory.profiler import ActivationStats, Profile, activation_stats
from fwbench.families.memory.simulator import Simulation, simulate


@dataclass
class _PlanStep:
    activation: str
    memory_size: int
    recompute_ratio: float
    predicted_peak_bytes: int
    added_ms: float
    action: str = "recompute"  # or "swap"


@dataclass
class Plan:
    budget_bytes: int
    recompute: list[str]
    baseline_peak_bytes: int
    predicted_peak_bytes: int
    added_ms: float
    met_budget: bool
    steps: list[_PlanStep] = field(default_factory=list)
    simulation: Simulation | None = None
    swap: list[str] = field(default_factory=list)

    @property
    def recomputed_bytes(self) -> int:
        return sum(s.memory_size for s in self.steps if s.action == "recompute")

    @property
    def swapped_bytes(self) -> int:
        return sum(s.memory_size for s in self.steps if s.action == "swap")

    def decision(self, activation: str) -> str:
        """``recomputed``, ``swapped`` or ``kept``."""
        if activation in self.recompute:
            return "recomputed"
        return "swapped" if activation in self.swap else "kept"


def update_recomps(chosen: ActivationStats, recomps: dict[str, ActivationStats]) -> int:
    """Algorithm E; returns how many times ``chosen`` will be replayed."""
    recomp_cnt = 1
    for rp in recomps.values():
        if chosen.name in rp.recomp_srcs:
            rp.recomp_srcs.discard(chosen.name)
            rp.recomp_srcs |= chosen.recomp_srcs
            rp.recomp_time += chosen.recomp_time
            recomp_cnt += 1
    return recomp_cnt


def update_candidates(
    chosen: ActivationStats,
    recomp_cnt: int,
    candidates: dict[str, ActivationStats],
    recomps: dict[str, ActivationStats],
) -> None:
    """Algorithm F."""
    for cand in candidates.values():
        if chosen.name in cand.recomp_srcs:
            cand.recomp_srcs.discard(chosen.name)
            cand.recomp_srcs |= chosen.recomp_srcs
            cand.recomp_time += chosen.recomp_time
            cand.total_recomp_time = cand.recomp_time
            for rp in recomps.values():
                if cand.name in rp.recomp_srcs:
                    cand.total_recomp_time += cand.recomp_time
        if cand.name in chosen.recomp_srcs:
            cand.total_recomp_time = recomp_cnt * cand.recomp_time


def _idle_at(analysis: GraphAnalysis, name: str, rank: int) -> bool:
    act = analysis.activations[name]
    return act.last_forward_use < rank < act.first_backward_use


def plan_recomputation(
    analysis: GraphAnalysis,
    profile: Profile,
    budget_bytes: int,
    *,
    stats: dict[str, ActivationStats] | None = None,
    swap_bandwidth_bytes_per_ms: float | None = None,
) -> Plan:
    """Recompute (and, given a copy bandwidth, swap) activations until the simulated peak fits
    ``budget_bytes`` or nothing helps."""
    stats = copy.deepcopy(stats if stats is not None else activation_stats(analysis, profile))
    candidates = {n: s for n, s in stats.items() if s.memory_size > 0}
    recomps: dict[str, ActivationStats] = {}
    swaps: list[str] = []
    bandwidth = swap_bandwidth_bytes_per_ms

    def run(recompute, swap):
        return simulate(analysis, recompute, profile, swap=swap, bandwidth_bytes_per_ms=bandwidth)

    sim = run((), ())
    baseline_peak = sim.peak_bytes
    steps: list[_PlanStep] = []
    while sim.peak_bytes > budget_bytes:
        peak_rank = int(sim.ranks[sim.peak_index])
        useful = [c for c in candidates.values() if _idle_at(analysis, c.name, peak_rank)]
        recomputable = [c for c in useful if c.recomputable]
        best = max(recomputable, key=lambda c: (c.recompute_ratio, c.name), default=None)
        swap_sim, swap_pick, swap_ratio = None, None, -1.0
        if bandwidth:
            hideable = [c for c in useful if 2 * c.memory_size / bandwidth <= c.inactive_time]
            swap_pick = max(hideable, key=lambda c: (c.memory_size, c.name), default=None)
        if swap_pick is not None:
            swap_sim = run(recomps, [*swaps, swap_pick.name])
            stall = swap_sim.swap_stall_ms - sim.swap_stall_ms
            swap_ratio = swap_pick.memory_size / max(stall, 1e-6)
        if best is None and swap_pick is None:
            break
        if swap_pick is not None and (best is None or swap_ratio >= best.recompute_ratio):
            del candidates[swap_pick.name]
            swaps.append(swap_pick.name)
            sim = swap_sim
            steps.append(
                _PlanStep(
                    swap_pick.name,
                    swap_pick.memory_size,
                    swap_ratio,
                    sim.peak_bytes,
                    sim.added_ms,
                    "swap",
                )
            )
            continue
        chosen = best
        del candidates[chosen.name]
        recomp_cnt = update_recomps(chosen, recomps)
        recomps[chosen.name] = chosen
        update_candidates(chosen, recomp_cnt, candidates, recomps)
        sim = run(recomps, swaps)
        steps.append(
            _PlanStep(
                chosen.name,
                chosen.memory_size,
                chosen.recompute_ratio,
                sim.peak_bytes,
                sim.added_ms,
            )
        )
    return Plan(
        budget_bytes=int(budget_bytes),
        swap=swaps,
        recompute=list(recomps),
        baseline_peak_bytes=baseline_peak,
        predicted_peak_bytes=sim.peak_bytes,
        added_ms=sim.added_ms,
        met_budget=sim.peak_bytes <= budget_bytes,
        steps=steps,
        simulation=sim,
    )


def budget_for_fraction(analysis: GraphAnalysis, baseline_peak_bytes: int, fraction: float) -> int:
    """The peak left when only ``fraction`` of the activation bytes may stay resident."""
    return int(baseline_peak_bytes - (1.0 - fraction) * analysis.activation_bytes())


def pareto_curve(
    analysis: GraphAnalysis, profile: Profile, stats: dict[str, ActivationStats] | None = None
) -> list[dict]:
    """Predicted peak against added time after every greedy choice, down to the smallest peak.

    The greedy order does not depend on the budget (the budget only says when to stop), so one
    run with an unreachable budget traces the whole curve; each point is the plan some budget
    would produce.
    """
    plan = plan_recomputation(analysis, profile, budget_bytes=0, stats=stats)
    points = [
        {"n_recomputed": 0, "predicted_peak_bytes": plan.baseline_peak_bytes, "added_ms": 0.0}
    ]
    for i, step in enumerate(plan.steps, start=1):
        points.append(
            {
                "n_recomputed": i,
                "predicted_peak_bytes": step.predicted_peak_bytes,
                "added_ms": step.added_ms,
            }
        )
    return points
