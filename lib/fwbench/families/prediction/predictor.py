"""Predict a configuration's time per call from its features: the fitted cost model (``costs``)
corrected in log space by a learned model, with intervals from grouped conformal residuals, and
the grouped hold-outs that score it on what no fit has seen.

What the sum misses (small batches, threads, precision, the size of the whole network) may be
learned as log(measured / cost) by gradient boosting. Whether it is, and from what, is chosen per
setting by cross-validation grouped by lineage (``CORRECTIONS``): no correction, one that reads
the setting and the model's size, or one that also reads its op mix (each category's share of
its roofline time). Trees cannot extrapolate, and given a model's shape they may learn each
lineage's residual by heart, which is worth nothing on a lineage they have not seen (on one
committed sweep a correction over the FLOP mix predicted held-out families worse than the sum
alone); folds that hold whole lineages out ask the question a new model asks, so a correction is
kept only where it lowers their error.

Intervals are split-conformal on that log ratio, from the same folds: every residual comes from
fits that never saw its model's lineage, so the interval holds for an architecture nobody ran,
which is what ``fwbench predict`` is asked about; folds by model would leave its siblings in
and shrink it (they held 71% on the lineage hold-out against 90% nominal). A setting with
``MIN_SETTING_RESIDUALS`` residuals gets its own width: JAX misses wider than PyTorch eager.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fwbench.families.prediction import costs, dataset
from fwbench.models.lineage import lineage
from fwbench.vocab import OP_CATEGORIES

_HOLDOUTS = ("lineage", "batch", "threads", "cpu")
_BATCH_FIT_MAX = 16  # the batch hold-out fits on batch <= 16 and predicts larger batches
COVERAGE = 0.9
# "size" reads the setting and the model's size. The image's side is a size too: at 32 px a
# network is a few small kernels per op and its time is launches, at 224 px it is arithmetic, and
# nothing else here tells the two regimes apart (a ResNet at 32 px has the FLOPs of a MobileNet at
# 224 px). "mix" reads those and each op category's share of the model's roofline time
CORRECTIONS = ("none", "size", "mix")
SIZE_COLUMNS = [
    "log_batch",
    "threads",
    "log_peak",
    "log_bandwidth",
    "bf16",
    *costs.SETTINGS,
    "log_flops",
    "log_params",
    "log_image_size",
]
MIX_COLUMNS = [f"mix:{c}" for c in OP_CATEGORIES]
MIN_SETTING_RESIDUALS = 20


def design_matrix(frame: pd.DataFrame, correction: str = "size") -> pd.DataFrame:
    """A correction's inputs: sizes in logs and the setting (``SIZE_COLUMNS``), and for ``mix``
    each category's share of the roofline time (``MIX_COLUMNS``)."""
    out = pd.DataFrame(index=frame.index)
    out["log_batch"] = np.log(frame.batch_size)
    out["threads"] = frame.threads.astype(float)
    out["log_peak"] = np.log(frame.peak_tflops)
    out["log_bandwidth"] = np.log(frame.bandwidth_gbs)
    out["bf16"] = (frame.precision == "bf16").astype(float)
    setting = costs.setting_of(frame)
    for name in costs.SETTINGS:
        out[name] = (setting == name).astype(float)
    out["log_flops"] = np.log(frame.total_flops.clip(lower=1.0))
    out["log_params"] = np.log(frame.param_bytes.clip(lower=1.0))
    out["log_image_size"] = np.log(frame.image_size.astype(float))
    if correction != "mix":
        return out[SIZE_COLUMNS]
    roof = costs.category_roofline_s(frame)
    shares = roof.div(roof.sum(axis=1).where(lambda t: t > 0, 1.0), axis=0)
    for category in OP_CATEGORIES:
        out[f"mix:{category}"] = shares[category]
    return out[SIZE_COLUMNS + MIX_COLUMNS]


