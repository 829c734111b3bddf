"""A regression detector on paired ratios: each run judged against a reference timed in the same
run, by a one-sided CUSUM whose threshold is simulated for at most one false alert per 100
histories.

Why not ``regressions.detect`` alone: it tests absolute per-run medians, which carry the run
effect (a run moves every timing it makes), and it re-tests the whole history at each new run
without sequential error control; on the Intel series that gave 36% recall at a 10% slowdown and
13 false alerts per 100 unchanged histories. Here a history point is a run's mean log ratio of
the arm watched over a reference measured in the same run and the same rounds (the other
framework's arm, or a pinned canary workload), so the run effect both share cancels, and the
evidence accumulates run by run (Page's CUSUM): after ``BASELINE_RUNS`` runs fix the level,

    S_t = max(0, S_(t-1) + z_t - k),   z_t = (x_t - baseline mean) / (sd * sqrt(1 + 1/baseline))

and an alert is raised the first time ``S_t`` passes ``h``. ``k`` is half the slowdown to catch
in units of the point's SD (the value that detects that shift fastest); ``h`` is the 99th
percentile of the largest ``S_t`` over unchanged histories drawn from the same noise
(``threshold``), so that at most 1 in 100 unchanged histories ever alerts. Histories are drawn
from real run-to-run residuals (``residual_pool``): runs of committed series, each comparison's
run means less their own mean.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fwbench.report import regressions

BASELINE_RUNS = 3
# the histories and goals of the change-point detector's evaluation, so the two compare
POINTS, CHANGE_AT = regressions.POINTS, regressions.CHANGE_AT
FALSE_ALERTS_PER_100 = regressions.GOAL_FALSE_PER_100
GOAL_RECALL = regressions.GOAL_RECALL_10PCT
GOAL_DELAY_RUNS = regressions.GOAL_DELAY_RUNS
_SLOWDOWN = math.log(1.10)
_SIMULATIONS = 4000
SEED = 0


def residual_pool(rounds: pd.DataFrame) -> np.ndarray:
    """Run-to-run residuals of a series' paired log ratios (``verdicts.COLUMNS`` rounds, two or
    more runs): each comparison's run means less their mean, scaled by sqrt(R / (R - 1)) so that
    their spread is a run mean's own."""
    means = rounds.groupby(["comparison", "run"]).y.mean().unstack("run").dropna()
    runs = means.shape[1]
    if runs < 2 or means.empty:
        return np.array([])
    residuals = means.sub(means.mean(axis=1), axis=0) * math.sqrt(runs / (runs - 1))
    return residuals.to_numpy().ravel()


def statistic(history: np.ndarray, sd: float, k: float, baseline: int = BASELINE_RUNS):
    """The CUSUM path ``S_t`` over the points after the baseline (positive: slower)."""
    level = float(np.mean(history[:baseline]))
    scale = sd * math.sqrt(1 + 1 / baseline)
    path, s = [], 0.0
    for x in history[baseline:]:
        s = max(0.0, s + (x - level) / scale - k)
        path.append(s)
    return np.asarray(path)


def first_alert(history: np.ndarray, sd: float, h: float, k: float, baseline: int = BASELINE_RUNS):
    """The index of the point that first raises an alert, or None."""
    above = np.nonzero(statistic(history, sd, k, baseline) > h)[0]
    return int(above[0]) + baseline if len(above) else None


def _histories(pool: np.ndarray, n: int, rng: np.random.Generator, slowdown: float) -> np.ndarray:
    draws = rng.choice(pool, size=(n, POINTS), replace=True)
    draws[:, CHANGE_AT:] += slowdown
    return draws


def reference_value(sd: float, slowdown: float = _SLOWDOWN, baseline: int = BASELINE_RUNS):
    """CUSUM's ``k``: half the slowdown in units of a point's standardized SD."""
    return slowdown / (sd * math.sqrt(1 + 1 / baseline)) / 2


def threshold(
    pool: np.ndarray, sd: float, k: float, seed: int = SEED, per_100: float = FALSE_ALERTS_PER_100
) -> float:
    """``h`` for at most ``per_100`` alerts per 100 unchanged histories."""
    rng = np.random.default_rng(seed)
    worst = [statistic(h, sd, k).max() for h in _histories(pool, _SIMULATIONS, rng, 0.0)]
    return float(np.quantile(worst, 1 - per_100 / 100))


