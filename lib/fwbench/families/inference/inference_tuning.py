"""Each framework's candidates in a run, which was fastest, and what JAX's expert layers changed.

A tuning campaign (``params/tuning_cpu.yaml``) measures every way to run each framework once;
``fwbench best-modes`` turns its fastest candidates into the picks the verdict runs read
(``measure/best_modes.py``). This section shows the same table the picks come from, so a reader
sees each pick's margin over the other candidates, and a chart of every candidate's throughput
relative to its configuration's pick. In a run that is not a tuning run, the same table says which
mode was fastest there; a verdict never reads it (``verdicts.PICKED_ON_ROUNDS``).

Where a run profiled the twin both ways (``jit`` and ``jit-expert``, ``params/expert_why.yaml``),
``EXPERT`` closes the loop of the per-op why: the stock-to-expert gap and the expert form's gap to
PyTorch, each split into op categories that add up to the whole (``why.pair_gaps``), so the
report says which layer implementation made the difference and by how much.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from fwbench.measure import best_modes, verdicts
from fwbench.report import arms, tables, why
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    literal,
    nonempty,
    per_analysis,
    records,
)
from fwbench.vocab import framework_label, model_label


@per_analysis
def candidates(analysis) -> pd.DataFrame:
    """Every candidate of every configuration and framework with several, its median img/s, its
    share of the fastest candidate's and whether it is the pick."""
    table = best_modes.candidates(analysis.meas)
    if table.empty:
        return table
    several = table.groupby(list(best_modes.KEY), dropna=False).candidate.transform("nunique") > 1
    table = table[several].drop(columns="choice")
    best = table.groupby(list(best_modes.KEY), dropna=False).img_s.transform("max")
    return table.assign(of_best=table.img_s / best).reset_index(drop=True)


def _picks_sentences(table: pd.DataFrame) -> list[str]:
    """Per framework: how often each candidate was the pick, and the median margin over the
    runner-up."""
    lines = []
    for framework, rows in table.groupby("framework", sort=True):
        picked = rows[rows.chosen]
        counts = picked.candidate.value_counts()
        tally = ", ".join(f"{name} {n}" for name, n in counts.items())
        runner = rows[~rows.chosen].groupby(list(best_modes.KEY), dropna=False).of_best.max()
        margin = (1 / runner).median() if not runner.empty else float("nan")
        lines.append(
            f"{framework_label(framework)}: fastest candidate per configuration ({len(picked)} "
            f"configurations): {tally}; the pick beat its runner-up by a median factor of "
            f"{margin:.2f}."
        )
    return lines


def _chart(analysis):
    table = candidates(analysis).assign(
        model_label=lambda f: f.model.map(model_label),
        batch=lambda f: "batch " + f.batch_size.astype(str),
    )
    return (
        alt.Chart(table)
        .mark_circle(size=60)
        .encode(
            x=alt.X("of_best:Q", title="throughput ÷ the configuration's fastest candidate"),
            y=alt.Y("candidate:N", title=None),
            color=alt.Color("batch:N", title=None),
            shape=alt.Shape("chosen:N", title="pick"),
            tooltip=["model_label", "batch_size", "candidate", "img_s", "of_best"],
        )
        .properties(width=260, height=alt.Step(14))
        .facet(
            row=alt.Row("framework:N", title=None), column=alt.Column("model_label:N", title=None)
        )
        .resolve_scale(y="independent")
    )


