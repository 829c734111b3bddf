"""The paired-ratio regression detector with known answers: residual pools of set spread, the
goals met where the paired noise is a relay's, missed where it is absolute medians'."""

import math

import numpy as np
import pandas as pd

from fwbench.report import regressions, sequential


def test_the_detector_meets_its_goals_at_a_paired_ratios_noise():
    rng = np.random.default_rng(0)
    pool = rng.normal(0.0, 0.025, 48)  # 12 comparisons x 4 runs of residuals
    scores = sequential.evaluate(pool, simulations=600)
    assert scores["false_per_100"] <= 1.5  # simulated for 1: 600 histories read it ±0.4
    assert scores["recall_10pct"] >= 0.90 and scores["within_3"] >= 0.90
    assert scores["meets_goals"]


def test_at_absolute_medians_noise_it_says_it_misses():
    rng = np.random.default_rng(1)
    scores = sequential.evaluate(rng.normal(0.0, 0.08, 48), simulations=400)
    assert scores["recall_10pct"] < 0.90 and not scores["meets_goals"]
    assert scores["false_per_100"] <= 2.0  # the threshold still holds false alerts down


def test_the_change_point_detector_on_absolute_points_misses_where_this_one_meets():
    # the same slowdown and noise the paired detector meets its goals at, seen as absolute
    # medians that also carry a run effect of 0.035 (the Intel series'): the old detector
    rng = np.random.default_rng(2)
    pool = np.exp(rng.normal(0.0, 0.05, 60))
    scores = regressions.evaluate(pool, trials=5, series=60, seed=3, run_sd=0.035,
                                  methods={"changepoint": regressions.alerts_changepoint})  # fmt: skip
    row = scores.iloc[0]
    assert row["recall_0.1"] < 0.90 or row.false_per_100 > 1.0


def test_residuals_are_run_means_less_each_comparisons_mean():
    rounds = pd.DataFrame(
        {
            "comparison": ["a"] * 4 + ["b"] * 4,
            "run": [0, 0, 1, 1] * 2,
            "round": [0, 1] * 4,
            "y": [0.1, 0.3, 0.3, 0.5, 1.0, 1.0, 1.2, 1.2],
        }
    )
    residuals = sequential.residual_pool(rounds)
    np.testing.assert_allclose(sorted(residuals), np.array([-0.1, -0.1, 0.1, 0.1]) * math.sqrt(2))


def test_a_cusum_alerts_on_a_step_and_not_on_a_flat_history():
    flat = np.zeros(10)
    step = np.r_[np.zeros(5), np.full(5, 0.1)]
    k = sequential.reference_value(0.02)
    assert sequential.first_alert(flat + 0.001, 0.02, 4.0, k) is None
    assert sequential.first_alert(step, 0.02, 2.0, k) == 5
    assert sequential.first_alert(step, 0.02, 4.0, k) == 6  # a higher bar: one run later