def evaluate(pool: np.ndarray, seed: int = SEED + 1, simulations: int = 1000) -> dict:
    """The detector on histories resampled from ``pool``: false alerts per 100 unchanged
    histories, recall of a 10% slowdown by the last point, and the share caught within
    ``GOAL_DELAY_RUNS`` slow runs; with the point SD, ``k`` and ``h`` it used."""
    pool = np.asarray(pool, dtype=float)
    sd = float(np.std(pool, ddof=1))
    k = reference_value(sd)
    h = threshold(pool, sd, k)
    rng = np.random.default_rng(seed)
    unchanged = [first_alert(x, sd, h, k) for x in _histories(pool, simulations, rng, 0.0)]
    slowed = [first_alert(x, sd, h, k) for x in _histories(pool, simulations, rng, _SLOWDOWN)]
    caught = [a for a in slowed if a is not None and a >= CHANGE_AT]
    early = sum(a is not None and a < CHANGE_AT for a in slowed)
    delays = np.asarray([a - CHANGE_AT + 1 for a in caught])
    result = {
        "residuals": len(pool),
        "point_sd": sd,
        "k": k,
        "h": h,
        "false_per_100": 100.0 * sum(a is not None for a in unchanged) / simulations,
        "early_per_100": 100.0 * early / simulations,  # slowed histories flagged before the step
        "recall_10pct": len(caught) / simulations,
        "within_3": float(np.sum(delays <= GOAL_DELAY_RUNS)) / simulations,
        "delay_median": float(np.median(delays)) if len(caught) else math.nan,
    }
    result["meets_goals"] = bool(
        result["false_per_100"] <= FALSE_ALERTS_PER_100 + 1e-9
        and result["recall_10pct"] >= GOAL_RECALL
        and result["within_3"] >= GOAL_RECALL
    )
    return result


# A paired history cannot tell which arm moved: a JAX ÷ PyTorch ratio falls when JAX slows or
# PyTorch speeds up. So each comparison is watched from both sides, each one-sided test at half
# the false-alert budget, and an alert names the arm that became slower *relative to the other*.
ALERT_COLUMNS = [
    "comparison", "slower", "run_id", "change_pct", "statistic", "threshold", "runs",
]  # fmt: skip
SIDES = {"jax": -1.0, "torch": 1.0}  # x = sign * log(JAX / PyTorch): positive when that arm slows


def paired_alerts(rounds: pd.DataFrame, pool: np.ndarray, run_order: list[str]) -> pd.DataFrame:
    """The alerts over each comparison's history of run means in ``rounds`` (``verdicts.COLUMNS``,
    ``y`` the log of JAX ÷ PyTorch throughput, ``run`` a run id), runs in ``run_order``: the first
    run where a side's CUSUM passes its threshold, simulated on ``pool`` (run-to-run residuals of
    this CPU model) for ``FALSE_ALERTS_PER_100`` per 100 histories over both sides together.
    ``change_pct`` is how much slower the named arm ran, relative to the other, against the
    baseline's level, from where the change began (after the statistic last stood at 0) to
    the alert. Comparisons with fewer than
    ``BASELINE_RUNS + 1`` runs carry no history yet and raise nothing."""
    pool = np.asarray(pool, dtype=float)
    rows = []
    if len(pool) < 2 or rounds.empty:
        return pd.DataFrame(rows, columns=ALERT_COLUMNS)
    sd = float(np.std(pool, ddof=1))
    k = reference_value(sd)
    thresholds = {
        side: threshold(sign * pool, sd, k, per_100=FALSE_ALERTS_PER_100 / len(SIDES))
        for side, sign in SIDES.items()
    }
    order = {run: i for i, run in enumerate(run_order)}
    means = rounds.groupby(["comparison", "run"]).y.mean().reset_index()
    means = means.assign(at=means.run.map(order)).dropna(subset=["at"]).sort_values("at")
    for comparison, history in means.groupby("comparison", sort=True):
        if len(history) <= BASELINE_RUNS:
            continue
        for side, sign in SIDES.items():
            x = sign * history.y.to_numpy()
            alert = first_alert(x, sd, thresholds[side], k)
            if alert is None:
                continue
            # the change began after the statistic last stood at 0 (CUSUM's own change point)
            path = statistic(x, sd, k)[: alert - BASELINE_RUNS + 1]
            zeros = np.nonzero(path == 0)[0]
            begun = BASELINE_RUNS + (int(zeros[-1]) + 1 if len(zeros) else 0)
            moved = float(np.mean(x[begun : alert + 1]) - np.mean(x[:BASELINE_RUNS]))
            rows.append(
                {
                    "comparison": comparison,
                    "slower": side,
                    "run_id": history.run.iloc[alert],
                    "change_pct": round(100 * math.expm1(moved), 2),
                    "statistic": round(float(statistic(x, sd, k)[alert - BASELINE_RUNS]), 3),
                    "threshold": round(thresholds[side], 3),
                    "runs": len(history),
                }
            )
    return pd.DataFrame(rows, columns=ALERT_COLUMNS)
