"""Altair figures of the memory family; each takes tidy frames the notebook already shows."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from fwbench.families.memory.liveness import GraphAnalysis
from fwbench.families.memory.simulator import PART_OF_KIND, Simulation

MB = 1024**2
# Vega-Lite embeds the data in the notebook; a few hundred positions keep it small and still show
# every phase of the step.
_MAX_TIMELINE_POINTS = 400


def timeline_frame(sim: Simulation, label: str) -> pd.DataFrame:
    """Memory per category along the execution, thinned to a few hundred positions.

    Thinning keeps the peak position, so the drawn maximum is the simulated peak.
    """
    n = len(sim.total)
    keep = np.unique(
        np.r_[np.linspace(0, n - 1, min(n, _MAX_TIMELINE_POINTS)).astype(int), sim.peak_index]
    )
    transient = sim.total - sum(sim.by_kind.values())
    rows = []
    for i in keep:
        parts: dict[str, int] = {}
        for kind, values in sim.by_kind.items():
            parts[PART_OF_KIND[kind]] = parts.get(PART_OF_KIND[kind], 0) + int(values[i])
        parts["other"] += int(transient[i])
        for category, nbytes in parts.items():
            rows.append(
                {
                    "plan": label,
                    "position": int(i),
                    "rank": int(sim.ranks[i]),
                    "category": category,
                    "MB": nbytes / MB,
                }
            )
    return pd.DataFrame(rows)


def memory_timeline_chart(
    frame: pd.DataFrame, analysis: GraphAnalysis, budget_bytes: int | None = None
) -> alt.Chart:
    """Stacked memory against execution rank, one panel per plan, with boundaries and budget."""
    marks = pd.DataFrame(
        [
            {"rank": analysis.forward_end, "boundary": "forward ends"},
            {"rank": analysis.backward_start, "boundary": "backward starts"},
            {"rank": analysis.backward_end, "boundary": "optimizer starts"},
        ]
    )
    rules = (
        alt.Chart(marks)
        .mark_rule(strokeDash=[4, 3], color="black")
        .encode(x="rank:Q", tooltip=["boundary"])
    )
    panels = []
    for plan, part in frame.groupby("plan", sort=False):
        area = (
            alt.Chart(part)
            .mark_area()
            .encode(
                x=alt.X("rank:Q", title="execution rank (node index in the step)"),
                y=alt.Y("sum(MB):Q", stack=True, title="live memory (MB)"),
                color=alt.Color("category:N"),
                tooltip=["rank", "category", alt.Tooltip("MB:Q", format=".1f")],
            )
        )
        layers = [area, rules]
        if budget_bytes is not None:
            budget = pd.DataFrame([{"MB": budget_bytes / MB, "what": "budget"}])
            layers.append(
                alt.Chart(budget).mark_rule(color="red").encode(y="MB:Q", tooltip=["what"])
            )
        panels.append(alt.layer(*layers).properties(title=str(plan), width=320, height=220))
    return alt.hconcat(*panels)


def batch_chart(frame: pd.DataFrame) -> alt.Chart:
    """Measured peak memory and iteration time against batch size, one line per method."""
    base = alt.Chart(frame).encode(
        x=alt.X("batch_size:Q", title="batch size"), color="method:N", tooltip=list(frame.columns)
    )
    peak = base.mark_line(point=True).encode(y=alt.Y("peak_MB:Q", title="measured peak (MB)"))
    time = base.mark_line(point=True).encode(y=alt.Y("iter_time_ms:Q", title="iteration (ms)"))
    return alt.hconcat(peak.properties(width=260), time.properties(width=260))


def pareto_chart(predicted: pd.DataFrame, measured: pd.DataFrame) -> alt.Chart:
    """The planner's predicted curve beside every method's measured point."""
    line = (
        alt.Chart(predicted)
        .mark_line(point=True, color="gray")
        .encode(
            x=alt.X("added_pct:Q", title="added time per iteration (%)"),
            y=alt.Y("peak_MB:Q", title="peak memory (MB)", scale=alt.Scale(zero=False)),
            tooltip=["n_recomputed", alt.Tooltip("peak_MB:Q", format=".1f"), "added_pct"],
        )
    )
    points = (
        alt.Chart(measured)
        .mark_point(size=90, filled=True)
        .encode(
            x="added_pct:Q",
            y="peak_MB:Q",
            shape="method:N",
            color="method:N",
            tooltip=list(measured.columns),
        )
    )
    return (line + points).properties(width=420, height=280)


def decisions_frame(analysis: GraphAnalysis, plans: dict[str, object]) -> pd.DataFrame:
    """Every activation's fate under each plan (kept, recomputed or swapped), placed at the
    execution rank that creates it; ``plans`` maps a label to a planner ``Plan``."""
    rows = []
    for label, plan in plans.items():
        for act in analysis.activations.values():
            rows.append(
                {
                    "plan": label,
                    "rank": act.created,
                    "activation": act.name,
                    "MB": act.nbytes / MB,
                    "decision": plan.decision(act.name),
                }
            )
    return pd.DataFrame(rows)


def decisions_chart(frame: pd.DataFrame) -> alt.Chart:
    """The planner's decision per activation along the forward pass: one bar per activation, as
    tall as its bytes, coloured kept, recomputed or swapped; one row per plan."""
    colours = alt.Scale(
        domain=["kept", "recomputed", "swapped"], range=["#bbbbbb", "#d62728", "#1f77b4"]
    )
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("rank:Q", title="execution rank that creates the activation (forward pass)"),
            y=alt.Y("MB:Q", title="activation (MB)"),
            color=alt.Color("decision:N", scale=colours),
            tooltip=["plan", "activation", "rank", alt.Tooltip("MB:Q", format=".2f"), "decision"],
        )
        .properties(width=640, height=90)
        .facet(row=alt.Row("plan:N", title=None))
    )
