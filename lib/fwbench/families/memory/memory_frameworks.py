"""Memory planners in both frameworks (12_memory with ``jax_planners``): PyTorch's methods (none,
μ-TWO, ``torch.utils.checkpoint``, torch.compile's budget) and JAX's (none, ``jax.checkpoint``
segments and policies) on one model and batch size, peak memory against step time, and the
sentence a user reads: the plan of each framework that saves the most memory while its step time
is shown within the time goal, with Holm's adjustment across the plans the sentence chose among.

Each framework's savings and times are against its own plain step (``memory_curve.reference_of``)
and paired by trial: every trial is a fresh process that ran all of them. The peaks are each
framework's own accounting (PyTorch: the step's inputs plus the CPU allocator's peak; JAX: XLA's
buffer assignment of the compiled step), which agree on a model whose activations are known by
hand (tests/test_memory_jax.py). A μ-TWO plan saves what its budget sets, so only its time is
tested; so is every other plan's, whose saving is measured exactly, not sampled.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from fwbench.families.memory import memory_curve
from fwbench.vocab import MEMORY_OVERHEAD_GOAL_PCT as OVERHEAD_GOAL_PCT

MB = 1e6
COLUMNS = [
    "model", "batch_size", "framework", "method", "kind", "peak_MB", "memory_saved_pct",
    "activation_saved_pct", "iter_time_ms", "time_low", "time_high", "overhead_pct",
    "overhead_low", "overhead_high", "trials", "exact_max_abs_diff",
]  # fmt: skip
ALPHA = memory_curve.ALPHA
# rows that plan nothing: the traced step as it is, and compiled whole
_NOT_PLANS = ("graph", "compiled_graph")
# a saving below this share of the peak is no saving (XLA's plans move by a few buffers)
_NO_SAVING_PCT = 1.0


def _framework_of(method: str) -> str:
    return "JAX" if method.startswith("jax_") else "PyTorch"


def frameworks_table(curve: pd.DataFrame) -> pd.DataFrame:
    """The measured rows of ``memory_curve.curve_table`` for the cells that ran JAX's planners
    too, with each row's framework and its peak in MB."""
    if curve.empty or "method" not in curve:
        return pd.DataFrame(columns=COLUMNS)
    with_jax = curve.groupby(memory_curve.KEYS).method.transform(
        lambda m: m.str.startswith("jax_").any()
    )
    rows = curve[with_jax & curve.measured.astype(bool)]
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows = rows.assign(framework=rows.method.map(_framework_of), peak_MB=rows.peak_mem_bytes / MB)
    return rows.reindex(columns=COLUMNS + ["budget", "trial_times_ms", "variant", "device_name"])


def best_within(group: pd.DataFrame, framework: str) -> dict:
    """The plan of ``framework`` that saves the most memory with its time shown within the goal
    after Holm's adjustment across all of that framework's plans in ``group``: the row (None
    where no plan is shown within), how many plans it chose among, and its adjusted p."""
    mine = group[group.framework == framework]
    plans = mine[
        (mine.method != mine.method.map(memory_curve.reference_of)) & ~mine.kind.isin(_NOT_PLANS)
    ]
    if plans.empty:
        return {"row": None, "plans": 0, "p_holm": np.nan}
    reference = mine[mine.method == memory_curve.reference_of(plans.method.iloc[0])]
    if reference.empty:
        return {"row": None, "plans": len(plans), "p_holm": np.nan}
    adjusted = memory_curve.holm_within_goal(plans, mine)
    tested = int(adjusted.notna().sum())
    shown = plans.assign(p_holm=adjusted)[adjusted < ALPHA]
    if shown.empty:
        return {"row": None, "plans": tested, "p_holm": np.nan}
    row = shown.loc[shown.memory_saved_pct.idxmax()]
    return {"row": row, "plans": tested, "p_holm": float(row.p_holm)}


def _plan_words(found: dict, framework: str) -> str:
    row = found["row"]
    if row is None:
        return f"{framework}: none of its {found['plans']} plans is shown within the goal"
    if row.memory_saved_pct < _NO_SAVING_PCT:
        return (
            f"{framework}: none of its {found['plans']} plans lowers the peak by "
            f"{_NO_SAVING_PCT:g}% or more (the most, {row.method}, {row.memory_saved_pct:.1f}%)"
        )
    return (
        f"{framework}: {row.method}, saving {row.memory_saved_pct:.1f}% of the peak at "
        f"{row.overhead_pct:+.1f}% [{row.overhead_low:+.1f}, {row.overhead_high:+.1f}] step time "
        f"(Holm-adjusted p {found['p_holm']:.3g} across its {found['plans']} plans)"
    )


