"""The baselines every prediction score stands beside: what a user gets without the predictor.

A score means something only against what it replaces. Each of the predictor's figures is
paired with the same figure of a rule that needs no model, computed on the same rows, from the
same training rows (the hold-out's fold, or the models other than the one a query is about):

- **latency**: a row's seconds per call from the training row of its setting whose FLOPs per call
  are nearest (on the log scale), scaled by the FLOPs ratio (``flops_scaled``). Its setting is
  the framework, mode, precision, CPU and threads; where the fold holds no row of it, the same
  framework, mode and precision on any CPU; where none of those either, any row.
- **winner**: always the framework that won most of the training rows' decided JAX-vs-PyTorch
  pairs (``majority_winner``), scored on the same decided pairs as the predictor.
- **regret**: a recommendation by that same constant rule (``rule_ranking``): the configuration
  of the framework that won most often, at its default mode, in fp32, with the most threads,
  and the largest batch a query leaves open. It never knows a latency, so under a cap it picks
  as it would without one.

A goal is met only where the predictor meets it and beats its baseline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench import vocab
from fwbench.families.prediction import dataset, frozen_score, predictor

# how a baseline's scores read in records and reports
NAME = vocab.PREDICTION_BASELINE
# the settings a latency baseline looks for its nearest model in, most specific first
SETTING_LEVELS = (
    ("framework", "mode", "precision", "device_name", "threads"),
    ("framework", "mode", "precision"),
    (),
)


def flops_scaled(train: pd.DataFrame, test: pd.DataFrame) -> pd.Series:
    """Each ``test`` row's seconds per call from the ``train`` row of its setting (the first of
    ``SETTING_LEVELS`` that ``train`` holds) with the nearest FLOPs per call, times the ratio of
    the two rows' FLOPs (``total_flops``: one call, the whole batch)."""
    out = pd.Series(np.nan, index=test.index, dtype=float)
    if train.empty:
        return out
    log_flops = np.log(train.total_flops.clip(lower=1.0).to_numpy(dtype=float))
    seconds = train.seconds.to_numpy(dtype=float)
    flops = train.total_flops.to_numpy(dtype=float)
    for index, row in test.iterrows():
        for keys in SETTING_LEVELS:
            mask = np.ones(len(train), dtype=bool)
            for key in keys:
                mask &= (train[key] == row[key]).to_numpy()
            if mask.any():
                break
        distance = np.where(mask, np.abs(log_flops - np.log(max(row.total_flops, 1.0))), np.inf)
        nearest = int(np.argmin(distance))
        out[index] = seconds[nearest] * row.total_flops / flops[nearest]
    return out


def majority_winner(train: pd.DataFrame) -> str | None:
    """The framework that won most of ``train``'s decided JAX-vs-PyTorch pairs (``torch`` on a
    tie, the framework more users start from); None where no pair is decided."""
    if "trial_img_s" not in train:
        return None  # a training table saved without its trials decides no pair
    pairs = dataset.winner_pairs(train)
    decided = pairs[pairs.decided] if len(pairs) else pairs
    if decided.empty:
        return None
    jax_wins = int((decided.measured_ratio < 1).sum())
    return "jax" if jax_wins > len(decided) - jax_wins else "torch"


def constant_seconds(rows: pd.DataFrame, winner: str | None) -> pd.Series:
    """Seconds that say only "``winner`` is faster" (1 for its rows, 2 for the other's; NaN
    where there is no winner), for ``predictor.winner_score`` to score the constant rule."""
    if winner is None:
        return pd.Series(np.nan, index=rows.index, dtype=float)
    return pd.Series(np.where(rows.framework == winner, 1.0, 2.0), index=rows.index)


