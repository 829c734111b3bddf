"""Time to accuracy (15_time_to_accuracy): each framework's best learning rate and batch size from
the same search, its seconds to the target on other data orders, and JAX ÷ PyTorch through the
verdicts' estimator with those data orders as rounds (nested in runs; one run calls no winner),
the seconds both without and with the compile of the step.

Only runs of one design pool: the same target, evaluations an epoch, epochs, search budget and
each framework's mode as the run analysed; an earlier design's runs are another study.
"""

from __future__ import annotations

import math

import altair as alt
import numpy as np
import pandas as pd

from fwbench.measure import verdicts
from fwbench.report import tables
from fwbench.report.items import Each, Figure, Note, Section, Table, literal, nonempty, per_analysis
from fwbench.vocab import framework_label, model_label

SEARCH, TTA = "search_score_s", "time_to_accuracy_s"


_EXTRA = [
    "lr", "reached", "best_top1", "compile_s", "target", "replicate", "search_trial", "losses",
    "evals",
]  # fmt: skip
# what makes two runs the same study (settings every record of 15_time_to_accuracy carries)
DESIGN = ["target", "evals_per_epoch", "max_epochs", "search_trials", "search_seed"]
# fewer evaluations than this before the target, and the seconds are mostly the step's speed
_MIN_EVALS = 10


