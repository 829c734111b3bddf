"""The baselines every prediction score stands beside (families/prediction/baselines.py): FLOPs
scaled from the nearest model of the setting, always the framework that won most often, and
recommendations by that constant rule; and the report's rule that a goal is met only where the
predictor beats its baseline."""

import numpy as np
import pandas as pd
import pytest

from fwbench.families.prediction import baselines, prediction_report, predictor, recommend


def _row(model, framework, flops, seconds, *, device="CPU A", threads=2, batch=4, rates=None):
    rates = rates or [batch / seconds] * 3
    return {
        "campaign": "c", "run_id": "r", "model": model, "precision": "fp32",
        "batch_size": batch, "threads": threads, "device_name": device, "image_size": 224,
        "framework": framework, "mode": "eager" if framework == "torch" else "jit",
        "total_flops": flops, "seconds": seconds, "trial_img_s": dict(enumerate(rates)),
        "latency_p95_s": seconds, "img_s": batch / seconds,
    }  # fmt: skip


def test_latency_comes_from_the_nearest_model_of_the_setting_scaled_by_flops():
    train = pd.DataFrame([
        _row("small", "torch", 1e9, 1.0),
        _row("big", "torch", 4e9, 3.0),
        # nearer in FLOPs, but another framework: never the neighbour while torch has one
        _row("near", "jax", 2.9e9, 100.0),
        # the same framework on another CPU: only where this CPU has no row of the setting
        _row("elsewhere", "torch", 3e9, 50.0, device="CPU B"),
    ])  # fmt: skip
    test = pd.DataFrame([
        _row("mine", "torch", 3e9, 1.0),
        _row("mine", "torch", 3e9, 1.0, device="CPU C"),
        _row("mine", "jax", 1.45e9, 1.0, device="CPU C"),
    ])  # fmt: skip
    found = baselines.flops_scaled(train, test)
    # |log 3 - log 4| < |log 3 - log 1|: the big model, 3 s for 4 GFLOP, so 2.25 s for 3
    assert found.iloc[0] == pytest.approx(3.0 * 3 / 4)
    # no torch row on CPU C: torch eager fp32 on any CPU, where "elsewhere" is nearest
    assert found.iloc[1] == pytest.approx(50.0)
    assert found.iloc[2] == pytest.approx(100.0 * 1.45 / 2.9)


def _pairs(wins: dict[str, str]) -> pd.DataFrame:
    """One decided pair per model: the named framework runs twice as fast as the other."""
    rows = []
    for model, winner in wins.items():
        for framework in ("torch", "jax"):
            rate = 10.0 if framework == winner else 5.0
            jitter = (1.0, 1.02, 0.98) if framework == "torch" else (1.0, 0.99, 1.01)
            rows.append(_row(model, framework, 1e9, 4 / rate, rates=[rate * j for j in jitter]))
    return pd.DataFrame(rows)


def test_the_constant_winner_is_the_training_majority_and_scores_on_the_same_pairs():
    train = _pairs({"a": "torch", "b": "torch", "c": "jax"})
    assert baselines.majority_winner(train) == "torch"
    assert baselines.majority_winner(_pairs({"a": "jax", "b": "torch"})) == "torch"  # a tie
    assert baselines.majority_winner(train.iloc[:0]) is None
    held = _pairs({"x": "torch", "y": "jax", "z": "torch", "w": "torch"}).assign(
        fold="f", constant_winner="torch", baseline=1.0, setting_seen=True
    )
    # the rule says torch every time: right on three of the four decided pairs
    found = baselines.holdout_scores(held)
    assert found["correct_winner_rate"] == pytest.approx(75.0)
    assert found["decided_pairs"] == 4
    # a predictor that is always right beats it on the same pairs
    right = held.assign(predicted=held.seconds)
    assert predictor.winner_score(right)["correct_winner_rate"] == 100.0


def test_the_constant_rule_recommends_the_winners_default_mode_with_the_most_threads():
    candidates = pd.DataFrame([
        _row("m", "torch", 1e9, 0.10, threads=1),
        _row("m", "torch", 1e9, 0.08, threads=2),
        _row("m", "jax", 1e9, 0.02, threads=2),
        {**_row("m", "torch", 1e9, 0.05, threads=2), "mode": "compile"},
    ])  # fmt: skip
    ranked = baselines.rule_ranking(candidates, "torch")
    assert ranked.throughput_img_s.idxmax() == 1  # torch eager at 2 threads
    assert baselines.rule_ranking(candidates, "jax").throughput_img_s.idxmax() == 2
    found = recommend.choice(candidates, ranked, None)
    # the best measured is JAX at 0.02 s; the rule's pick gives up 1 - 0.02/0.08 of it
    assert found["regret_pct"] == pytest.approx((1 - 0.02 / 0.08) * 100)
    # under a cap the rule knows no latency: it picks as it would without one
    capped = recommend.choice(candidates, ranked, 0.06)
    assert capped["violates"] and capped["regret_pct"] == 100.0