@dataclass
class _Predictor:
    """Fitted costs (per setting, and over all rows for a setting too thin to fit alone), the
    fitted corrections (``CORRECTIONS`` but none), which one each setting uses (``default`` for a
    setting the fit never saw) and the conformal half-widths (in log space): per setting, and
    ``half_width`` over every setting."""

    costs: dict[str, np.ndarray]
    pooled: np.ndarray
    regressors: dict[str, object]
    half_width: float = np.inf
    choice: dict[str, str] = field(default_factory=dict)
    default: str = "size"
    half_widths: dict[str, float] = field(default_factory=dict)

    def cost_seconds(self, frame: pd.DataFrame) -> pd.Series:
        """The fitted cost model's seconds per call, before the correction."""
        return costs.cost_seconds(self.costs, self.pooled, frame)

    def correction(self, frame: pd.DataFrame, name: str) -> np.ndarray:
        """The log correction ``name`` (one of ``CORRECTIONS``) makes to each row's cost."""
        if name == "none":
            return np.zeros(len(frame))
        with one_thread():
            return self.regressors[name].predict(design_matrix(frame, name))

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Seconds per call with a ``COVERAGE`` interval, for rows with the feature columns."""
        setting = costs.setting_of(frame).to_numpy()
        chosen = np.array([self.choice.get(s, self.default) for s in setting])
        log_fix = np.zeros(len(frame))
        for name in set(chosen):
            log_fix[chosen == name] = self.correction(frame[chosen == name], name)
        seconds = self.cost_seconds(frame) * np.exp(log_fix)
        half = np.array([self.half_widths.get(s, self.half_width) for s in setting])
        return pd.DataFrame(
            {"seconds": seconds, "low": seconds * np.exp(-half), "high": seconds * np.exp(half)},
            index=frame.index,
        )


def one_thread():
    """A context in which the correction's trees run on one OpenMP thread. On a few hundred rows
    threads buy nothing (a fit on a committed prediction run's table took 1.8 s on one thread, 2.7 s on
    two cores), and their threads spin at barriers: beside one other busy process a hold-out took
    1305 s where it took 53 s alone."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="openmp")


def regressor(seed: int):
    from sklearn.ensemble import HistGradientBoostingRegressor

    # small trees and strong shrinkage: a sweep holds a few hundred configurations
    return HistGradientBoostingRegressor(
        max_iter=300, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=5, random_state=seed
    )


def _fit_once(frame: pd.DataFrame, seed: int) -> _Predictor:
    """The costs and every correction of ``CORRECTIONS`` fitted on ``frame``."""
    weights, pooled = costs.fit_costs(frame)
    partial = _Predictor(weights, pooled, {})
    target = np.log(frame.seconds / partial.cost_seconds(frame))
    for name in CORRECTIONS:
        if name != "none":
            with one_thread():
                model = regressor(seed).fit(design_matrix(frame, name), target)
            partial.regressors[name] = model
    return partial


def conformal_quantile(spread: np.ndarray) -> float:
    """The finite-sample conformal quantile of absolute residuals: ceil((n + 1) q) / n."""
    if not len(spread):
        return np.inf
    level = min(1.0, np.ceil((len(spread) + 1) * COVERAGE) / len(spread))
    return float(np.quantile(spread, level))


def best_correction(misses: pd.DataFrame) -> str:
    """The correction (a column of ``misses``, in ``CORRECTIONS`` order) with the lowest mean
    absolute log residual; a later one must lower it to be kept."""
    best, best_error = CORRECTIONS[0], np.inf
    for name in CORRECTIONS:
        error = float(misses[name].mean())
        if error < best_error - 1e-9:
            best, best_error = name, error
    return best


def lineage_folds(frame: pd.DataFrame, folds: int):
    """(train, test) positions of up to ``folds`` folds of ``frame``'s rows, each holding whole
    lineages out; none where the rows span one lineage."""
    from sklearn.model_selection import GroupKFold

    groups = frame.model.map(lineage).to_numpy()
    if len(set(groups)) < 2:
        return
    yield from GroupKFold(n_splits=min(folds, len(set(groups)))).split(frame, groups=groups)


