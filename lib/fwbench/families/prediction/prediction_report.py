"""Prediction (21_prediction, 22_recommend): how well the predictor does on configurations no fit
has seen, and what its recommendations cost.
"""

from __future__ import annotations

import pandas as pd

from fwbench.measure.goals import Goal
from fwbench.report import sections
from fwbench.report.items import Section, Table, empty, per_analysis, records
from fwbench.vocab import PREDICTION_BASELINE, PREDICTION_ERROR_METRICS, PREDICTION_GOALS

PREDICTION_GROUP = "hold-out or query"


def prediction_table(meas: pd.DataFrame) -> pd.DataFrame:
    """21_prediction's scores per hold-out and 22_recommend's per kind of query, one row each:
    ``family_table`` would pool them, since the hold-out lives in ``extra``. A query's
    ``regret_pct`` is the median over its queries."""
    rows = meas[(meas.family == "prediction") & (meas.status == "ok") & meas.value.notna()]
    if rows.empty:
        return pd.DataFrame()
    group = [_group(e) for e in rows.extra]
    table = rows.assign(**{PREDICTION_GROUP: group}).pivot_table(
        index=PREDICTION_GROUP, columns="metric", values="value", aggfunc="median"
    )
    table = table.reset_index()
    table.columns.name = None
    return table


def _group(extra: dict) -> str:
    """A record's row: its hold-out or query, and for a score of something other than the
    predictor itself (the per-op sum, the ratio predicted directly) what was scored and on which
    setting, so that no row pools two predictors' scores."""
    # a baseline's scores on the test or the queries are a row of their own, as on a hold-out
    by = f" · {extra['predictor']}" if extra.get("predictor") else ""
    if extra.get("test"):
        return f"test: {extra['test']}{by}"
    if not extra.get("holdout"):
        return f"query: {extra.get('query', '')}{by}"
    parts = [extra["holdout"], extra.get("predictor")]
    part = extra.get("setting") or extra.get("jax_mode")
    parts.append(None if part == "all" else part)
    return "hold-out: " + " · ".join(p for p in parts if p)


@per_analysis
def predictions(analysis):
    return prediction_table(analysis.meas)


PREDICTION = Section(
    "Prediction",
    "How well the predictor does on configurations no fit has seen. The test: the frozen set, "
    "models drawn before the predictor changed, predicted and committed before they were "
    "measured, scored once (`fwbench freeze-test`). Validation, read while the predictor was "
    "designed (21_prediction): grouped hold-outs by lineage (by name pattern, `family`, in runs "
    "before lineages), batch size above 16, thread count and CPU; MAPE, the median error, the "
    "share within ±10%, ±15% and ±20%, the worst error, how often the 90% interval held, the "
    "correct JAX-vs-PyTorch winner where the measured gap is decided. Rows named after a "
    "hold-out and another predictor score that one on the same rows: the per-op sum, and the "
    "JAX ÷ PyTorch ratio predicted directly beside the ratio of two predictions. And how much "
    "throughput the recommender gives up when it picks from predictions alone (22_recommend: "
    "median regret and the share of queries within 5%). Rows ending in `· baseline` score what "
    "a user gets without the predictor, on the same rows: the seconds of the nearest model by "
    "FLOPs in the same setting, scaled by FLOPs; always the framework that won most of the "
    "training rows' decided pairs; and recommendations by that constant rule. Goals: on the test "
    "MAPE ≤ 15%; MAPE ≤ 10% on unseen batch sizes, ≤ 15% on unseen lineages, a correct winner ≥ "
    "90%, regret ≤ 5% in ≥ 90% of queries, each met only where the predictor beats its "
    "baseline. Rows ending in `· kernels, <kind> kernels` say which kernel kinds carry the "
    "kernel-level predictor's test error: the kind's mean share of the predicted time "
    "(`time_share_pct`), its share of the summed absolute error with each row's error split "
    "among its kinds by their shares (`error_carried_pct`), and the MAPE and median signed error "
    "(`median_signed_pct`, below 0 predicted too fast) of the rows where it holds the largest "
    "share.",
    (
        Table(
            "prediction",
            "Scores per hold-out (21_prediction) and per kind of query (22_recommend).",
            predictions,
            records("prediction"),
        ),
    ),
    empty=empty(predictions),
    empty_note="No prediction records in this run.",
)


SECTIONS = (PREDICTION,)


# the README's columns of the prediction table, in order, with their headings
_PREDICTION_COLUMNS = [
    ("mape_pct", "MAPE"),
    ("median_pct", "median"),
    ("within_15pct", "within ±15%"),
    ("within_20pct", "within ±20%"),
    ("worst_pct", "worst"),
    ("interval_coverage_pct", "90% interval held"),
    ("correct_winner_rate", "correct winner"),
    ("memory_error_pct", "memory error"),
    ("regret_within_5pct", "regret ≤ 5%"),
]


