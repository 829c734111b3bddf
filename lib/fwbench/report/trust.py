"""How far a run's comparisons can be trusted: its trials, an A/A control, stability between two
runs, and the regression detector scored on the run's own between-trial noise.

Everything here reads ``tables.throughput_samples`` rows with trials (``trials``, ``shared`` and
``reruns`` per arm) and ``tables.comparison_matrix`` frames, so it measures exactly the method the
report's comparisons use, on this machine's noise.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from fwbench.measure.stats import paired_ratio_interval
from fwbench.report import regressions
from fwbench.report.tables import CONFIG, SERIES, kept_rounds

# Two halves of two rounds each is the least an A/A split can put an interval on.
AA_MIN_ROUNDS = 4
# The stability goals of issue 13: ratio medians within 10%, Kendall's tau of the ratios >= 0.9.
STABLE_CHANGE = 0.10
STABLE_TAU = 0.9
AA_GOAL = 0.05
# The regression detector's evaluation: points are medians of this many trials (issue 13), and
# the histories per slowdown size.
POINT_TRIALS = 5
EVAL_SERIES = 200
EVAL_SEED = 0
TRIAL_CANDIDATES = (5, 7, 10, 15, 20, 30)

TRIAL_COLUMNS = [*CONFIG, *SERIES, "trials", "reruns", "still_shared", "used"]


def with_trials(samples: pd.DataFrame) -> pd.DataFrame:
    if samples.empty or "trials" not in samples:
        return samples.iloc[0:0]
    return samples[samples.trials.notna()]


def used_values(row) -> list[float]:
    """An arm's trial values, without the ones run on a shared machine when enough are left."""
    return kept_rounds(row.samples, row.shared)


def trials_table(samples: pd.DataFrame) -> pd.DataFrame:
    """Per arm with trials: how many ran, how many attempts were discarded and run again because
    the machine was shared, how many stayed shared after that, and how many the A/A control and
    the detector's noise pool use."""
    rows = []
    for r in with_trials(samples).itertuples():
        rows.append(
            {
                **{k: getattr(r, k) for k in CONFIG + SERIES},
                "trials": len(r.trials),
                "reruns": int(sum(r.reruns)),
                "still_shared": int(sum(r.shared)),
                "used": len(used_values(r)),
            }
        )
    return pd.DataFrame(rows, columns=TRIAL_COLUMNS)


def aa_splits(values: list[float]):
    """Every split of an arm's rounds into two disjoint halves, each half in time order; a split
    and its mirror image are the same comparison, so the first round always goes left."""
    n = len(values)
    k = n // 2
    for rest in combinations(range(1, n), k - 1):
        left = [0, *rest]
        right = [i for i in range(n) if i not in left][:k]
        yield [values[i] for i in left], [values[i] for i in right]


def aa_control(samples: pd.DataFrame) -> pd.DataFrame:
    """The A/A control: the comparison method applied to two halves of one arm's rounds, which
    ran the same configuration. Every winner it calls is a false one; the method promises 5%.

    The halves pair by position, so unlike a real comparison's rounds a pair did not share the
    machine's state: drift between rounds lands in the spread and widens the interval, if anything.
    The splits of one arm overlap, so they are not independent draws of the rate.
    """
    rows = []
    for r in with_trials(samples).itertuples():
        values = used_values(r)
        if len(values) < AA_MIN_ROUNDS:
            continue
        splits = winners = 0
        widths = []
        for left, right in aa_splits(values):
            result = paired_ratio_interval(left, right)
            splits += 1
            winners += bool(result.low > 1 or result.high < 1)
            widths.append(result.high / result.low)
        rows.append(
            {
                **{k: getattr(r, k) for k in CONFIG + SERIES},
                "rounds": len(values),
                "splits": splits,
                "false_winners": winners,
                "median_interval_width": float(np.median(widths)) - 1.0,
            }
        )
    columns = [*CONFIG, *SERIES, "rounds", "splits", "false_winners", "median_interval_width"]
    return pd.DataFrame(rows, columns=columns)