def _rows(meas: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The family's records of ``metric`` with the attempt's details as columns."""
    return tables.extra_columns(meas[(meas.family == "training") & (meas.metric == metric)], _EXTRA)


def same_design(meas: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The records of the runs whose time-to-accuracy design is ``run_id``'s: the same
    ``DESIGN`` settings and the same mode for each framework."""
    rows = meas[(meas.family == "training") & meas.metric.isin([TTA, SEARCH])]
    if rows.empty:
        return meas.iloc[0:0]

    def design(group: pd.DataFrame) -> tuple:
        settings = tuple(_json_key(group.extra.iloc[0].get(k)) for k in DESIGN)
        return settings, tuple(sorted(set(zip(group.framework, group["mode"], strict=True))))

    designs = {rid: design(group) for rid, group in rows.groupby("run_id")}
    keep = [rid for rid, found in designs.items() if found == designs.get(run_id)]
    return meas[meas.run_id.isin(keep)]


def _json_key(value):
    """A setting as a hashable key (lists from JSON become tuples)."""
    return tuple(value) if isinstance(value, list) else value


def _evals_to_target(rows: pd.DataFrame) -> pd.Series:
    """How many evaluations each attempt ran before and at the one that reached the target."""
    return rows.evals.map(lambda e: len(e) if isinstance(e, list) else np.nan)


def best_table(meas: pd.DataFrame) -> pd.DataFrame:
    """Per model, framework and run: the run's search's best learning rate and batch size, and
    at them the median seconds to the target over the data orders, how many reached it, the
    compile. Each run searches afresh (its scores are timings), so runs may settle apart."""
    found = _rows(meas, TTA)
    searched = _rows(meas, SEARCH)
    if found.empty:
        return pd.DataFrame()
    out = []
    keys = ["model", "framework", "run_id"]
    for (model, framework, run_id), group in found.groupby(keys, sort=True):
        best = group.extra.iloc[0].get("best") or {}
        tried = searched[
            (searched.model == model)
            & (searched.framework == framework)
            & (searched.run_id == run_id)
        ]
        reached = group[group.status == "ok"]
        out.append(
            {
                "model": model,
                "framework": framework,
                "run": run_id,
                "target_top1": float(group.target.iloc[0]),
                "best_lr": best.get("lr"),
                "best_batch_size": best.get("batch_size"),
                "search_trials": len(tried),
                "search_reached": int(tried.reached.fillna(False).astype(bool).sum()),
                "replicates": len(group),
                "reached": len(reached),
                "tta_median_s": float(reached.value.median()) if len(reached) else np.nan,
                "tta_min_s": float(reached.value.min()) if len(reached) else np.nan,
                "tta_max_s": float(reached.value.max()) if len(reached) else np.nan,
                "evals_median": float(_evals_to_target(reached).median())
                if len(reached)
                else np.nan,
                "compile_s": float(group.compile_s.median()),
                "tta_with_compile_median_s": float((reached.value + reached.compile_s).median())
                if len(reached)
                else np.nan,
            }
        )
    return pd.DataFrame(out)


def _tta_rounds(meas: pd.DataFrame, with_compile: bool = False) -> pd.DataFrame:
    """The verdicts' rounds of JAX against PyTorch: one per run, model and data order both
    frameworks reached the target in, ``y`` the log of JAX's seconds over PyTorch's; with
    ``with_compile`` each side's seconds include the compile of its step (JAX's, before the
    clock; PyTorch eager has none), what a user waits for once."""
    rows = _rows(meas, TTA)
    if rows.empty:
        return pd.DataFrame(columns=list(verdicts.COLUMNS))
    if with_compile:
        rows = rows.assign(value=rows.value + rows.compile_s.astype(float).fillna(0.0))
    rows = rows.assign(arm=rows.framework, trial=rows.replicate)
    return tables.arm_rounds(
        rows,
        ["model"],
        [("torch", "jax")],
        lambda key, _a, _b: key[0],
        lambda torch_s, jax_s: math.log(jax_s / torch_s),
    )


def tta_verdicts(meas: pd.DataFrame) -> pd.DataFrame:
    """JAX ÷ PyTorch seconds to the target per model (above 1: JAX takes longer), the data
    orders as rounds, with the interval, design and verdict; and the two best learning rates."""
    found = tables.estimated(_tta_rounds(meas), imported=None)
    compiled = tables.estimated(_tta_rounds(meas, with_compile=True), imported=None)
    best = best_table(meas)
    out = []
    for model, (e, v) in sorted(found.items()):
        faster = _faster(v)
        lrs = best[best.model == model].pivot(index="run", columns="framework", values="best_lr")
        ce, cv = compiled[model]
        out.append(
            {
                "model": model,
                "jax_over_torch_s": e.ratio,
                "ci_low": e.low,
                "ci_high": e.high,
                "design": e.design.replace("rounds", "data orders"),
                "faster": faster,
                "verdict": "faster" if faster else v.verdict,
                "with_compile": ce.ratio,
                "with_compile_low": ce.low,
                "with_compile_high": ce.high,
                "faster_with_compile": _faster(cv),
                "verdict_with_compile": "faster" if _faster(cv) else cv.verdict,
                # the median over runs of each run's two best rates' ratio
                "best_lr_jax_over_torch": float(
                    (lrs.get("jax", np.nan) / lrs.get("torch", np.nan)).median()
                ),
            }
        )
    return pd.DataFrame(out)


def _interval(low: float, high: float) -> str:
    """``[low, high]``, or why there is no bound: with two runs whose ratios differ much more
    than their data orders do, the estimator's degrees of freedom fall below 1."""
    if np.isfinite(low) and np.isfinite(high) and low > 0:
        return f"[{low:.2f}, {high:.2f}]"
    return "(no bounded interval: the runs disagree more than two runs can bound)"


def _faster(v) -> str:
    return {verdicts.FASTER_B: "PyTorch", verdicts.FASTER_A: "JAX"}.get(v.verdict, "")


def _best_words(rows: pd.DataFrame, framework: str) -> str:
    """A framework's best configurations over the runs: "0.08 at batch 64" (one run), or each
    run's in turn."""
    mine = rows[rows.framework == framework].sort_values("run")
    found = [f"{r.best_lr:.3g} at batch {int(r.best_batch_size)}" for r in mine.itertuples()]
    return f"{framework_label(framework)} " + (
        " and ".join(found) if len(found) < 3 else ", ".join(found)
    )


def sentences(meas: pd.DataFrame) -> list[str]:
    lines = []
    best = best_table(meas)
    for r in tta_verdicts(meas).itertuples():
        rows = best[best.model == r.model]
        words = f"{r.faster} reaches it sooner" if r.faster else verdicts.words(r.verdict)
        per_run = " (each run's search in turn)" if rows.run.nunique() > 1 else ""
        lines.append(
            f"{model_label(r.model)} to {rows.target_top1.iloc[0]:g}% validation top-1: JAX "
            f"takes {r.jax_over_torch_s:.2f}× PyTorch's seconds {_interval(r.ci_low, r.ci_high)} "
            f"({r.design}), {words}; best learning rates{per_run} "
            + "; ".join(_best_words(rows, f) for f in sorted(set(rows.framework)))
            + f" (JAX ÷ PyTorch {r.best_lr_jax_over_torch:.2f}"
            + (", the median over runs)." if per_run else ").")
        )
        lines.append(_compile_and_evals(r, rows))
    return lines


def _compile_and_evals(r, rows: pd.DataFrame) -> str:
    """The second sentence of a model: the ratio with each side's compile counted, and how
    many evaluations each framework ran to the target (few: the seconds are mostly step speed)."""
    words = (
        f"{r.faster_with_compile} reaches it sooner"
        if r.faster_with_compile
        else verdicts.words(r.verdict_with_compile)
    )
    evals = {f: float(g.evals_median.median()) for f, g in rows.groupby("framework")}
    counted = ", ".join(f"{framework_label(f)} {n:.0f}" for f, n in sorted(evals.items()))
    fewest = min(evals.values(), default=np.nan)
    caveat = (
        f"; fewer than {_MIN_EVALS}, so the seconds say more about the step's speed than about "
        "convergence"
        if fewest < _MIN_EVALS
        else ""
    )
    return (
        f"{model_label(r.model)} with the compile of the step counted (JAX's before the clock; "
        f"PyTorch eager compiles nothing): JAX takes {r.with_compile:.2f}× PyTorch's seconds "
        f"{_interval(r.with_compile_low, r.with_compile_high)}, {words}. Evaluations to the "
        f"target (median over data orders and runs): {counted}{caveat}."
    )


def _search_chart(meas: pd.DataFrame) -> alt.FacetChart:
    rows = _rows(meas, SEARCH)
    data = pd.DataFrame(
        {
            "model_label": rows.model.map(model_label),
            "framework": rows.framework.map(framework_label),
            "lr": rows.lr.astype(float),
            "batch": rows.batch_size.astype(int).astype(str),
            "score_s": rows.value.astype(float),
            "reached": rows.reached.map({True: "reached", False: "missed"}),
        }
    )
    return (
        alt.Chart(data)
        .mark_point(filled=True, size=60)
        .encode(
            x=alt.X("lr:Q", scale=alt.Scale(type="log"), title="learning rate"),
            y=alt.Y("score_s:Q", scale=alt.Scale(type="log"), title="search score (s)"),
            color=alt.Color("framework:N"),
            shape=alt.Shape("reached:N", title="target"),
            tooltip=["model_label", "framework", "lr", "batch", "score_s", "reached"],
        )
        .facet(column=alt.Column("model_label:N", title=None))
    )


def _loss_chart(meas: pd.DataFrame) -> alt.FacetChart:
    rows = _rows(meas, TTA)
    data = pd.DataFrame(
        [
            {
                "model_label": model_label(r.model),
                "framework": framework_label(r.framework),
                "order": f"{framework_label(r.framework)} · order {r.replicate}",
                "step": i + 1,
                "loss": loss,
            }
            for r in rows.itertuples()
            for i, loss in enumerate(r.losses or [])
        ]  # fmt: skip
    )
    return (
        alt.Chart(data)
        .mark_line(opacity=0.7)
        .encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("loss:Q", scale=alt.Scale(type="log"), title="training loss"),
            color=alt.Color("framework:N"),
            detail="order:N",
        )
        .facet(column=alt.Column("model_label:N", title=None))
    )