# the README's rows: the test, and the hold-outs of time per call (the report has the rest)
README_ROWS = ("test: frozen set", "hold-out: lineage", "hold-out: batch", "hold-out: cpu")


def readme_part(_content: dict, tables_dir, report_link: str) -> list[str]:
    """The README's lines, from the report's prediction table (``README_ROWS``)."""
    table = sections.read_table(tables_dir, "prediction")
    if not table.empty:
        rows = [*README_ROWS, *(f"{r} · {PREDICTION_BASELINE}" for r in README_ROWS)]
        # every frozen set is a test row: "test: frozen set", "test: frozen set kernels"
        names = table[table.columns[0]].astype(str)
        later = names.str.fullmatch(rf"test: frozen set \w+( · {PREDICTION_BASELINE})?")
        table = table[names.isin(rows) | later]
    return readme_lines(table, report_link)


def readme_lines(table: pd.DataFrame, report_link: str) -> list[str]:
    """The README's lines: the frozen test, 21_prediction's hold-outs and 22_recommend's queries,
    one row each, with the goal each is held to and by how much it is met or missed."""
    if table.empty:
        return []
    group = table.columns[0]
    # the predictor's own scores; the per-op sum's and the direct ratio's stay in the report
    baseline = {
        str(name).removesuffix(f" · {PREDICTION_BASELINE}"): values
        for name, values in table.set_index(group).iterrows()
        if str(name).endswith(f" · {PREDICTION_BASELINE}")
    }
    table = table[~table[group].astype(str).str.contains(" · ")]
    # the test first, then validation; a column none of the rows fills is left out
    table = table.sort_values(group, key=lambda g: ~g.astype(str).str.startswith("test:"))
    columns = [
        (c, label) for c, label in _PREDICTION_COLUMNS if c in table and table[c].notna().any()
    ]
    body = []
    for row in table.itertuples(index=False):
        values = dict(zip(table.columns, row, strict=True))
        cells = ["" if pd.isna(values[c]) else f"{values[c]:.1f}%" for c, _ in columns]
        # "hold-out: batch" -> the batch hold-out's goal; "query: latency" -> the queries' goal;
        # "test: frozen set" -> the test's
        kind, _, name = str(values[group]).partition(": ")
        # every frozen set is held to the test's goal
        name = "frozen set" if name.startswith("frozen set") else name
        goal = PREDICTION_GOALS.get("query" if kind == "query" else name)
        words = ""
        if goal is not None and not pd.isna(values.get(goal[0], float("nan"))):
            metric, bound = goal
            at_most = metric in PREDICTION_ERROR_METRICS
            label = dict(_PREDICTION_COLUMNS)[metric]
            # a goal is met only where the predictor also beats its baseline on the same rows
            floor = baseline.get(str(values[group]), {}).get(metric, float("nan"))
            said = Goal(values[metric], bound, at_most, floor).words()
            words = f"{label} {'≤' if at_most else '≥'} {bound:g}%: {said}"
        body.append([values[group], *cells, words])
    return [
        "Prediction, each row scored only on what no fit saw: the test (models predicted before "
        "they were measured, scored once) and validation (hold-outs, read while the predictor "
        f"was designed) ([report]({report_link}#prediction)):",
        sections.markdown_table([group, *(label for _, label in columns), "goal"], body),
        *_baseline_wins(table, baseline, group, columns),
    ]


def _baseline_wins(table: pd.DataFrame, baseline: dict, group: str, columns) -> list[str]:
    """One sentence naming every figure of the table where the rule without a model (the row's
    baseline) does at least as well as the predictor; none where it never does."""
    found = []
    for row in table.itertuples(index=False):
        values = dict(zip(table.columns, row, strict=True))
        floor = baseline.get(str(values[group]))
        if floor is None:
            continue
        for column, label in columns:
            mine, theirs = values[column], floor.get(column, float("nan"))
            if pd.isna(mine) or pd.isna(theirs):
                continue
            at_most = column in (*PREDICTION_ERROR_METRICS, "median_pct", "worst_pct")
            if (theirs <= mine) if at_most else (theirs >= mine):
                found.append(f"{values[group]}, {label} {theirs:.1f}% against {mine:.1f}%")
    if not found:
        return []
    return [
        f"Where the baseline (no model: FLOPs scaled from the nearest measured model of the "
        "setting, always the framework that won most often, and that rule's recommendations) "
        f"does as well or better: {'; '.join(found)}."
    ]