def aa_rate(aa: pd.DataFrame) -> float:
    return float(aa.false_winners.sum() / aa.splits.sum()) if not aa.empty else float("nan")


def distinct(matrix: pd.DataFrame) -> pd.DataFrame:
    """The matrix without repeats: "best" and "defaults" are one comparison where each framework
    ran one variant."""
    keys = [*CONFIG, "jax_variant", "torch_variant"]
    return matrix.sort_values("comparison", ascending=False).drop_duplicates(keys)


def stability_table(matrix: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Each comparison of two runs side by side: ratios, winners, the change of the ratio, and
    whether the two runs contradict each other (a win for one side in one run, for the other in
    the other; a win against a tie is not a contradiction)."""
    columns = [*CONFIG, "comparison", "jax_variant", "torch_variant"]
    keep = [*columns, "ratio", "ci_low", "ci_high", "winner"]
    if matrix.empty or baseline.empty:
        return pd.DataFrame(columns=[*keep, "ratio_baseline", "winner_baseline", "change"])
    both = distinct(matrix)[keep].merge(
        distinct(baseline)[[*columns, "ratio", "winner"]],
        on=columns,
        suffixes=("", "_baseline"),
    )
    both["change"] = both.ratio / both.ratio_baseline - 1.0
    both["contradicts"] = [
        {a, b} == {"jax", "torch"} for a, b in zip(both.winner, both.winner_baseline, strict=True)
    ]
    both["within_10pct"] = both.change.abs() <= STABLE_CHANGE
    return both.sort_values(columns, ignore_index=True)


def stability_summary(stability: pd.DataFrame) -> dict:
    """The figures issue 13 states its stability goal in."""
    n = len(stability)
    tau, p_value = (float("nan"), float("nan"))
    if n >= 3:
        result = scipy_stats.kendalltau(stability.ratio, stability.ratio_baseline)
        tau, p_value = float(result.statistic), float(result.pvalue)
    return {
        "comparisons": n,
        "contradictions": int(stability.contradicts.sum()) if n else 0,
        "within_10pct": int(stability.within_10pct.sum()) if n else 0,
        "max_change": float(stability.change.abs().max()) if n else float("nan"),
        "kendall_tau": tau,
        "kendall_p": p_value,
        "stable": bool(
            n
            and not stability.contradicts.any()
            and stability.within_10pct.all()
            and (n < 3 or tau >= STABLE_TAU)
        ),
    }


def noise_pool(samples: pd.DataFrame, min_trials: int = POINT_TRIALS) -> np.ndarray:
    """This run's between-trial noise: each arm's used trial values over the arm's median, pooled
    over the arms with at least ``min_trials`` of them."""
    parts = []
    for r in with_trials(samples).itertuples():
        values = np.asarray(used_values(r), dtype=float)
        if values.size >= min_trials:
            parts.append(values / np.median(values))
    return np.concatenate(parts) if parts else np.array([])


def regression_scores(pool: np.ndarray) -> tuple[pd.DataFrame, int | None]:
    """The detector and its two baselines scored on 10-run histories whose points are medians of
    ``POINT_TRIALS`` trials drawn from ``pool`` (``regressions.evaluate``); where the detector
    misses a goal at that count, the scores at larger counts until one meets them all, and that
    count (None: none of ``TRIAL_CANDIDATES`` did)."""
    scores = regressions.evaluate(pool, trials=POINT_TRIALS, series=EVAL_SERIES, seed=EVAL_SEED)
    if regressions.meets_goals(scores):
        return scores, POINT_TRIALS
    needed, tried = regressions.trials_needed(
        pool,
        [t for t in TRIAL_CANDIDATES if t > POINT_TRIALS],
        series=EVAL_SERIES,
        seed=EVAL_SEED,
    )
    return pd.concat([scores, tried], ignore_index=True), needed


def _finite(row: dict) -> dict:
    # a record's extra is JSON, which has no NaN
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in row.items()}


def add_records(
    rec,
    aa: pd.DataFrame,
    stability: dict,
    baseline_run_id: str,
    scores: pd.DataFrame,
    needed: int | None,
) -> None:
    """The trust figures as records (family ``analysis``), so that the index, the README and the
    next run's history can cite them: the A/A false-winner rate, the stability figures against
    the baseline run, and the regression detector's recall at 10% and false alerts per 100."""
    if not aa.empty:
        rec.add(
            "aa_false_winner_rate",
            aa_rate(aa),
            "ratio",
            n=int(aa.splits.sum()),
            extra={"arms": len(aa), "false_winners": int(aa.false_winners.sum())},
        )
    if stability["comparisons"]:
        extra = _finite({"baseline_run_id": baseline_run_id, **stability})
        rec.add("stability_kendall_tau", stability["kendall_tau"], "ratio", extra=extra)
        rec.add(
            "stability_max_ratio_change",
            stability["max_change"],
            "ratio",
            n=stability["comparisons"],
            extra=extra,
        )
    if scores.empty:
        return
    row = scores[(scores.method == "changepoint") & (scores.trials == POINT_TRIALS)].iloc[0]
    extra = {
        "trials_per_point": POINT_TRIALS,
        "series_per_size": EVAL_SERIES,
        "seed": EVAL_SEED,
        "trials_needed_for_goals": needed,
        "scores": [_finite(r) for r in scores.to_dict(orient="records")],
    }
    rec.add("regression_recall_10pct", float(row["recall_0.1"]), "ratio", extra=extra)
    rec.add("regression_false_alerts_per_100", float(row.false_per_100), "count", extra=extra)


def arm_spread(meas: pd.DataFrame, cells: pd.DataFrame, arm: str) -> pd.DataFrame:
    """An A/A experiment's spread: two arms of one campaign run that differ only in the cell
    parameter ``arm`` (e.g. the seed), compared round by round with the report's method.

    One row per configuration (``CONFIG``): the rounds both arms have, the standard deviation of
    the per-round log ratio (the noise a paired comparison sees), the paired ratio and its 95%
    interval, whether that interval wrongly calls a winner, and each arm's coefficient of
    variation over rounds (the noise an unpaired comparison would see).
    """
    columns = [*CONFIG, "rounds", "log_ratio_sd", "ratio", "ci_low", "ci_high"]
    columns += ["false_winner", "arm_cv"]
    thr = meas[(meas.metric == "throughput_img_s") & (meas.status == "ok") & meas.value.notna()]
    if thr.empty:
        return pd.DataFrame(columns=columns)
    params = cells.set_index(["notebook", "cell", "trial"]).parameters
    keys = zip(thr.notebook, thr.cell, thr.trial, strict=True)
    thr = thr.assign(arm=[params.get(k, {}).get(arm) for k in keys])
    rows = []
    for key, group in thr.groupby(CONFIG, sort=True):
        wide = group.pivot_table(index="trial", columns="arm", values="value").dropna()
        if wide.shape[1] != 2 or len(wide) < 2:
            continue
        a, b = (wide[c].to_numpy() for c in sorted(wide.columns))
        result = paired_ratio_interval(a, b)
        cv = [float(np.std(x, ddof=1) / np.mean(x)) for x in (a, b)]
        rows.append(
            {
                **dict(zip(CONFIG, key, strict=True)),
                "rounds": result.rounds,
                "log_ratio_sd": float(np.std(np.log(b / a), ddof=1)),
                "ratio": result.ratio,
                "ci_low": result.low,
                "ci_high": result.high,
                "false_winner": bool(result.low > 1 or result.high < 1),
                "arm_cv": float(np.mean(cv)),
            }
        )
    return pd.DataFrame(rows, columns=columns)
