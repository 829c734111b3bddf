"""Prediction (21_prediction, 22_recommend): how well the predictor does on configurations no fit
has seen, and what its recommendations cost.
"""

from __future__ import annotations

from fwbench.report.items import Section, Table, empty, records, throughput


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
            lambda a: a.prediction,
            records("prediction"),
        ),
    ),
    empty=empty("prediction"),
    empty_note="No prediction records in this run.",
)


SECTIONS = (PREDICTION,)
