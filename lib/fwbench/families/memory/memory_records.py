"""The memory study's outcome as a tidy frame and as records: one row per batch size and method
(``summary_frame``: measured peak and time, the simulator's prediction and its check against the
measured time, savings and cost), and the family's records of it (``add_records``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.families.memory import footprint, simulator
from fwbench.families.memory.study import (
    REFERENCE_METHOD,
    BatchResult,
    method_kind,
    plan_method,
    swap_plan_method,
)
from fwbench.measure import device as fw_device
from fwbench.vocab import MEMORY_COMPILED_KINDS


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
        planned = {plan_method(f): (f, p) for f, p in r.plans.items()}
        planned |= {swap_plan_method(f): (f, p) for f, p in r.swap_plans.items()}
        measured_methods = {m.method for m in r.measurements}
        rows += [_measured_row(r, m, ref, graph, planned) for m in r.measurements]
        rows += [
            _swap_row(r, fraction, plan)
            for fraction, plan in r.swap_plans.items()
            # measured on a GPU: its row above carries the simulator's figures
            if swap_plan_method(fraction) not in measured_methods
        ]
    return pd.DataFrame(rows)


def _measured_row(r: BatchResult, m, ref, graph, planned: dict) -> dict:
    """``summary_frame``'s row of one measured method ``m`` of batch result ``r``, against the
    eager step ``ref``; ``planned``: method -> (fraction, plan) of the plans simulated."""
    act_peak = r.activation_peak_bytes
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
        "inductor_locality": r.inductor_locality if kind in MEMORY_COMPILED_KINDS else None,
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
    return row


def _swap_row(r: BatchResult, fraction: float, plan) -> dict:
    """``summary_frame``'s row of a swap plan simulated only: the savings are the simulator's,
    against the unplanned graph's simulated peak and its profiled step."""
    act_peak = r.activation_peak_bytes
    sim = plan.simulation
    predicted_ms = simulator.predicted_iteration_ms(sim, r.profile)
    saved = r.baseline.peak_bytes - sim.peak_bytes
    method = swap_plan_method(fraction)
    return {
        "model": r.model,
        "batch_size": r.batch_size,
        "method": method,
        "kind": "mu_two_swap",
        "budget": fraction,
        "measured": False,
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
            max(r.exact[method].max_abs_diff.values()) if method in r.exact else None
        ),
    }


_METRICS = (
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
        if isinstance(row.get("saved_names"), list):  # a JAX budget policy's knapsack
            method["saved_names"] = row["saved_names"]
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
        for metric, column, unit in _METRICS:
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
