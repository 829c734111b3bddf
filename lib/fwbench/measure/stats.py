"""Summary statistics for timing samples: percentiles, spread, and a bootstrap CI of the median."""

from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats

from fwbench import vocab
from fwbench.vocab import CONFIDENCE

# IQR/median above this marks a measurement as noisy (torch.utils.benchmark warns at the same level).
NOISY_IQR_OVER_MEDIAN = 0.10
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
        "noisy": bool(iqr_over_median > NOISY_IQR_OVER_MEDIAN),
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
