"""One model at one batch size through the whole memory study: trace, profile, plan, rewrite,
check, measure every method, and turn the outcome into a tidy frame and records."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from fwbench.families.memory import (
    footprint,
    gate,
    planner,
    profiler,
    rewriter,
    simulator,
    torch_internals,
    tracer,
)
from fwbench.families.memory import liveness as graph_analysis
from fwbench.families.memory.cases import build_case
from fwbench.measure import device as fw_device
from fwbench.measure.timing import StopRule
from fwbench.vocab import MEMORY_EXACT_TOLERANCE

REFERENCE_METHOD = "none"  # every overhead and saving is relative to the plain eager step


@dataclass
class BatchResult:
    model: str
    batch_size: int
    torch_version: str
    analysis: graph_analysis.GraphAnalysis
    profile: profiler.Profile
    baseline: simulator.Simulation
    stats: dict[str, profiler.ActivationStats]
    plans: dict[float, planner.Plan] = field(default_factory=dict)
    measurements: list[footprint.Measurement] = field(default_factory=list)
    pareto: list[dict] = field(default_factory=list)
    swap_plans: dict[float, planner.Plan] = field(default_factory=dict)
    swap_bandwidth_gbs: float | None = None
    exact: dict[float, rewriter.Equivalence] = field(default_factory=dict)  # float64 checks
    gates: dict[str, gate.Gate] = field(default_factory=dict)  # the baselines' float64 gate
    # the unplanned graph and each eager plan, one step each per round, rounds interleaved in
    # this process (``footprint.interleaved_rounds``): method -> ms per round
    round_ms: dict[str, list[float]] = field(default_factory=dict)
    round_faults: dict[str, list[int]] = field(default_factory=dict)  # minor page faults
    round_contention: list[dict | None] = field(default_factory=list)  # the machine, per round
    # method -> graphs torch.compile made of it (one more than its graph breaks)
    compiled_graphs: dict[str, int] = field(default_factory=dict)
    random_replays: dict[str, int] = field(default_factory=dict)  # plan method -> replayed masks
    inductor_locality: bool = True  # whether every compilation ran Inductor's reorder_for_locality

    @property
    def activation_peak_bytes(self) -> int:
        """The activation memory: the most activation bytes alive at once in the unplanned
        graph's simulation (its activations' own high-water mark)."""
        return int(self.baseline.by_kind["ACT"].max())

    @property
    def activation_at_peak_bytes(self) -> int:
        """Activation bytes alive at the unplanned graph's simulated peak of all memory; zero
        when the peak sits in the optimizer update, where no plan can lower it."""
        return int(self.baseline.breakdown_at_peak()["ACT"])


def plan_method(fraction: float) -> str:
    return f"mu_two@{fraction:g}"


def _compiled_plan_method(fraction: float) -> str:
    return f"compiled_mu_two@{fraction:g}"


# the traced step without a plan, compiled whole: what a compiled plan is to be read against
COMPILED_GRAPH_METHOD = "compiled_graph"


def swap_plan_method(fraction: float) -> str:
    return f"mu_two_swap@{fraction:g}"


def method_kind(method: str) -> tuple[str, float | None]:
    """The line a method belongs to on the memory-time curve, and its budget where it has one:
    ``mu_two@0.5`` -> ("mu_two", 0.5), ``checkpoint_every_2`` -> ("checkpoint", None)."""
    for prefix, kind in (
        ("compiled_mu_two@", "compiled_mu_two"),
        ("mu_two_swap@", "mu_two_swap"),
        ("mu_two@", "mu_two"),
        ("compile_budget_", "compile_budget"),
    ):
        if method.startswith(prefix):
            return kind, float(method[len(prefix) :])
    if method.startswith("checkpoint_"):
        return "checkpoint", None
    return method, None


def run_batch(
    model: str,
    batch_size: int,
    *,
    fractions: list[float],
    rule: StopRule,
    device: str = "cpu",
    image_size: int = 224,
    seq_len: int = 128,
    encoder_size: str = "small",
    num_classes: int = 1000,
    profile_iters: int = 3,
    checkpoint_every: list[int] = (1,),
    sqrt_n: bool = False,
    compile_budgets: list[float] = (),
    compile_fractions: list[float] = (),
    compile_graph: bool = False,
    compile_backend: str = "inductor",
    compile_locality: bool = True,
    swap_bandwidth_gbs: float | None = None,
    exact_check: bool = True,
    seed: int = 0,
    rotation: int = 0,
    replay_random: bool = True,
    time_rounds: int = 3,
) -> BatchResult:
    """Trace, profile and plan one model at one batch size, then measure every method.

    ``fractions``: the planner's budgets (share of the activation bytes left at the peak), each
    rewritten, checked and measured eagerly; ``compile_fractions``: those whose rewritten graph is
    also compiled; ``compile_graph``: also compile the unplanned traced step, the reference a
    compiled plan is read against (``torch.compile`` of the model leaves the optimizer out, a
    compiled traced step holds it). ``compile_locality``: leave Inductor's ``reorder_for_locality``
    pass on (its default) for every compilation, a traced step's, a plan's and the model's under
    ``compile_budgets``; off, a recomputation stays where the rewriter put it, and the baselines
    compile under the same Inductor. ``swap_bandwidth_gbs``: plan with swapping too at that copy
    bandwidth (simulated only). ``exact_check``: prove every rewritten graph in float64 and gate
    every baseline's gradients there (``gate.py``). ``rotation``:
    where in the list of methods measuring starts (the trial number; see below).
    ``replay_random``: the planner may recompute dropout masks, replayed with the generator's
    state of the forward pass (False: never, as before this option existed). ``time_rounds``:
    rounds in which the unplanned graph and every eager plan each run one step, interleaved,
    for the time model's check (0: check against the methods' own timings instead).
    """
    shape = dict(
        image_size=image_size, seq_len=seq_len, encoder_size=encoder_size,
        num_classes=num_classes, device=device, seed=seed,
    )  # fmt: skip
    case = build_case(model, batch_size, **shape)
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    result = _planned(
        model, batch_size, traced, fractions, swap_bandwidth_gbs, replay_random, profile_iters
    )
    result.inductor_locality = compile_locality
    baselines = dict(
        checkpoint_every=checkpoint_every, sqrt_n=sqrt_n, compile_budgets=compile_budgets,
        compile_backend=compile_backend,
    )  # fmt: skip
    measuring = _Measuring(
        result, device, rule, compile_fractions, compile_graph, compile_backend, compile_locality,
        time_rounds, rotation, baselines,
    )  # fmt: skip
    # Each trial runs the methods in another order (``rotation``, the trial number), so that a
    # drift within the process falls on different methods in different trials and pairing by
    # trial averages it out. On a GPU the traced methods always go first and the traced step is
    # freed before the eager ones: its peak counter sees every live tensor, not just the step's.
    eager_first = device != "cuda" and rotation % 2 == 1
    if eager_first:
        measuring.eager(case)
    measuring.traced_methods(traced)
    del traced
    if not eager_first:
        measuring.eager(case)
    del case
    if exact_check:
        _prove(result, model, min(batch_size, _EXACT_BATCH), shape, replay_random, seed, baselines)
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def _planned(
    model: str,
    batch_size: int,
    traced: tracer.TracedStep,
    fractions: list[float],
    swap_bandwidth_gbs: float | None,
    replay_random: bool,
    profile_iters: int,
) -> BatchResult:
    """The traced step analysed, profiled and simulated, with the planner's curve and its plan
    at each budget (and with swapping too where a bandwidth is given)."""
    found = graph_analysis.analyze(traced, replay_random=replay_random)
    prof = profiler.profile_graph(traced.graph_module, traced.inputs, found, iters=profile_iters)
    stats = profiler.activation_stats(found, prof)
    baseline = simulator.simulate(found, (), prof)
    result = BatchResult(model, batch_size, traced.torch_version, found, prof, baseline, stats)
    result.pareto = planner.pareto_curve(found, prof, stats)
    for fraction in fractions:
        budget = planner.budget_for_fraction(found, baseline.peak_bytes, fraction)
        result.plans[fraction] = planner.plan_recomputation(found, prof, budget, stats=stats)
        if swap_bandwidth_gbs:
            result.swap_plans[fraction] = planner.plan_recomputation(
                found,
                prof,
                budget,
                stats=stats,
                swap_bandwidth_bytes_per_ms=swap_bandwidth_gbs * 1e6,
            )
    result.swap_bandwidth_gbs = swap_bandwidth_gbs
    return result


@dataclass
class _Measuring:
    """The measuring of one batch result's methods: the traced step and each plan (eager, and
    compiled where asked), the interleaved rounds of the time model's check and the swap plans
    on a GPU (``traced_methods``), and the eager baselines (``eager``: ``footprint``'s, with
    ``baselines``' options)."""

    result: BatchResult
    device: str
    rule: StopRule
    compile_fractions: list[float]
    compile_graph: bool
    compile_backend: str
    compile_locality: bool
    time_rounds: int
    rotation: int
    baselines: dict
    timed_graphs: dict = field(default_factory=dict)

    def compiled(self, method: str, traced: tracer.TracedStep, graph_module) -> None:
        torch.compiler.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(rewriter.without_marks(graph_module), backend=self.compile_backend)
        # the pass runs when the first call compiles; what the compiler frees leaves the process
        with torch_internals.inductor_locality(self.compile_locality):
            with fw_device.pages_released():
                traced.run(traced.inputs, compiled)
            self.result.measurements.append(
                footprint.measure_graph(method, traced, compiled, self.device, self.rule)
            )
        counters = torch._dynamo.utils.counters["stats"]
        self.result.compiled_graphs[method] = int(counters["unique_graphs"])
        del compiled
        torch.compiler.reset()

    def plan(self, traced: tracer.TracedStep, fraction: float | None) -> None:
        result, device, rule = self.result, self.device, self.rule
        if fraction is None:
            result.measurements.append(
                footprint.measure_graph("graph", traced, traced.graph_module, device, rule)
            )
            if self.compile_graph:
                self.compiled(COMPILED_GRAPH_METHOD, traced, traced.graph_module)
            return
        rewritten = rewriter.rewrite(
            traced.graph_module, result.analysis, result.plans[fraction].recompute
        )
        result.random_replays[plan_method(fraction)] = rewriter.random_replays(rewritten)
        result.measurements.append(
            footprint.measure_graph(plan_method(fraction), traced, rewritten, device, rule)
        )
        if self.time_rounds > 0:  # kept for the rounds below, freed after them
            self.timed_graphs[plan_method(fraction)] = rewritten
        if fraction in self.compile_fractions:
            self.compiled(_compiled_plan_method(fraction), traced, rewritten)

    def eager(self, case) -> None:
        self.result.measurements.extend(
            footprint.measure_baselines(
                case,
                self.device,
                self.rule,
                compile_locality=self.compile_locality,
                rotation=self.rotation,
                **self.baselines,
            )
        )

    def traced_methods(self, traced: tracer.TracedStep) -> None:
        """The traced step and every plan, then the rounds of the time model's check and, on a
        GPU, the swap plans; nothing of ``traced`` is kept after."""
        result, device = self.result, self.device
        self.timed_graphs = {"graph": traced.graph_module}
        for fraction in footprint.rotated([None, *result.plans], self.rotation):
            self.plan(traced, fraction)
        if self.time_rounds > 0 and len(self.timed_graphs) > 1:
            result.round_ms = footprint.interleaved_rounds(
                {
                    name: functools.partial(traced.run, traced.inputs, gm)
                    for name, gm in self.timed_graphs.items()
                },
                self.time_rounds,
                device,
                self.rotation,
                faults=result.round_faults,
                contention=result.round_contention,
            )
        self.timed_graphs.clear()
        if device == "cuda":  # only a GPU has a memory to swap from: measure the swap plans there
            for fraction, plan in result.swap_plans.items():
                rewritten = rewriter.rewrite(
                    traced.graph_module, result.analysis, plan.recompute, plan.simulation.swaps
                )
                result.measurements.append(
                    footprint.measure_graph(
                        swap_plan_method(fraction), traced, rewritten, device, self.rule
                    )
                )
                del rewritten


def _prove(
    result: BatchResult,
    model: str,
    batch_size: int,
    shape: dict,
    replay_random: bool,
    seed: int,
    baselines: dict,
) -> None:
    """Every plan's float64 proof against the unplanned graph, and the baselines' float64 gate
    (dropout active; ``gate.py``), at ``batch_size``; compiled on the CPU, where float64 runs at
    its full rate, whatever the measured device."""
    if result.plans or result.swap_plans:
        every_plan = {plan_method(f): p for f, p in result.plans.items()}
        every_plan |= {swap_plan_method(f): p for f, p in result.swap_plans.items()}
        result.exact = exact_equivalence(
            model, batch_size, shape, every_plan, replay_random=replay_random
        )
    small = build_case(model, batch_size, dtype=torch.float64, **shape)
    result.gates = gate.gate_baselines(small, seed=seed, **baselines)


EXACT_TOLERANCE = MEMORY_EXACT_TOLERANCE
# The float64 proof runs at batch 2: a plan names graph nodes, and the graph is the same node for
# node at every batch size (``exact_equivalence`` fails if a planned node is missing), while a
# float64 step at the measured batch would cost several measured steps.
_EXACT_BATCH = 2


def exact_equivalence(
    model: str,
    batch_size: int,
    shape: dict,
    plans: dict[str, planner.Plan],
    *,
    replay_random: bool = True,
) -> dict[str, rewriter.Equivalence]:
    """Every plan (by method name) applied to the float64 trace of the same step, against that
    trace unmodified: its recomputations and, where it has them, its swaps (on a CPU the swap
    copies are clones, so the proof covers the rewrite, not the copy engines).

    The float64 step has the same graph, node for node, as the float32 one it was planned on (the
    dtype changes no op), so each plan's node names and the swap windows' positions carry over;
    the check fails loudly if a name does not. In float64 a difference from a changed computation
    could not hide in rounding.
    """
    case = build_case(model, batch_size, dtype=torch.float64, **shape)
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    found = graph_analysis.analyze(traced, replay_random=replay_random)
    checks = {}
    for method, plan in plans.items():
        swaps = plan.simulation.swaps if plan.simulation is not None else []
        missing = [
            n
            for n in [*plan.recompute, *(w.activation for w in swaps)]
            if n not in found.activations
        ]
        if missing:
            raise RuntimeError(
                f"the float64 trace of {model} lacks activations the plan rewrites: {missing[:3]}"
            )
        rewritten = rewriter.rewrite(traced.graph_module, found, plan.recompute, swaps)
        checks[method] = rewriter.check_equivalence(
            traced, rewritten, rtol=0.0, atol=EXACT_TOLERANCE
        )
    return checks
