import numpy as np
import pytest

from fwbench.measure.stats import bootstrap_ci, ratio_ci, summarize


def test_percentiles_are_ordered_on_skewed_data():
    rng = np.random.default_rng(1)
    samples = rng.lognormal(mean=0.0, sigma=1.0, size=2000)  # long right tail, like latencies
    s = summarize(samples)
    assert s["p99"] > s["p95"] > s["p90"] > s["p50"]
    assert s["mean"] > s["p50"]  # right skew pulls the mean above the median


def test_summary_matches_numpy_and_ci_brackets_the_median():
    rng = np.random.default_rng(2)
    samples = rng.normal(10.0, 1.0, size=500)
    s = summarize(samples)
    assert s["p50"] == pytest.approx(np.median(samples))
    assert s["std"] == pytest.approx(np.std(samples, ddof=1))
    assert s["median_ci_low"] < s["p50"] < s["median_ci_high"]
    assert s["median_ci_high"] - s["median_ci_low"] < 0.5  # 500 samples pin the median well


def test_noise_flag_follows_iqr_over_median():
    quiet = summarize(np.linspace(99, 101, 101))
    noisy = summarize(np.linspace(50, 150, 101))
    assert not quiet["noisy"] and quiet["iqr_over_median"] == pytest.approx(0.01, rel=1e-6)
    assert noisy["noisy"] and noisy["iqr_over_median"] == pytest.approx(0.5, rel=1e-6)


def test_bootstrap_ci_covers_true_median_most_of_the_time():
    rng = np.random.default_rng(3)
    hits = 0
    for seed in range(40):
        data = rng.exponential(1.0, size=200)
        lo, hi = bootstrap_ci(data, seed=seed)
        hits += lo <= np.log(2) <= hi
    assert hits >= 32  # nominal 95%; percentile bootstrap is a bit under at n=200


def test_ratio_ci_detects_a_real_difference_and_a_tie():
    rng = np.random.default_rng(4)
    a = rng.normal(2.0, 0.05, size=100)
    b = rng.normal(1.0, 0.05, size=100)
    point, lo, hi = ratio_ci(a, b)
    assert point == pytest.approx(2.0, rel=0.03) and lo > 1.9 and hi < 2.1
    _, lo, hi = ratio_ci(rng.normal(1, 0.1, 50), rng.normal(1, 0.1, 50))
    assert lo < 1.0 < hi


def test_empty_samples_are_rejected():
    with pytest.raises(ValueError):
        summarize([])