def sentences(table: pd.DataFrame) -> list[str]:
    """Per model and batch size: each framework's plain step, and its best plan within the
    goal."""
    out = []
    for (model, batch), group in table.groupby(["model", "batch_size"], sort=True):
        plain = {
            f: group[(group.framework == f) & (group.method == ref)]
            for f, ref in (("PyTorch", memory_curve.REFERENCE), ("JAX", memory_curve.JAX_REFERENCE))
        }
        if any(p.empty for p in plain.values()):
            continue
        pt, jx = plain["PyTorch"].iloc[0], plain["JAX"].iloc[0]
        name = memory_curve.MODEL_WORDS.get(model, model)
        out.append(
            f"{name} at batch {int(batch)}: the plain training step holds {pt.peak_MB:.0f} MB at "
            f"its peak in PyTorch (its allocator) and {jx.peak_MB:.0f} MB in JAX (XLA's plan), "
            f"and takes {pt.iter_time_ms:.0f} and {jx.iter_time_ms:.0f} ms (each framework's "
            "reference for its own plans, not a verdict between them). The most memory "
            f"saved with the step time shown within +{OVERHEAD_GOAL_PCT:g}%: "
            + "; ".join(_plan_words(best_within(group, f), f) for f in ("PyTorch", "JAX"))
            + f" ({int(group.trials.min())} paired trials)."
        )
        raised = group[(group.memory_saved_pct <= -_NO_SAVING_PCT) & ~group.kind.isin(_NOT_PLANS)]
        if not raised.empty:
            out.append(
                f"{name} at batch {int(batch)}: "
                + "; ".join(
                    f"{r.framework}'s {r.method} raises the peak by {-r.memory_saved_pct:.1f}%"
                    for r in raised.itertuples()
                )
                + "."
            )
    return out


# the planners a user gives a budget, in the words a sentence names them by
_BUDGETED = {
    "mu_two": "fwbench's μ-TWO plan",
    "compile_budget": "torch.compile's activation_memory_budget",
    "jax_budget": "JAX's budget policy",
}


def budget_sentences(table: pd.DataFrame) -> list[str]:
    """Per model, batch size and budget given to two planners or more: what each saved and its
    step time, against its own framework's plain step. A budget means something of its own to
    each planner, so the savings, measured, are what compare."""
    out = []
    if table.empty or "budget" not in table:
        return out
    rows = table[table.kind.isin(list(_BUDGETED)) & table.budget.notna()]
    for (model, batch, budget), group in rows.groupby(["model", "batch_size", "budget"], sort=True):
        if group.kind.nunique() < 2:
            continue
        compiled = table[(table.model == model) & (table.batch_size == batch)
                         & (table.kind == "compiled_graph")]  # fmt: skip
        parts = []
        for r in group.sort_values("kind", key=lambda k: k.map(list(_BUDGETED).index)).itertuples():
            words = (
                f"{_BUDGETED[r.kind]} saves {r.memory_saved_pct:.1f}% of the peak at "
                f"{r.overhead_pct:+.1f}% [{r.overhead_low:+.1f}, {r.overhead_high:+.1f}] step time"
            )
            if r.kind == "compile_budget" and not compiled.empty:
                words += f" (compiled without a budget: {compiled.overhead_pct.iloc[0]:+.1f}%)"
            parts.append(words)
        out.append(
            f"{memory_curve.MODEL_WORDS.get(model, model)} at batch {int(batch)}, budget "
            f"{budget:g}: " + "; ".join(parts) + " (each against its own framework's plain "
            "step; μ-TWO's budget is the share of the activation memory left at the peak, "
            "torch's the share of the activations its partitioner saves, JAX's policy's the "
            "share of the twin's named values' bytes it keeps)."
        )
    return out


def pareto_chart(table: pd.DataFrame) -> alt.Chart:
    """Peak memory against step time per model and batch size, one line per framework and
    kind of plan, the time's interval over trials as a rule."""
    data = table.assign(
        line=table.framework + " · " + table.kind.astype(str),
        label=table.model.map(lambda m: memory_curve.MODEL_WORDS.get(m, m))
        + " · batch "
        + table.batch_size.astype(int).astype(str),
    )[["label", "line", "method", "peak_MB", "iter_time_ms", "time_low", "time_high"]]
    base = alt.Chart(data).encode(
        y=alt.Y("peak_MB:Q", title="peak memory (MB)"),
        color=alt.Color("line:N", title="framework · plan"),
    )
    points = base.mark_line(point=True).encode(
        x=alt.X("iter_time_ms:Q", title="step time (ms, geometric mean over trials)"),
        order="iter_time_ms:Q",
        tooltip=["method", "peak_MB", "iter_time_ms", "time_low", "time_high"],
    )
    rules = base.mark_rule().encode(x="time_low:Q", x2="time_high:Q")
    return (points + rules).facet(column=alt.Column("label:N", title=None))
