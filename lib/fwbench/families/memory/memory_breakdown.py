"""What the peak of a training step is made of, across batch sizes (12_memory's
``peak_part_bytes`` records): the five-part breakdown into parameters, gradients, optimizer state,
activations and other, for the unplanned graph and for the tightest μ-TWO plan.

The parts are the simulator's, at its peak; its peak is the measured one to within the run's
``sim_peak_error_pct``. Bytes do not depend on the machine's speed, so one trial gives them;
where a run has several, the median is taken (the plan, chosen from each trial's profiled node
times, can differ between trials).
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from fwbench.families.memory.memory_curve import FLOOR_WORDS, MODEL_WORDS, memory_rows
from fwbench.results.layout import slug_settings

METRIC = "peak_part_bytes"
PARTS = ["params", "gradients", "optimizer state", "activations", "other"]
UNPLANNED = "graph"  # the traced step without a plan, which the planner starts from
_PLANS = ("no plan", "tightest μ-TWO plan")
# cell settings that tell two cells of one model apart without changing what is traced (a
# variant is a slug less its trial already)
_IGNORED_SETTINGS = ("batch_sizes", "budget_fractions", "compile_budgets", "time_rounds")


def _settings(variant: str) -> dict[str, str]:
    return {k: v for k, v in slug_settings(variant).items() if k not in _IGNORED_SETTINGS}


def _labels(table: pd.DataFrame) -> pd.Series:
    """The model's name, with the settings that set its cells apart where it has several (BERT
    at two sequence lengths, say)."""
    labels = {}
    for model, group in table.groupby("model"):
        variants = group.variant.unique()
        settings = {v: _settings(v) for v in variants}
        differ = sorted(
            {
                k
                for s in settings.values()
                for k in s
                if len({t.get(k) for t in settings.values()}) > 1
            }
        )
        for v in variants:
            words = ", ".join(f"{k} {settings[v].get(k, '-')}" for k in differ)
            name = MODEL_WORDS.get(model, model)
            labels[(model, v)] = f"{name} ({words})" if words else name
    return pd.Series([labels[(m, v)] for m, v in zip(table.model, table.variant, strict=True)])


def breakdown_table(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per model, cell, batch size, plan and part: MiB at the simulated peak (median over
    trials), for the unplanned graph and for the μ-TWO plan at its smallest budget."""
    rows = memory_rows(meas)
    rows = rows[rows.metric == METRIC] if not rows.empty else rows
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(part=[e.get("part") for e in rows.extra])
    keys = ["model", "variant", "device_name", "batch_size"]
    out = []
    for key, group in rows.groupby(keys, sort=True):
        plans = group[group.method == "mu_two"]
        chosen = {_PLANS[0]: group[group["mode"] == UNPLANNED]}
        if not plans.empty:
            chosen[_PLANS[1]] = plans[plans.budget == plans.budget.min()]
        for plan, part_rows in chosen.items():
            if part_rows.empty:
                continue
            medians = part_rows.groupby("part").value.median()
            for part in PARTS:
                out.append(
                    {
                        **dict(zip(keys, key, strict=True)),
                        "plan": plan,
                        "method": part_rows["mode"].iloc[0],
                        "part": part,
                        "MiB": float(medians.get(part, 0.0)) / 2**20,
                        "trials": int(part_rows.trial.nunique()),
                    }
                )
    table = pd.DataFrame(out)
    if table.empty:
        return table
    table.insert(0, "label", _labels(table).values)
    return table


def parts_chart(table: pd.DataFrame) -> alt.FacetChart:
    """Stacked bars of the peak by part against batch size: a row per model (and cell), a
    column per plan, on one scale so that a plan's bar reads against the unplanned one.
    ``table``: ``breakdown_table``'s columns ``label``, ``plan``, ``method``, ``batch_size``,
    ``part`` and ``MiB`` (12_memory draws its own cell's the same way)."""
    order = {part: i for i, part in enumerate(PARTS)}
    data = table.assign(part_order=table.part.map(order))
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("batch_size:O", title="batch size"),
            y=alt.Y("sum(MiB):Q", title="memory at the peak (MiB)"),
            color=alt.Color("part:N", sort=PARTS, title="part"),
            order=alt.Order("part_order:Q"),
            tooltip=["method", "batch_size", "part", alt.Tooltip("MiB:Q", format=".0f")],
        )
        .properties(width=200, height=180)
        .facet(
            row=alt.Row("label:N", title=None),
            column=alt.Column(
                "plan:N", sort=[*_PLANS, *sorted(set(table.plan) - set(_PLANS))], title=None
            ),
        )
    )


def breakdown_sentences(table: pd.DataFrame) -> list[str]:
    """Per model (and cell): the activations' share of the unplanned peak at the smallest and
    the largest batch size, and what the tightest μ-TWO plan leaves at the largest, labelled as on
    Adam's floor where no activation is left at its peak (read from ``peak_shares``, the table
    the report shows beside them)."""
    if table.empty:
        return []
    trials = table.groupby(["label", "device_name"]).trials.max()
    out = []
    for (label, device), group in peak_shares(table).groupby(["label", "device_name"], sort=True):
        unplanned = group[group.plan == _PLANS[0]].set_index("batch_size").sort_index()
        if unplanned.empty:
            continue
        ends = unplanned.iloc[sorted({0, len(unplanned) - 1})]
        peaks = ", and at ".join(
            f"{r.peak_MiB:,.0f} MiB at batch {b}, {r.activation_share_pct:.0f}% of it activations"
            for b, r in ends.iterrows()
        )
        words = f"{label} on {device}: the unplanned step peaks at {peaks}"
        top = unplanned.index[-1]
        tight = group[(group.plan == _PLANS[1]) & (group.batch_size == top)]
        if not tight.empty:
            plan = tight.iloc[0]
            words += (
                f"; at batch {top} the tightest μ-TWO plan ({plan.method}) peaks at "
                f"{plan.peak_MiB:,.0f} MiB, {plan.activations:,.0f} MiB of it activations"
            )
            if plan.activations <= 0:
                # no activation alive at the peak: it is the optimizer update's, which no plan
                # lowers, so a tighter budget would save nothing more
                words += f" ({FLOOR_WORDS}: the peak is the optimizer update's)"
        n = trials[(label, device)]
        out.append(
            f"{words} (the simulator's parts at its peak; {n} trial{'s' if n != 1 else ''})."
        )
    return out


def peak_shares(table: pd.DataFrame) -> pd.DataFrame:
    """The table pivoted for reading: one row per model, batch size and plan, a column per part
    in MiB and the activations' share of the peak."""
    if table.empty:
        return table
    wide = table.pivot_table(
        index=["label", "device_name", "batch_size", "plan", "method"],
        columns="part",
        values="MiB",
        aggfunc="sum",
    ).reset_index()
    wide.columns.name = None
    present = [p for p in PARTS if p in wide]
    wide["peak_MiB"] = wide[present].sum(axis=1)
    wide["activation_share_pct"] = np.where(
        wide.peak_MiB > 0, 100 * wide.get("activations", 0) / wide.peak_MiB, np.nan
    )
    return wide[
        [
            "label",
            "device_name",
            "batch_size",
            "plan",
            "method",
            *present,
            "peak_MiB",
            "activation_share_pct",
        ]
    ]