def fit(frame: pd.DataFrame, *, seed: int = 0, folds: int = 5) -> _Predictor:
    """Fit on measured rows (``seconds`` per call plus the feature columns).

    Cross-validation grouped by lineage (each residual from a fit, costs and corrections, that
    never saw its model's lineage) picks each setting's correction (``best_correction``) and
    gives the ``COVERAGE`` quantile of its absolute log residuals as the interval's half-width."""
    misses = pd.DataFrame(np.nan, index=np.arange(len(frame)), columns=list(CORRECTIONS))
    for train, test in lineage_folds(frame, folds):
        model = _fit_once(frame.iloc[train], seed)
        held = frame.iloc[test]
        cost = model.cost_seconds(held).to_numpy()
        for name in CORRECTIONS:
            predicted = cost * np.exp(model.correction(held, name))
            misses.loc[test, name] = np.abs(np.log(held.seconds.to_numpy() / predicted))
    fitted = _fit_once(frame, seed)
    setting = costs.setting_of(frame).to_numpy()
    scored = misses.dropna()
    if scored.empty:
        return fitted
    fitted.default = best_correction(scored)
    chosen = pd.Series(scored[fitted.default].to_numpy(), index=scored.index)
    for name in sorted(set(setting)):
        rows = scored[setting[scored.index] == name]
        if len(rows):
            fitted.choice[name] = best_correction(rows)
            chosen[rows.index] = rows[fitted.choice[name]]
            if len(rows) >= MIN_SETTING_RESIDUALS:
                fitted.half_widths[name] = conformal_quantile(rows[fitted.choice[name]].to_numpy())
    fitted.half_width = conformal_quantile(chosen.to_numpy())
    return fitted


def holdout_splits(frame: pd.DataFrame, kind: str):
    """(name, train index, test index) for each fold of one grouped hold-out:
    ``lineage`` leaves one lineage (``models.lineage``: ResNets with ResNeXts) out, ``batch`` fits batch <= 16 and tests larger,
    ``threads`` leaves one thread count out, ``cpu`` leaves one CPU (device_name) out.
    A hold-out the data cannot make (one thread count, one CPU) yields nothing."""
    if kind == "lineage":
        lineages = frame.model.map(lineage)
        for held_out in sorted(lineages.unique()):
            yield held_out, frame.index[lineages != held_out], frame.index[lineages == held_out]
    elif kind == "batch":
        small = frame.batch_size <= _BATCH_FIT_MAX
        if small.any() and (~small).any():
            yield f"batch > {_BATCH_FIT_MAX}", frame.index[small], frame.index[~small]
    elif kind in ("threads", "cpu"):
        column = "threads" if kind == "threads" else "device_name"
        values = sorted(frame[column].unique())
        if len(values) >= 2:
            for value in values:
                mask = frame[column] == value
                yield f"{column} {value}", frame.index[~mask], frame.index[mask]
    else:
        raise ValueError(f"unknown hold-out {kind!r}; choose from {', '.join(_HOLDOUTS)}")


def abs_error_pct(measured: pd.Series, predicted: pd.Series) -> pd.Series:
    """Each prediction's absolute error, in percent of the measurement."""
    return (predicted / measured - 1.0).abs() * 100


def errors(measured: pd.Series, predicted: pd.Series) -> dict:
    """MAPE, the median error, the shares within 10%, 15% and 20%, and the worst error, all in
    percent: the mean is carried by a few misses, the median and the shares say what is typical."""
    error = abs_error_pct(measured, predicted)
    return {
        "mape_pct": float(error.mean()),
        "median_pct": float(error.median()),
        "within_10pct": float((error <= 10).mean() * 100),
        "within_15pct": float((error <= 15).mean() * 100),
        "within_20pct": float((error <= 20).mean() * 100),
        "worst_pct": float(error.max()),
        "n": int(len(error)),
    }


def error_table(held: pd.DataFrame) -> pd.DataFrame:
    """MAPE and rows of scored hold-outs (``holdout``, ``seconds``, ``predicted`` and the
    configuration's columns) by hold-out, setting and image size: where a hold-out's misses
    gather, which its overall MAPE hides. Where ``held`` has the cost model's own seconds
    (``cost``, from :func:`evaluate`), ``cost_mape_pct`` is its MAPE before the correction: which
    of the two parts a miss comes from."""
    keyed = held.assign(setting=costs.setting_of(held))
    columns = ["holdout", "setting", "image_size", "mape_pct", "cost_mape_pct", "rows"]
    rows = []
    for (kind, setting, size), group in keyed.groupby(["holdout", "setting", "image_size"]):
        found = errors(group.seconds, group.predicted)
        cost = errors(group.seconds, group.cost)["mape_pct"] if "cost" in group else np.nan
        rows.append(
            {
                "holdout": kind,
                "setting": setting,
                "image_size": int(size),
                "mape_pct": found["mape_pct"],
                "cost_mape_pct": cost,
                "rows": found["n"],
            }
        )
    return pd.DataFrame(rows, columns=columns)