def pooled(analysis) -> pd.DataFrame:
    """The measurements of every run the verdicts pool: this CPU model, the same notebooks,
    and the same time-to-accuracy design as the run analysed."""
    meas = analysis.pool_meas if not analysis.pool_meas.empty else analysis.meas
    return same_design(meas, analysis.run_id)


def pooled_sources(metrics: list[str]):
    """The notebooks behind the pooled records of ``metrics``: every pooled run's."""

    def paths(analysis, _frame: pd.DataFrame) -> list[str]:
        rows = pooled(analysis)
        return analysis.pooled_sources(rows[rows.metric.isin(metrics)])

    return paths


@per_analysis
def best(analysis) -> pd.DataFrame:
    return best_table(pooled(analysis))


@per_analysis
def compared(analysis) -> pd.DataFrame:
    return tta_verdicts(pooled(analysis))


SECTION = Section(
    "Time to accuracy",
    "How many seconds of training each framework needs to reach a validation accuracy, at the "
    "learning rate and batch size its own search found soonest (Optuna's TPE sampler, the same "
    "seed and number of trials for both, every attempt from the same initial weights), then "
    "at that configuration on other data orders. The clock holds training only (batches and "
    "steps); evaluations and JAX's compile are off it, and the verdicts are given both without "
    "and with the compile counted. The target is on the validation split the search read: a "
    "tuned time to accuracy, not a held-out test.",
    (
        Each(lambda a: [Note(literal(t)) for t in sentences(pooled(a))]),
        Figure(
            "tta_search",
            "The search",
            "This run's search: each attempt's score (seconds to the target; a miss penalised) "
            "against its learning rate, per model and framework.",
            lambda a: _search_chart(a.meas),
        ),
        Table(
            "tta_best",
            "Per model, framework and run: the run's search's best configuration, and at it the "
            "seconds to the target over the data orders (median, min, max of those that reached "
            "it), the evaluations each ran to reach it (median), JAX's compile of the step (off "
            "the clock) and the median seconds with it counted.",
            best,
            pooled_sources([TTA, SEARCH]),
        ),
        Table(
            "tta_verdicts",
            "JAX ÷ PyTorch seconds to the target (above 1: JAX takes longer), data orders as "
            "rounds nested in runs, through the verdicts' estimator, without and with each "
            "side's compile of the step counted; and the ratio of the two best learning rates "
            "(1: the same function wants the same rate).",
            compared,
            pooled_sources([TTA]),
            when=nonempty(compared),
        ),
        Figure(
            "tta_losses",
            "Training loss at the best configuration",
            "Per step, each data order's training loss until it reached the target.",
            lambda a: _loss_chart(a.meas),
        ),
    ),
    when=nonempty(best),
    name="time_to_accuracy",
)
