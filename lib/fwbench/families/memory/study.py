"""One model at one batch size through the whole memory study: trace, profile, plan, rewrite,
check, measure every method, and turn the outcome into a tidy frame and records."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
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
from fwbench.vocab import MEMORY_COMPILED_KINDS, MEMORY_EXACT_TOLERANCE

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


def compiled_plan_method(fraction: float) -> str:
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
    shape = {
        "image_size": image_size,
        "seq_len": seq_len,
        "encoder_size": encoder_size,
        "num_classes": num_classes,
        "device": device,
        "seed": seed,
    }
    case = build_case(model, batch_size, **shape)
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
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
    result.inductor_locality = compile_locality

    timed_graphs = {"graph": traced.graph_module}

    def measure_compiled(method: str, traced: tracer.TracedStep, graph_module) -> None:
        torch.compiler.reset()
        torch._dynamo.utils.counters.clear()
        compiled = torch.compile(rewriter.without_marks(graph_module), backend=compile_backend)
        # the pass runs when the first call compiles; what the compiler frees leaves the process
        with torch_internals.inductor_locality(compile_locality):
            with fw_device.pages_released():
                traced.run(traced.inputs, compiled)
            result.measurements.append(
                footprint.measure_graph(method, traced, compiled, device, rule)
            )
        result.compiled_graphs[method] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        del compiled
        torch.compiler.reset()

    def measure_plan(traced: tracer.TracedStep, fraction: float | None) -> None:
        if fraction is None:
            result.measurements.append(
                footprint.measure_graph("graph", traced, traced.graph_module, device, rule)
            )
            if compile_graph:
                measure_compiled(COMPILED_GRAPH_METHOD, traced, traced.graph_module)
            return
        rewritten = rewriter.rewrite(traced.graph_module, found, result.plans[fraction].recompute)
        result.random_replays[plan_method(fraction)] = rewriter.random_replays(rewritten)
        result.measurements.append(
            footprint.measure_graph(plan_method(fraction), traced, rewritten, device, rule)
        )
        if time_rounds > 0:  # kept for the rounds below, freed after them
            timed_graphs[plan_method(fraction)] = rewritten
        if fraction in compile_fractions:
            measure_compiled(compiled_plan_method(fraction), traced, rewritten)

    def measure_eager(case) -> None:
        result.measurements.extend(
            footprint.measure_baselines(
                case,
                device,
                rule,
                checkpoint_every=checkpoint_every,
                sqrt_n=sqrt_n,
                compile_budgets=compile_budgets,
                compile_backend=compile_backend,
                compile_locality=compile_locality,
                rotation=rotation,
            )
        )

    # Each trial runs the methods in another order (``rotation``, the trial number), so that a
    # drift within the process falls on different methods in different trials and pairing by
    # trial averages it out. On a GPU the traced methods always go first and the traced step is
    # freed before the eager ones: its peak counter sees every live tensor, not just the step's.
    eager_first = device != "cuda" and rotation % 2 == 1
    if eager_first:
        measure_eager(case)
    for fraction in footprint.rotated([None, *fractions], rotation):
        measure_plan(traced, fraction)
    if time_rounds > 0 and len(timed_graphs) > 1:
        result.round_ms = footprint.interleaved_rounds(
            {
                name: functools.partial(traced.run, traced.inputs, gm)
                for name, gm in timed_graphs.items()
            },
            time_rounds,
            device,
            rotation,
            faults=result.round_faults,
            contention=result.round_contention,
        )
    timed_graphs.clear()
    if device == "cuda":  # only a GPU has a memory to swap from: measure the swap plans there
        for fraction, plan in result.swap_plans.items():
            rewritten = rewriter.rewrite(
                traced.graph_module, found, plan.recompute, plan.simulation.swaps
            )
            result.measurements.append(
                footprint.measure_graph(swap_plan_method(fraction), traced, rewritten, device, rule)
            )
            del rewritten
    del traced
    if not eager_first:
        measure_eager(case)
    del case
    if exact_check and (result.plans or result.swap_plans):
        every_plan = {plan_method(f): p for f, p in result.plans.items()}
        every_plan |= {swap_plan_method(f): p for f, p in result.swap_plans.items()}
        result.exact = exact_equivalence(
            model, min(batch_size, EXACT_BATCH), shape, every_plan, replay_random=replay_random
        )
    if exact_check:
        # the baselines' float64 gate, dropout active (gate.py); compiled on the CPU, where
        # float64 runs at its full rate, whatever the measured device
        small = build_case(model, min(batch_size, EXACT_BATCH), dtype=torch.float64, **shape)
        result.gates = gate.gate_baselines(
            small,
            checkpoint_every=checkpoint_every,
            sqrt_n=sqrt_n,
            compile_budgets=compile_budgets,
            compile_backend=compile_backend,
            seed=seed,
        )
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


EXACT_TOLERANCE = MEMORY_EXACT_TOLERANCE
# The float64 proof runs at batch 2: a plan names graph nodes, and the graph is the same node for
# node at every batch size (``exact_equivalence`` fails if a planned node is missing), while a
# float64 step at the measured batch would cost several measured steps.
EXACT_BATCH = 2


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


def _time_check(r: BatchResult, m: footprint.Measurement, graph, sim) -> dict:
    """The time model's figures for one traced method.

    The model predicts a plan's time as a multiple of the unplanned graph's: the profiled whole
    step plus the replayed nodes' profiled times, over the profiled whole step. The absolute
    time is that multiple of the unplanned graph measured in the same rounds, so the error is
    the predicted multiple against the measured one, the median over rounds of the plan's step
    over the graph's. The profile's own reading of the whole step was taken in another window,
    and the difference between the two windows (``profile_drift_pct`` on the graph's row) is the
    machine's, not the model's: on this VM it reached 66% between minutes of one process
    (BERT-base at batch 8, one trial of a committed run)."""
    rounds = r.round_ms
    graph_ms = float(np.median(rounds["graph"])) if "graph" in rounds else graph.summary["p50"]
    # the rounds themselves go into the records, so a surprising multiple can be looked into
    diagnosis = {
        "round_ms": [round(t, 1) for t in rounds.get(m.method, [])],
        "graph_round_ms": [round(t, 1) for t in rounds.get("graph", [])],
        "minor_faults": r.round_faults.get(m.method, []),
        # a round the machine was shared in is left out of the report's pooled error
        "round_shared": [bool(c and c["shared"]) for c in r.round_contention],
        "round_steal": [c["steal_frac"] if c else None for c in r.round_contention],
        # glibc's malloc gives freed pages back or not by the process's history; a preloaded
        # caching allocator keeps them (params/memory_seed.yaml)
        "allocator": fw_device.heap_allocator(),
    }
    if m.method == "graph":
        return {
            "predicted_iter_ms": r.profile.step_ms,
            "profile_drift_pct": 100.0 * (r.profile.step_ms / graph_ms - 1),
            "time_diagnosis": diagnosis,
        }
    predicted = simulator.predicted_iteration_ms(sim, r.profile)
    multiple = predicted / simulator.predicted_iteration_ms(r.baseline, r.profile)
    if m.method in rounds and "graph" in rounds:
        pairs = np.array(rounds[m.method]) / np.array(rounds["graph"])
        measured = float(np.median(pairs))
        source = "interleaved rounds"
    else:
        measured = m.summary["p50"] / graph.summary["p50"]
        source = "each method's own timing"
    return {
        "predicted_iter_ms": graph_ms * multiple,
        "predicted_multiple": multiple,
        "measured_multiple": measured,
        "sim_time_error_pct": 100.0 * (multiple / measured - 1),
        "time_check_source": source,
        "time_diagnosis": diagnosis,
    }


def _replay_figures(sim, profile) -> dict:
    """What a plan replays, in profiled node time, and the share of it that runs a node a second
    time or more: the report's reason when our curve costs more than checkpointing."""
    repeated = simulator.repeated_replay_ms(sim, profile)
    return {
        "replay_ms": sim.replay_ms,
        "replay_repeat_pct": 100.0 * repeated / sim.replay_ms if sim.replay_ms > 0 else 0.0,
    }


def summary_frame(results: list[BatchResult]) -> pd.DataFrame:
    """One row per batch size and method: measured peak and time, the simulator's prediction,
    savings and cost. Swap plans, simulated only, get rows without measurements.

    ``activation_saved_pct`` is the bytes a method saves at the peak, against the eager step, as
    a share of the activation memory (the unplanned graph's activation high-water mark). Where
    the optimizer update makes the peak, no method saves much of it: the saving stops at the
    optimizer's floor, and ``activation_at_peak_bytes`` (zero there) says so."""
    rows = []
    for r in results:
        ref = next(m for m in r.measurements if m.method == REFERENCE_METHOD)
        graph = next(m for m in r.measurements if m.method == "graph")
        act_peak = r.activation_peak_bytes
        planned = {plan_method(f): (f, p) for f, p in r.plans.items()}
        planned |= {swap_plan_method(f): (f, p) for f, p in r.swap_plans.items()}
        measured_methods = {m.method for m in r.measurements}
        for m in r.measurements:
            kind, budget = method_kind(m.method)
            saved = ref.peak_bytes - m.peak_bytes
            row = {
                "model": r.model,
                "batch_size": r.batch_size,
                "method": m.method,
                "kind": kind,
                "budget": budget,
                "measured": True,
                "peak_bytes": m.peak_bytes,
                "iter_time_ms": m.summary["p50"],
                "iter_ci_low_ms": m.summary["median_ci_low"],
                "iter_ci_high_ms": m.summary["median_ci_high"],
                "n": m.summary["n"],
                "memory_saved_pct": 100.0 * saved / ref.peak_bytes,
                "activation_saved_pct": 100.0 * saved / act_peak if act_peak else None,
                "overhead_pct": 100.0 * (m.summary["p50"] / ref.summary["p50"] - 1),
                "activation_bytes": r.analysis.activation_bytes(),
                "activation_peak_bytes": act_peak,
                "activation_at_peak_bytes": r.activation_at_peak_bytes,
                "predicted_peak_bytes": None,
                "predicted_iter_ms": None,
                "sim_peak_error_pct": None,
                "sim_time_error_pct": None,
                "recomputed_bytes": None,
                "swapped_bytes": None,
                "compiled_graphs": r.compiled_graphs.get(m.method),
                # a compiled plan replays what its eager plan does
                "random_replays": r.random_replays.get(
                    plan_method(budget) if kind == "compiled_mu_two" else m.method
                ),
                "inductor_locality": (
                    r.inductor_locality if kind in MEMORY_COMPILED_KINDS else None
                ),
            }
            sim = None
            if m.method == "graph":
                sim = r.baseline
            if m.method in planned:
                fraction, plan = planned[m.method]
                sim = plan.simulation
                row["recomputed_bytes"] = plan.recomputed_bytes
                row["swapped_bytes"] = plan.swapped_bytes
                row |= _replay_figures(sim, r.profile)
                row["budget_bytes"] = plan.budget_bytes
                row["met_budget"] = plan.met_budget
                if m.method in r.exact:
                    row["exact_max_abs_diff"] = max(r.exact[m.method].max_abs_diff.values())
            if m.method in r.gates:
                found = r.gates[m.method]
                row["exact_max_abs_diff"] = found.max_abs_diff
                row["exact_worst"] = None if found.passed else found.worst
            if sim is not None:
                row["predicted_peak_bytes"] = sim.peak_bytes
                row["peak_parts"] = sim.parts_at_peak()
                row["sim_peak_error_pct"] = 100.0 * (sim.peak_bytes - m.peak_bytes) / m.peak_bytes
                row.update(_time_check(r, m, graph, sim))
            rows.append(row)
        for fraction, plan in r.swap_plans.items():
            if swap_plan_method(fraction) in measured_methods:
                continue  # measured on a GPU: its row above carries the simulator's figures
            sim = plan.simulation
            predicted_ms = simulator.predicted_iteration_ms(sim, r.profile)
            saved = r.baseline.peak_bytes - sim.peak_bytes
            rows.append(
                {
                    "model": r.model,
                    "batch_size": r.batch_size,
                    "method": swap_plan_method(fraction),
                    "kind": "mu_two_swap",
                    "budget": fraction,
                    "measured": False,
                    # simulated only: the savings are the simulator's, against the unplanned
                    # graph's simulated peak and its profiled step
                    "predicted_peak_bytes": sim.peak_bytes,
                    "peak_parts": sim.parts_at_peak(),
                    "predicted_iter_ms": predicted_ms,
                    "memory_saved_pct": 100.0 * saved / r.baseline.peak_bytes,
                    "activation_saved_pct": 100.0 * saved / act_peak if act_peak else None,
                    "overhead_pct": 100.0 * (predicted_ms / r.profile.step_ms - 1),
                    "activation_bytes": r.analysis.activation_bytes(),
                    "activation_peak_bytes": act_peak,
                    "recomputed_bytes": plan.recomputed_bytes,
                    "swapped_bytes": plan.swapped_bytes,
                    **_replay_figures(sim, r.profile),
                    "budget_bytes": plan.budget_bytes,
                    "met_budget": plan.met_budget,
                    "swap_bandwidth_gbs": r.swap_bandwidth_gbs,
                    "exact_max_abs_diff": (
                        max(r.exact[swap_plan_method(fraction)].max_abs_diff.values())
                        if swap_plan_method(fraction) in r.exact
                        else None
                    ),
                }
            )
    return pd.DataFrame(rows)


METRICS = (
    ("peak_mem_bytes", "peak_bytes", "bytes"),
    ("predicted_peak_bytes", "predicted_peak_bytes", "bytes"),
    ("predicted_iter_ms", "predicted_iter_ms", "ms"),
    ("sim_peak_error_pct", "sim_peak_error_pct", "%"),
    ("sim_time_error_pct", "sim_time_error_pct", "%"),
    ("profile_drift_pct", "profile_drift_pct", "%"),
    ("predicted_multiple", "predicted_multiple", "ratio"),
    ("measured_multiple", "measured_multiple", "ratio"),
    ("activation_bytes", "activation_bytes", "bytes"),
    ("activation_peak_bytes", "activation_peak_bytes", "bytes"),
    ("activation_at_peak_bytes", "activation_at_peak_bytes", "bytes"),
    ("recomputed_bytes", "recomputed_bytes", "bytes"),
    ("swapped_bytes", "swapped_bytes", "bytes"),
    ("replay_ms", "replay_ms", "ms"),
    ("replay_repeat_pct", "replay_repeat_pct", "%"),
    ("compiled_graphs", "compiled_graphs", "count"),
    ("random_replays", "random_replays", "count"),
    ("overhead_pct", "overhead_pct", "%"),
    ("memory_saved_pct", "memory_saved_pct", "%"),
    ("activation_saved_pct", "activation_saved_pct", "%"),
    ("exact_max_abs_diff", "exact_max_abs_diff", "abs"),
    # JAX's methods (jax_remat): the temporaries of XLA's buffer assignment, activations included
    ("xla_temp_bytes", "xla_temp_bytes", "bytes"),
)


def add_records(rec, frame: pd.DataFrame, peak_source: str) -> None:
    """Records of family ``memory``; the method goes into ``mode`` so analyses can group by it,
    and its kind and budget into ``extra``. Simulated-only rows say so in ``extra``."""
    for row in frame.to_dict("records"):
        common = {"mode": row["method"], "batch_size": row["batch_size"]}
        method = {"method": row["kind"]}
        if row.get("budget") is not None and not pd.isna(row["budget"]):
            method["budget"] = float(row["budget"])
        if row.get("inductor_locality") is False:  # runs with the pass on (its default) omit it
            method["inductor_locality"] = False
        if not row.get("measured", True):
            method["simulated_only"] = True
            method["swap_bandwidth_gbs"] = row.get("swap_bandwidth_gbs")
        if row.get("measured", True):
            rec.add(
                "iter_time_ms",
                row["iter_time_ms"],
                "ms",
                n=row["n"],
                ci_low=row["iter_ci_low_ms"],
                ci_high=row["iter_ci_high_ms"],
                extra=method,
                **common,
            )
        for metric, column, unit in METRICS:
            value = row.get(column)
            if value is None or pd.isna(value):
                continue
            extra = dict(method)
            if unit == "bytes":
                extra["peak_source"] = peak_source if row.get("measured", True) else "simulator"
            if metric in ("sim_time_error_pct", "measured_multiple"):
                extra["timed_by"] = row["time_check_source"]
            if metric == "exact_max_abs_diff" and isinstance(row.get("exact_worst"), str):
                extra["worst_tensor"] = row["exact_worst"]  # a gate that failed names it
            if metric in ("measured_multiple", "profile_drift_pct"):
                diagnosis = row.get("time_diagnosis")
                extra |= diagnosis if isinstance(diagnosis, dict) else {}
            rec.add(metric, value, unit, extra=extra, **common)
        # the five-part breakdown of the simulated peak, one record per part; the simulator's peak
        # is the measured one to within sim_peak_error_pct
        parts = row.get("peak_parts")
        for part, nbytes in parts.items() if isinstance(parts, dict) else ():
            extra = method | {"part": part, "peak_source": "simulator"}
            rec.add("peak_part_bytes", nbytes, "bytes", extra=extra, **common)