def worst_group(held: pd.DataFrame) -> dict:
    """Where scored hold-outs (as for :func:`error_table`, with ``fold`` and ``cost``) miss most:
    the fold with the largest MAPE, its setting with the largest MAPE, and that setting's MAPE
    there with and without the correction (``mape_pct``, ``cost_mape_pct``)."""
    keyed = held.assign(
        setting=costs.setting_of(held),
        error=abs_error_pct(held.seconds, held.predicted),
        cost_error=abs_error_pct(held.seconds, held.cost),
    )
    folds = keyed.groupby(["holdout", "fold"]).error.mean()
    kind, fold = folds.idxmax()
    rows = keyed[(keyed.holdout == kind) & (keyed.fold == fold)]
    settings = rows.groupby("setting")[["error", "cost_error"]].mean()
    setting = settings.error.idxmax()
    return {
        "holdout": kind,
        "fold": fold,
        "fold_mape_pct": float(folds.max()),
        "setting": setting,
        "rows": int((rows.setting == setting).sum()),
        "mape_pct": float(settings.loc[setting, "error"]),
        "cost_mape_pct": float(settings.loc[setting, "cost_error"]),
    }


# what every scored hold-out records, each in percent
SCORE_METRICS = (
    "mape_pct",
    "median_pct",
    "within_10pct",
    "within_15pct",
    "within_20pct",
    "worst_pct",
    "interval_coverage_pct",
)


def interval_scores(
    measured: pd.Series, predicted: pd.Series, low: pd.Series, high: pd.Series
) -> dict:
    """``errors`` and how often the interval [``low``, ``high``] held the measurement."""
    found = errors(measured, predicted)
    found["interval_coverage_pct"] = float(((measured >= low) & (measured <= high)).mean() * 100)
    return found


def correct_winner_rate(rows: pd.DataFrame) -> float:
    """Over JAX-vs-PyTorch pairs whose measured gap is decided (``decided`` True), the share where
    the predicted seconds pick the same winner. ``rows``: one per pair, with ``measured_ratio``
    and ``predicted_ratio`` (JAX seconds / PyTorch seconds) and ``decided``."""
    decided = rows[rows.decided]
    if decided.empty:
        return float("nan")
    same = (decided.measured_ratio > 1) == (decided.predicted_ratio > 1)
    return float(same.mean() * 100)


def winner_score(held: pd.DataFrame) -> dict:
    """A hold-out's winner score (``held`` from :func:`evaluate`): the correct-winner rate over
    decided JAX-vs-PyTorch pairs whose fold was fitted on both frameworks' settings
    (``decided_pairs``), and how many decided pairs were left out for a framework their fold never
    trained on (``unjudged_pairs``): those say nothing about how a held-out group transfers."""
    pairs = dataset.winner_pairs(held, held.predicted)
    if pairs.empty:
        return {"correct_winner_rate": float("nan"), "decided_pairs": 0, "unjudged_pairs": 0}
    judged = pairs[pairs.setting_seen]
    decided = int(judged.decided.sum())
    return {
        "correct_winner_rate": correct_winner_rate(judged),
        "decided_pairs": decided,
        "unjudged_pairs": int(pairs.decided.sum()) - decided,
    }


def evaluate(frame: pd.DataFrame, kind: str, *, seed: int = 0) -> pd.DataFrame:
    """Every row of ``frame`` predicted by a fit that held its group out; the hold-out's folds
    concatenated, with ``fold``, ``predicted`` seconds and the interval, and the fitted cost
    model's own seconds before the correction (``cost``). ``setting_seen`` says
    whether the fold's training rows held any row of that row's framework and mode: where they
    did not (JAX measured on one CPU only, that CPU held out), the prediction says nothing about
    how the held-out group transfers."""
    parts = []
    for name, train, test in holdout_splits(frame, kind):
        fitted = fit(frame.loc[train], seed=seed)
        predicted = fitted.predict(frame.loc[test])
        seen = set(costs.setting_of(frame.loc[train]))
        parts.append(
            frame.loc[test].assign(
                fold=name,
                **{"predicted": predicted.seconds, "low": predicted.low, "high": predicted.high},
                cost=fitted.cost_seconds(frame.loc[test]),
                setting_seen=costs.setting_of(frame.loc[test]).isin(seen).to_numpy(),
            )
        )
    if not parts:
        return frame.iloc[:0].assign(fold="", predicted=np.nan, cost=np.nan, setting_seen=False)
    return pd.concat(parts)