SECTION = Section(
    "Each framework's candidates",
    "Every way this run measured each framework on a configuration (PyTorch's modes and memory "
    "formats; JAX's stock or expert layers under each declared XLA option set), with its median "
    "throughput and the fastest marked. On a tuning run these are the picks `fwbench "
    "best-modes` writes for the verdict runs (modes tuned and jit-tuned); a verdict never picks "
    "a mode on its own rounds.",
    (
        Each(lambda a: [Note(literal(t)) for t in _picks_sentences(candidates(a))]),
        Figure(
            "candidates",
            "Candidates against the fastest",
            "Each candidate's median throughput over its configuration's fastest (1 = the "
            "pick), per framework and model, coloured by batch size, on {devices}.",
            _chart,
        ),
        Table(
            "candidates",
            "Each candidate's median images/s (`img_s`), its share of the configuration's "
            "fastest (`of_best`) and whether it is the pick (`chosen`).",
            candidates,
            records("inference", ["throughput_img_s"]),
        ),
    ),
    when=nonempty(candidates),
)


STOCK, EXPERT_ARM = ("jax", "jit"), ("jax", "jit-expert")
EXPERT_OVER_STOCK = "JAX expert ÷ stock layers"
EXPERT_OVER_TORCH = "JAX expert layers ÷ PyTorch"


@per_analysis
def expert_pairs(analysis) -> pd.DataFrame:
    """Per configuration with the expert form measured: expert ÷ stock JAX and expert JAX ÷
    PyTorch's arm (its tuned or only mode, as the comparison matrix picks it), by median
    throughput within this run (a why, not a verdict)."""
    rows = []
    if analysis.samples.empty:
        return pd.DataFrame(rows)
    for key, group in analysis.samples.groupby(tables.CONFIG, sort=True):
        by_arm = {(r.framework, r.variant): r for r in group.itertuples()}
        expert = by_arm.get(EXPERT_ARM)
        if expert is None:
            continue
        torch = arms.pick_arm(group, "torch", "best")
        others = [(EXPERT_OVER_STOCK, by_arm.get(STOCK))]
        others.append(
            (EXPERT_OVER_TORCH, None if torch is None else by_arm[("torch", torch.variant)])
        )
        for comparison, base in others:
            if base is None:
                continue
            rows.append(
                {
                    **dict(zip(tables.CONFIG, key, strict=True)),
                    "comparison": comparison,
                    "a_framework": base.framework,
                    "a_variant": base.variant,
                    "b_framework": "jax",
                    "b_variant": "jit-expert",
                    "a_img_s": base.median,
                    "b_img_s": expert.median,
                    "ratio": expert.median / base.median,
                    "winner": verdicts.WITHIN_ONE_RUN,
                }
            )
    return pd.DataFrame(rows)


@per_analysis
def _expert_gaps(analysis) -> pd.DataFrame:
    pairs = expert_pairs(analysis)
    if pairs.empty:
        return pd.DataFrame(columns=why.GAP_COLUMNS)
    return why.pair_gaps(pairs, analysis.breakdown)


EXPERT = Section(
    "What JAX's expert layers change",
    "The twin's expert form (jit-expert: depthwise convolutions as a fused shift-and-multiply-add, "
    "1x1 and patchifying convolutions as one matmul, small outputs as im2col and a matmul; the "
    "same function, proven in float64) against its stock Flax layers and against PyTorch, by "
    "median throughput within this run, and where profiled, each gap split into the op "
    "categories that make it up (they add up to the whole gap).",
    (
        Table(
            "expert_ratios",
            "Per configuration: expert ÷ stock JAX and expert JAX ÷ PyTorch's arm, median images/s "
            "(`a_img_s`, `b_img_s`) and their ratio (above 1: the expert form is faster).",
            expert_pairs,
            records("inference", ["throughput_img_s"]),
            drop=("device", "winner"),
        ),
        Each(lambda a: [Note(literal(t)) for t in why.why_sentences(_expert_gaps(a))]),
        Table(
            "expert_why",
            "Each gap's parts in ms per profiled call: the slower arm's, the faster arm's and "
            "their difference, per op category (fused blocks as one).",
            _expert_gaps,
            records("profile", ["op_time_ms"]),
            drop=("device",),
            when=nonempty(_expert_gaps),
            otherwise="Neither arm of these comparisons was profiled in this run.",
        ),
    ),
    when=nonempty(expert_pairs),
)