def add_to_holdout(held: pd.DataFrame, frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    """``held`` (``predictor.evaluate``'s rows of hold-out ``kind`` on ``frame``) with each
    row's latency baseline (``baseline``) and its fold's constant winner (``constant_winner``),
    from the same folds' training rows."""
    baseline = pd.Series(np.nan, index=held.index, dtype=float)
    winner = pd.Series(None, index=held.index, dtype=object)
    for name, train, test in predictor.holdout_splits(frame, kind):
        rows = held.index[held.fold == name]
        found = flops_scaled(frame.loc[train], frame.loc[test])
        baseline[rows] = found.reindex(rows).to_numpy()
        winner[rows] = majority_winner(frame.loc[train])
    return held.assign(baseline=baseline, constant_winner=winner)


def holdout_scores(held: pd.DataFrame) -> dict:
    """The baselines' scores on a hold-out (``add_to_holdout``'s rows): the latency baseline's
    errors, and the constant winner's rate over the same decided pairs the predictor is judged
    on (``predictor.winner_score``)."""
    done = held[held.baseline.notna()]
    found = predictor.errors(done.seconds, done.baseline) if len(done) else {"n": 0}
    constant = pd.concat(
        [
            constant_seconds(rows, rows.constant_winner.iloc[0])
            for _fold, rows in held.groupby("fold", sort=False)
        ]
    ) if len(held) else pd.Series(dtype=float)  # fmt: skip
    judged = held.assign(predicted=constant.reindex(held.index))
    judged = judged[judged.predicted.notna()]
    if judged.empty:  # no fold had a decided pair to learn a winner from
        found.update(correct_winner_rate=float("nan"), decided_pairs=0, unjudged_pairs=0)
    else:
        found.update(predictor.winner_score(judged))
    return found


def rule_ranking(candidates: pd.DataFrame, winner: str | None) -> pd.DataFrame:
    """The constant rule's "predictions" for a query's ``candidates`` (measured rows of one
    model), as ``recommend.choice`` reads them: a throughput that ranks the winner's framework
    first, then its default mode, fp32, more threads and a larger batch; a latency of zero, so
    no cap ever rules a candidate out (the rule knows none)."""
    default = candidates.framework.map(vocab.DEFAULT_MODE)
    keys = [
        (candidates.framework == winner).astype(int),
        (candidates["mode"] == default).astype(int),
        (candidates.precision == "fp32").astype(int),
        candidates.threads.rank(method="dense"),
        candidates.batch_size.rank(method="dense"),
    ]
    score = sum(k.to_numpy(dtype=float) * 1000.0 ** (len(keys) - i) for i, k in enumerate(keys))
    return pd.DataFrame({"throughput_img_s": score, "latency_p95_ms": 0.0}, index=candidates.index)


def test_scores(scored: pd.DataFrame, measured: pd.DataFrame, table: pd.DataFrame) -> dict:
    """The baselines on the frozen test's scored rows (``scored``: the score file's rows), each
    against the set's measurements (``measured``: its run's ``dataset.measured`` rows) from the
    training table ``table``, which holds none of the set's models: the latency baseline's errors
    (the set's FLOPs counted as the predictor's features are) and the constant winner's rate
    over the decided pairs, the pairs the predictor's test score was judged on. The predictor's
    own figures are its single scoring's; these are computed beside them, never instead."""
    on = [*frozen_score.KEYS, "device_name"]
    rows = scored[on].merge(measured[[*on, "seconds", "trial_img_s"]], on=on, how="inner")
    if rows.empty:
        return {"n": 0, "correct_winner_pct": float("nan"), "decided_pairs": 0}
    flops = dataset.feature_rows(rows)[["model", "batch_size", "image_size", "total_flops"]]
    rows = rows.merge(flops, on=["model", "batch_size", "image_size"], how="left")
    found = predictor.errors(rows.seconds, flops_scaled(table, rows))
    constant = constant_seconds(rows, majority_winner(table))
    pairs = frozen_score.scored_pairs(rows.assign(predicted_s=constant))
    decided = pairs[pairs.decided] if len(pairs) else pairs
    found["decided_pairs"] = int(len(decided))
    found["correct_winner_pct"] = (
        float(decided.correct.mean() * 100) if len(decided) else float("nan")
    )
    return found
