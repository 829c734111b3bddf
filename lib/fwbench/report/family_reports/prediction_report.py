"""Prediction (21_prediction, 22_recommend): how well the predictor does on configurations no fit
has seen, and what its recommendations cost.
"""

from __future__ import annotations

import pandas as pd

from fwbench.report.items import Section, Table, empty, per_analysis, records

PREDICTION_GROUP = "hold-out or query"


def prediction_table(meas: pd.DataFrame) -> pd.DataFrame:
    """21_prediction's scores per hold-out and 22_recommend's per kind of query, one row each:
    ``family_table`` would pool them, since the hold-out lives in ``extra``. A query's
    ``regret_pct`` is the median over its queries."""
    rows = meas[(meas.family == "prediction") & (meas.status == "ok") & meas.value.notna()]
    if rows.empty:
        return pd.DataFrame()
    group = [
        f"hold-out: {e['holdout']}" if e.get("holdout") else f"query: {e.get('query', '')}"
        for e in rows.extra
    ]
    table = rows.assign(**{PREDICTION_GROUP: group}).pivot_table(
        index=PREDICTION_GROUP, columns="metric", values="value", aggfunc="median"
    )
    table = table.reset_index()
    table.columns.name = None
    return table


@per_analysis
def predictions(analysis):
    return prediction_table(analysis.meas)


PREDICTION = Section(
    "Prediction",
    "How well the predictor does on configurations no fit has seen (21_prediction: grouped "
    "hold-outs by model family, batch size above 16, thread count and CPU; MAPE, the share "
    "within ±10% and ±15%, the worst error, how often the 90% interval held, the correct "
    "JAX-vs-PyTorch winner where the measured gap is decided), and how much throughput the "
    "recommender gives up when it picks from predictions alone (22_recommend: median regret "
    "and the share of queries within 5%). Goals: MAPE ≤ 10% on unseen batch sizes, ≤ 15% on "
    "unseen families, a correct winner ≥ 90%, regret ≤ 5% in ≥ 90% of queries.",
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
