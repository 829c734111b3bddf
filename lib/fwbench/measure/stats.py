"""Summary statistics for timing samples: percentiles, spread, and a bootstrap CI of the median."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats as scipy_stats

from fwbench import vocab
from fwbench.vocab import CONFIDENCE

# IQR/median above this marks a measurement as noisy (torch.utils.benchmark warns at the same level).
_NOISY_IQR_OVER_MEDIAN = 0.10
# The bootstrap settings live in the vocabulary, where the report's methodology reads them too.
# Above BOOTSTRAP_MAX_SAMPLES a seeded random subset is resampled: resampling half a million
# sub-microsecond timings costs minutes, and the subset's interval is, if anything, slightly wider.


def bootstrap_ci(samples, statistic=np.median, *, confidence: float = CONFIDENCE, seed: int = 0):
    """Percentile-bootstrap interval of ``statistic``; degenerate to the point for < 2 samples."""
    data = np.asarray(samples, dtype=float)
    if data.size < 2 or np.all(data == data[0]):
        point = float(statistic(data)) if data.size else float("nan")
        return point, point
    if data.size > vocab.BOOTSTRAP_MAX_SAMPLES:
        data = np.random.default_rng(seed).choice(data, vocab.BOOTSTRAP_MAX_SAMPLES, replace=False)
    result = scipy_stats.bootstrap(
        (data,),
        statistic,
        confidence_level=confidence,
        n_resamples=vocab.BOOTSTRAP_RESAMPLES,
        method="percentile",
        vectorized=False,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def summarize(samples) -> dict:
    """p50/p90/p95/p99, mean, std, IQR/median (flagged above 10%) and a 95% CI of the median."""
    data = np.asarray(samples, dtype=float)
    if data.size == 0:
        raise ValueError("no samples to summarize")
    p25, p50, p75, p90, p95, p99 = np.percentile(data, [25, 50, 75, 90, 95, 99])
    iqr_over_median = float((p75 - p25) / p50) if p50 > 0 else float("nan")
    ci_low, ci_high = bootstrap_ci(data)
    return {
        "n": int(data.size),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "mean": float(data.mean()),
        "std": float(data.std(ddof=1)) if data.size > 1 else 0.0,
        "min": float(data.min()),
        "iqr_over_median": iqr_over_median,
        "noisy": bool(iqr_over_median > _NOISY_IQR_OVER_MEDIAN),
        "median_ci_low": ci_low,
        "median_ci_high": ci_high,
    }


def ratio_ci(numerator, denominator, *, confidence: float = CONFIDENCE, seed: int = 0):
    """Ratio of medians of two independent samples with a two-sample bootstrap interval."""
    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    point = float(np.median(a) / np.median(b))
    if a.size < 2 or b.size < 2:
        return point, point, point
    result = scipy_stats.bootstrap(
        (a, b),
        lambda x, y: np.median(x) / np.median(y),
        confidence_level=confidence,
        n_resamples=vocab.BOOTSTRAP_RESAMPLES,
        method="percentile",
        vectorized=False,
        paired=False,
        rng=np.random.default_rng(seed),
    )
    return point, float(result.confidence_interval.low), float(result.confidence_interval.high)


class _PairedRatio(NamedTuple):
    # B/A over the rounds: their geometric mean for the t-interval (its centre, so the point
    # always lies inside the interval), their median for the bootstrap of medians
    ratio: float
    low: float  # 95% interval (``confidence``), NaN with fewer than two rounds
    high: float
    rounds: int  # rounds with a finite, positive value on both arms
    method: str


_PAIRED_METHODS = ("t", "bootstrap")
# The default is the method whose A/A false-winner rate stays at its nominal 5% with few rounds
# (see aa_false_winner_rate): the percentile bootstrap calls a winner in a quarter of A/A
# comparisons at 3 rounds.
DEFAULT_PAIRED_METHOD = "t"


def paired_ratio_interval(
    a,
    b,
    *,
    method: str = DEFAULT_PAIRED_METHOD,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> _PairedRatio:
    """B/A from per-round values paired by round, with an interval from the between-round spread.

    Each round's ratio cancels what the round shared (the machine's state while both arms ran), so
    the interval reflects only how the ratio itself varies from round to round. ``method``:

    - ``"t"``: the geometric mean of the round ratios with Student's t-interval on the log
      ratios, exponentiated (a ratio's noise is multiplicative). With k rounds it has k-1
      degrees of freedom, which widens it honestly when k is small.
    - ``"bootstrap"``: percentile bootstrap of the median log ratio, resampling rounds. With
      3 rounds its interval is essentially [min, max] of the three ratios, so it excludes 1
      whenever all three point the same way: one A/A comparison in four.

    A round missing on either arm (NaN, e.g. a failed trial) is dropped with its pair. With fewer
    than two rounds left the interval is NaN: one round says nothing about the spread.
    """
    if method not in _PAIRED_METHODS:
        raise ValueError(f"method must be one of {_PAIRED_METHODS}, got {method!r}")
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be paired by round: shapes {a.shape} and {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    if np.any((a[keep] <= 0) | (b[keep] <= 0)):
        raise ValueError("a ratio interval needs positive values on both arms")
    logs = np.log(b[keep] / a[keep])
    k = int(logs.size)
    if k == 0:
        return _PairedRatio(float("nan"), float("nan"), float("nan"), 0, method)
    # the t-interval's own centre: the median of 6-8 rounds has about two thirds of the mean's
    # efficiency, and on the four trust runs of 2026-11-23 it moved ratios between runs by up to
    # 38% where the geometric mean moved them by up to 21%
    point = float(np.exp(logs.mean() if method == "t" else np.median(logs)))
    if k < 2:
        return _PairedRatio(point, float("nan"), float("nan"), k, method)
    alpha = 1 - confidence
    if method == "t":
        half = scipy_stats.t.ppf(1 - alpha / 2, k - 1) * logs.std(ddof=1) / np.sqrt(k)
        low, high = logs.mean() - half, logs.mean() + half
    else:
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, k, size=(vocab.BOOTSTRAP_RESAMPLES, k))
        medians = np.median(logs[picks], axis=1)
        low, high = np.percentile(medians, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return _PairedRatio(point, float(np.exp(low)), float(np.exp(high)), k, method)


def aa_false_winner_rate(
    method: str,
    rounds: int,
    *,
    log_spread: float = 0.05,
    simulations: int = 2000,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> float:
    """How often ``paired_ratio_interval`` calls a winner between two identical arms.

    Each simulation draws ``rounds`` paired rounds of two arms from one distribution: a round
    effect both arms share (it cancels in the ratio, as the machine's state does) times each arm's
    own lognormal noise with standard deviation ``log_spread``. A winner is called when the
    interval excludes 1; a method that keeps its promise does so in ``1 - confidence`` of them.

    Measured with the defaults (log_spread 0.05, 2000 simulations, simulation seed 0, bootstrap
    seeds 0..1999, 95% intervals; a rate near 5% is known to about +-1 point from 2000 draws):

    ======  ===========  ===========
    rounds  t-interval   bootstrap
    ======  ===========  ===========
    3       4.4%         23.9%
    5       4.8%         6.2%
    10      5.0%         5.9%
    ======  ===========  ===========

    The t-interval holds its nominal 5% from 3 rounds on; the percentile bootstrap calls a winner
    in about a quarter of A/A comparisons at 3 rounds (all three ratios on one side of 1 happens
    with probability 1/4) and stays above 5% at 5 and 10. The design review's simulation found 26% at
    3 rounds and 5-6% at 5.
    """
    rng = np.random.default_rng(seed)
    winners = 0
    for i in range(simulations):
        shared = rng.normal(0.0, 0.2, size=rounds)
        a = np.exp(shared + rng.normal(0.0, log_spread, size=rounds))
        b = np.exp(shared + rng.normal(0.0, log_spread, size=rounds))
        result = paired_ratio_interval(a, b, method=method, confidence=confidence, seed=seed + i)
        winners += bool(result.low > 1 or result.high < 1)
    return winners / simulations
