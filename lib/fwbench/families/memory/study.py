"""One model at one batch size through the whole memory study: trace, profile, plan, rewrite,
check, measure every method, and turn the outcome into a tidy frame and records."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch

from fwbench.families.memory import footprint, planner, profiler, rewriter, simulator, tracer
from fwbench.families.memory import liveness as graph_analysis
from fwbench.families.memory.cases import build_case
from fwbench.measure.timing import StopRule

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
    equivalence: dict[float, rewriter.Equivalence] = field(default_factory=dict)
    measurements: list[footprint.Measurement] = field(default_factory=list)
    pareto: list[dict] = field(default_factory=list)


def plan_method(fraction: float) -> str:
    return f"mu_two@{fraction:g}"


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
    compile_budgets: list[float] = (),
    compile_backend: str = "inductor",
    seed: int = 0,
) -> BatchResult:
    case = build_case(
        model,
        batch_size,
        image_size=image_size,
        seq_len=seq_len,
        encoder_size=encoder_size,
        num_classes=num_classes,
        device=device,
        seed=seed,
    )
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    found = graph_analysis.analyze(traced)
    prof = profiler.profile_graph(traced.graph_module, traced.inputs, found, iters=profile_iters)
    stats = profiler.activation_stats(found, prof)
    baseline = simulator.simulate(found, (), prof)
    result = BatchResult(model, batch_size, traced.torch_version, found, prof, baseline, stats)
    result.pareto = planner.pareto_curve(found, prof, stats)
    result.measurements.append(
        footprint.measure_graph("graph", traced, traced.graph_module, device, rule)
    )
    for fraction in fractions:
        budget = planner.budget_for_fraction(found, baseline.peak_bytes, fraction)
        plan = planner.plan_recomputation(found, prof, budget, stats=stats)
        rewritten = rewriter.rewrite(traced.graph_module, found, plan.recompute)
        result.plans[fraction] = plan
        result.equivalence[fraction] = rewriter.check_equivalence(traced, rewritten, seed=seed)
        result.measurements.append(
            footprint.measure_graph(plan_method(fraction), traced, rewritten, device, rule)
        )
        del rewritten
    del traced
    result.measurements += footprint.measure_baselines(
        case, device, rule, compile_budgets=compile_budgets, compile_backend=compile_backend
    )
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def summary_frame(results: list[BatchResult]) -> pd.DataFrame:
    """One row per batch size and method: measured peak and time, prediction, savings, cost."""
    rows = []
    for r in results:
        ref = next(m for m in r.measurements if m.method == REFERENCE_METHOD)
        for m in r.measurements:
            row = {
                "model": r.model,
                "batch_size": r.batch_size,
                "method": m.method,
                "peak_bytes": m.peak_bytes,
                "iter_time_ms": m.summary["p50"],
                "iter_ci_low_ms": m.summary["median_ci_low"],
                "iter_ci_high_ms": m.summary["median_ci_high"],
                "n": m.summary["n"],
                "memory_saved_pct": 100.0 * (1 - m.peak_bytes / ref.peak_bytes),
                "overhead_pct": 100.0 * (m.summary["p50"] / ref.summary["p50"] - 1),
                "activation_bytes": r.analysis.activation_bytes(),
                "predicted_peak_bytes": None,
                "sim_error_pct": None,
                "recomputed_bytes": None,
            }
            predicted = None
            if m.method == "graph":
                predicted = r.baseline.peak_bytes
            for fraction, plan in r.plans.items():
                if m.method == plan_method(fraction):
                    predicted = plan.predicted_peak_bytes
                    row["recomputed_bytes"] = plan.recomputed_bytes
                    row["budget_bytes"] = plan.budget_bytes
                    row["met_budget"] = plan.met_budget
                    row["equivalent"] = r.equivalence[fraction].equal
            if predicted is not None:
                row["predicted_peak_bytes"] = predicted
                row["sim_error_pct"] = 100.0 * (predicted - m.peak_bytes) / m.peak_bytes
            rows.append(row)
    return pd.DataFrame(rows)


METRICS = (
    ("peak_mem_bytes", "peak_bytes", "bytes"),
    ("predicted_peak_bytes", "predicted_peak_bytes", "bytes"),
    ("sim_error_pct", "sim_error_pct", "%"),
    ("activation_bytes", "activation_bytes", "bytes"),
    ("recomputed_bytes", "recomputed_bytes", "bytes"),
    ("overhead_pct", "overhead_pct", "%"),
    ("memory_saved_pct", "memory_saved_pct", "%"),
)


def add_records(rec, frame: pd.DataFrame, peak_source: str) -> None:
    """Records of family ``memory``; the method goes into ``mode`` so analyses can group by it."""
    for row in frame.to_dict("records"):
        common = {"mode": row["method"], "batch_size": row["batch_size"]}
        rec.add(
            "iter_time_ms",
            row["iter_time_ms"],
            "ms",
            n=row["n"],
            ci_low=row["iter_ci_low_ms"],
            ci_high=row["iter_ci_high_ms"],
            **common,
        )
        for metric, column, unit in METRICS:
            value = row.get(column)
            if value is None or pd.isna(value):
                continue
            extra = {"peak_source": peak_source} if unit == "bytes" else None
            rec.add(metric, value, unit, extra=extra, **common)