def test_the_readme_meets_a_goal_only_where_the_predictor_beats_its_baseline():
    table = pd.DataFrame(
        {
            "hold-out or query": [
                "hold-out: batch", "hold-out: batch · baseline",
                "hold-out: lineage", "hold-out: lineage · baseline",
            ],
            "mape_pct": [8.0, 6.0, 12.0, 40.0],
        }
    )  # fmt: skip
    lines = prediction_report.readme_lines(table, "report.md")
    body = "\n".join(lines)
    # batch: within its 10% bound, but the baseline does better: not met
    assert "MAPE ≤ 10%: not met, no better than the baseline" in body
    # lineage: within 15% and well under the baseline's 40%
    assert "MAPE ≤ 15%: met; baseline 40.0%, beaten" in body
    assert "· baseline |" not in body  # the baseline rows are read, not listed


def test_every_frozen_set_is_a_test_row_held_to_the_tests_goal(tmp_path):
    from fwbench.report import sections

    table = pd.DataFrame(
        {
            "hold-out or query": [
                "test: frozen set", "test: frozen set kernels",
                "test: frozen set kernels · baseline", "hold-out: lineage · kernels",
            ],
            "mape_pct": [48.8, 12.0, 30.0, 20.0],
        }
    )  # fmt: skip
    (tmp_path / "prediction.csv").write_text(table.to_csv(index=False))
    tables = tmp_path
    lines = prediction_report.readme_part({}, tables, "r.md")
    body = "\n".join(lines)
    assert "| test: frozen set kernels | 12.0% |" in body
    assert "MAPE ≤ 15%: met; baseline 30.0%, beaten" in body
    assert "MAPE ≤ 15%: missed by 33.8 points" in body  # the first set, 48.8%
    assert "· kernels" not in body  # another predictor's validation rows stay in the report
    assert sections.read_table(tables, "prediction").shape[0] == 4


def test_a_baseline_is_recorded_as_its_own_row_of_the_prediction_table():
    meas = pd.DataFrame(
        [
            {"family": "prediction", "status": "ok", "metric": "regret_within_5pct",
             "value": v, "extra": extra}
            for v, extra in (
                (85.0, {"test": "frozen set"}),
                (100.0, {"test": "frozen set", "predictor": "baseline"}),
                (80.0, {"query": "batch"}),
                (90.0, {"query": "batch", "predictor": "baseline"}),
            )
        ]
    )  # fmt: skip
    table = prediction_report.prediction_table(meas).set_index("hold-out or query")
    assert table.regret_within_5pct.to_dict() == {
        "query: batch": 80.0,
        "query: batch · baseline": 90.0,
        "test: frozen set": 85.0,
        "test: frozen set · baseline": 100.0,
    }
    assert np.isfinite(table.regret_within_5pct).all()


def test_the_frozen_tests_baselines_score_the_same_rows_the_predictor_was_scored_on():
    table = _pairs({"a": "torch", "b": "torch", "c": "jax"})
    keys = ["model", "framework", "mode", "precision", "batch_size", "threads", "image_size"]
    measured = pd.DataFrame([
        {**_row("resnet18", "torch", 0, 0.2, batch=1, rates=[5.0, 5.1, 4.9]), "image_size": 32},
        {**_row("resnet18", "jax", 0, 0.1, batch=1, rates=[10.0, 9.8, 10.3]), "image_size": 32},
        # measured, but never predicted: not a row of the score
        {**_row("resnet18", "torch", 0, 0.4, batch=8), "image_size": 32},
    ]).assign(mode=["eager", "torchax", "eager"])  # fmt: skip
    scored = measured.iloc[:2][[*keys, "device_name"]]
    found = baselines.test_scores(scored, measured, table)
    assert found["n"] == 2
    # the training pairs' majority is PyTorch; on the set JAX won its one decided pair
    assert found["decided_pairs"] == 1 and found["correct_winner_pct"] == 0.0
    assert np.isfinite(found["mape_pct"])


def test_the_readme_names_every_figure_where_the_baseline_does_as_well():
    table = pd.DataFrame(
        {
            "hold-out or query": ["hold-out: lineage", "hold-out: lineage · baseline"],
            "mape_pct": [12.0, 40.0],
            "median_pct": [9.0, 20.0],
            "correct_winner_rate": [70.0, 91.5],
        }
    )
    (said,) = [
        line for line in prediction_report.readme_lines(table, "r.md") if "baseline (" in line
    ]
    assert "hold-out: lineage, correct winner 91.5% against 70.0%" in said
    assert "MAPE" not in said and "median" not in said  # lower errors: the predictor's
