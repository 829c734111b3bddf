"""Predict a configuration's time per call from its features: a fitted cost model corrected in log
space by a learned model, with intervals from grouped conformal residuals, and the grouped
hold-outs that score it on what no fit has seen.

The cost model is a sum, as a kernel-by-kernel predictor sums kernels: each op category's FLOPs
over the measured peak, each category's output bytes and the parameters' bytes over the measured
copy bandwidth, and the op count, every term weighted by a non-negative cost that is fitted (one
set per framework and mode, since their kernels differ) by non-negative least squares on relative
error. A new model is a new mix of the same categories, so the sum carries over to it; a depthwise
convolution costs what depthwise convolutions cost, whichever network it sits in.

What the sum misses (small batches, threads, precision, the size of the whole network) is learned
as log(measured / cost) by gradient boosting over the setting and the model's size only. The
correction sees no feature that names a model's shape (its FLOP mix, its op count): trees cannot
extrapolate, and given those they learn each lineage's residual by heart, which is worth nothing on
a lineage they have not seen (on the committed sweep a correction over the FLOP mix predicted
held-out model families worse than the sum alone).

Intervals are split-conformal on that log ratio: the residuals come from fits that did not see the
residual's model (grouped cross-validation), so the interval holds for a model nobody ran, which
is what ``fwbench predict`` is asked about; random splits would leak the model and shrink it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fwbench.families.prediction import dataset
from fwbench.models.lineage import lineage
from fwbench.vocab import OP_CATEGORIES

# launch cost of one eager op on a CPU, before anything is learned: a few microseconds
OP_OVERHEAD_S = 5e-6
HOLDOUTS = ("lineage", "batch", "threads", "cpu")
BATCH_FIT_MAX = 16  # the batch hold-out fits on batch <= 16 and predicts larger batches
COVERAGE = 0.9
# jax torchax: PyTorch's own graph on JAX's compiler, for the models without a Flax twin
SETTINGS = ("torch eager", "torch compile", "jax jit", "jax torchax")
# a setting's rows fit costs of their own, shrunk toward the pooled costs scaled per term group
# (TERM_GROUPS), by a weight that leave-one-lineage-out cross-validation on its rows picks from
# SHRINK_GRID; the correction's setting columns carry what is left of its difference. Free, a
# setting fitted on few architectures lets categories that move together trade costs (JAX's rows
# without its ResNets, from MobileNets, EfficientNets and ViTs, put the depthwise convolutions'
# time on the dense convolution FLOPs, priced at 15.7 times the peak against PyTorch's 1.3, and
# held-out JAX ResNets came out 6 to 13 times too slow); scaled alone, it cannot say that one
# category costs it more than the pooled rows (JAX's depthwise convolutions). The cross-validation
# asks the question the lineage hold-out asks, on the rows the fit has, and picks between the two
TERM_GROUPS = ("flops", "bytes", "ops")
# leaving one lineage out must leave three to fit on: on folds of two the cross-validation judges
# free costs by fits that cannot be trusted, and picked them (JAX without its ResNets in one
# committed prediction run's table: weight 0 from its EfficientNets, MobileNets and ViTs, and the
# held-out JAX ResNets came out 5 times too slow, where the scaled costs missed them by 105%). A
# setting of two or three lineages scales the pooled costs, one of one lineage uses them as they are
MIN_SHRINK_LINEAGES = 4
MIN_SCALE_LINEAGES = 2
# tried from the most shrunk down, and a weight is kept only where it lowers the cross-validated
# error: inf is the scaled costs, 0 a free fit. A weight s costs a fit s * x**2 per row for moving
# one term so that the mean row's time moves by a fraction x, as much as every row missing by
# sqrt(s) * x
SHRINK_GRID = (np.inf, 10.0, 1.0, 0.1, 0.01, 0.0)
# a setting learns its own cost for a term only where one of its rows spends this share of its
# time on the term at the ceiling; elsewhere the term keeps the cost fitted on all rows
MIN_TERM_SHARE = 0.02
# what the correction may read: the setting and the model's size, nothing of its shape. The
# image's side is a size too: at 32 px a network is a few small kernels per op and its time is
# launches, at 224 px it is arithmetic, and nothing else here tells the two regimes apart (a
# ResNet at 32 px has the FLOPs of a MobileNet at 224 px)
CORRECTION_COLUMNS = [
    "log_batch",
    "threads",
    "log_peak",
    "log_bandwidth",
    "bf16",
    *SETTINGS,
    "log_flops",
    "log_params",
    "log_image_size",
]


def setting_of(frame: pd.DataFrame) -> pd.Series:
    return frame["framework"] + " " + frame["mode"]


def roofline_seconds(frame: pd.DataFrame) -> pd.Series:
    """The unfitted roofline of one call: max(FLOPs / peak, bytes / bandwidth) + ops x launch
    cost; the yardstick the fitted costs are scored against."""
    compute = frame.total_flops / (frame.peak_tflops * 1e12)
    memory = frame.total_bytes / (frame.bandwidth_gbs * 1e9)
    return np.maximum(compute, memory) + frame.op_count * OP_OVERHEAD_S


def cost_terms(frame: pd.DataFrame) -> pd.DataFrame:
    """The cost model's terms, each in seconds at the hardware's ceilings (the op count in
    microseconds): FLOPs and output bytes per category, parameter bytes, ops."""
    # the features are built in fp32; the dataset's element sizes scale them to the precision
    scale = frame.precision.map(dataset.ELEMENT_BYTES).fillna(4) / 4
    bandwidth = frame.bandwidth_gbs * 1e9
    out = pd.DataFrame(index=frame.index)
    for category in OP_CATEGORIES:
        flops = frame.get(f"flops:{category}", pd.Series(0.0, index=frame.index))
        written = frame.get(f"bytes:{category}", pd.Series(0.0, index=frame.index))
        out[f"flops:{category}"] = flops.fillna(0.0) / (frame.peak_tflops * 1e12)
        out[f"bytes:{category}"] = written.fillna(0.0) * scale / bandwidth
    out["params"] = frame.param_bytes * scale / bandwidth
    out["ops"] = frame.op_count * 1e-6
    return out


def _relative_nnls(shares: np.ndarray, prior: np.ndarray | None, shrink: float = 0.0) -> np.ndarray:
    """Non-negative weights ``w`` minimising ``|shares @ w - 1|``, where ``shares`` holds each
    row's columns as fractions of its measured time (so the error is relative). Given a
    ``prior``, a column no row spends ``MIN_TERM_SHARE`` of its time on keeps its prior weight:
    the rows cannot tell it, and a free fit may price it at anything; and a ``shrink`` above zero
    pulls the other columns toward the prior (``SHRINK_GRID`` says by how much; inf keeps it)."""
    from scipy.optimize import nnls

    weights = np.zeros(shares.shape[1])
    target = np.ones(len(shares))
    free = np.ones(shares.shape[1], bool)
    if prior is not None:
        if np.isinf(shrink):
            return prior.copy()
        free = shares.max(axis=0) >= MIN_TERM_SHARE
        weights[~free] = prior[~free]
        target = target - shares[:, ~free] @ prior[~free]
    if not free.any():  # scipy's nnls crashes the process on a matrix without columns
        return weights
    matrix = shares[:, free]
    if prior is not None and shrink > 0:
        # a penalty row per column, in the mean row's share of its time, so that the weight
        # means the same for a term of microseconds and one of seconds
        typical = matrix.mean(axis=0)
        root = np.sqrt(shrink * len(shares))
        matrix = np.vstack([matrix, root * np.diag(typical)])
        target = np.concatenate([target, root * typical * prior[free]])
    weights[free], _ = nnls(matrix, target)
    return weights


def _fit_costs(
    frame: pd.DataFrame, prior: np.ndarray | None = None, shrink: float = 0.0
) -> np.ndarray:
    """Non-negative costs minimising the relative error of the sum over ``frame``'s rows. Given
    a ``prior`` (the pooled costs, scaled for the setting), a term that no row of ``frame``
    spends ``MIN_TERM_SHARE`` of its time on, at the ceiling, keeps its prior cost (JAX's CNN
    rows, free, priced a linear layer's output bytes 24,599 times the bandwidth, and held-out
    ViTs came out 300 times too slow), and the others are pulled toward it by ``shrink``."""
    _, _, shares = _term_shares(frame)
    return _relative_nnls(shares, prior, shrink)


def term_group(name: str) -> str:
    """The group (``TERM_GROUPS``) a cost term belongs to; parameter bytes are bytes."""
    if name == "ops":
        return "ops"
    return "flops" if name.startswith("flops:") else "bytes"


def _scale_shares(shares: np.ndarray, groups: np.ndarray, pooled: np.ndarray) -> np.ndarray:
    """The pooled costs with each term group scaled by one non-negative factor, fitted to
    ``shares`` (terms over measured time) by least squares on relative error; a group no row
    spends ``MIN_TERM_SHARE`` of its time on, at the pooled costs, keeps a factor of one."""
    grouped = np.stack([shares[:, groups == g] @ pooled[groups == g] for g in TERM_GROUPS], axis=1)
    factors = _relative_nnls(grouped, np.ones(len(TERM_GROUPS)))
    return pooled * factors[[TERM_GROUPS.index(g) for g in groups]]


def _term_shares(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``frame``'s cost terms in seconds, each term's group (``term_group``), and the terms as
    fractions of each row's measured time."""
    terms = cost_terms(frame)
    groups = np.array([term_group(name) for name in terms.columns])
    values = terms.to_numpy()
    return values, groups, values * (1.0 / frame.seconds.to_numpy())[:, None]


def _fit_scales(frame: pd.DataFrame, pooled: np.ndarray) -> np.ndarray:
    """``_scale_shares`` on ``frame``'s rows."""
    _, groups, shares = _term_shares(frame)
    return _scale_shares(shares, groups, pooled)


def _fit_shrunk(frame: pd.DataFrame, pooled: np.ndarray) -> tuple[np.ndarray, float]:
    """A setting's own costs shrunk toward its scaled pooled costs, and the shrink weight: the
    one of ``SHRINK_GRID`` whose fits, each on all but one of the rows' lineages, predict
    the lineage left out best (mean absolute log error of the cost sum, over its rows). The
    scaled prior of each fold is fitted on that fold's rows alone."""
    values, groups, shares = _term_shares(frame)
    seconds = frame.seconds.to_numpy()
    floor = frame.op_count.to_numpy() * OP_OVERHEAD_S
    lineages = frame.model.map(lineage).to_numpy()
    folds = []
    for held_out in np.unique(lineages):
        held = lineages == held_out
        prior = _scale_shares(shares[~held], groups, pooled)
        folds.append((held, prior))
    best, best_error = np.inf, np.inf
    for shrink in SHRINK_GRID:
        misses = []
        for held, prior in folds:
            weights = _relative_nnls(shares[~held], prior, shrink)
            predicted = np.maximum(values[held] @ weights, floor[held])
            misses.append(np.abs(np.log(predicted / seconds[held])))
        error = float(np.mean(np.concatenate(misses)))
        # a weaker shrink must earn its place: ties keep the stronger
        if error < best_error - 1e-9:
            best, best_error = shrink, error
    prior = _scale_shares(shares, groups, pooled)
    return _relative_nnls(shares, prior, best), best


def design_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """The correction's inputs (``CORRECTION_COLUMNS``): sizes in logs and the setting."""
    out = pd.DataFrame(index=frame.index)
    out["log_batch"] = np.log(frame.batch_size)
    out["threads"] = frame.threads.astype(float)
    out["log_peak"] = np.log(frame.peak_tflops)
    out["log_bandwidth"] = np.log(frame.bandwidth_gbs)
    out["bf16"] = (frame.precision == "bf16").astype(float)
    setting = setting_of(frame)
    for name in SETTINGS:
        out[name] = (setting == name).astype(float)
    out["log_flops"] = np.log(frame.total_flops.clip(lower=1.0))
    out["log_params"] = np.log(frame.param_bytes.clip(lower=1.0))
    out["log_image_size"] = np.log(frame.image_size.astype(float))
    return out[CORRECTION_COLUMNS]


@dataclass
class Predictor:
    """Fitted costs (per setting, and over all rows for a setting too thin to fit alone), a
    fitted correction and its conformal half-width (in log space)."""

    costs: dict[str, np.ndarray]
    pooled: np.ndarray
    regressor: object
    half_width: float

    def cost_seconds(self, frame: pd.DataFrame) -> pd.Series:
        """The fitted cost model's seconds per call, before the correction."""
        terms = cost_terms(frame).to_numpy()
        weights = np.stack([self.costs.get(s, self.pooled) for s in setting_of(frame)])
        # a floor: a row whose every fitted cost is zero still takes a launch per op
        floor = frame.op_count.to_numpy() * OP_OVERHEAD_S
        return pd.Series(np.maximum((terms * weights).sum(axis=1), floor), index=frame.index)

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Seconds per call with a ``COVERAGE`` interval, for rows with the feature columns."""
        prior = self.cost_seconds(frame)
        with _one_thread():
            correction = self.regressor.predict(design_matrix(frame))
        seconds = prior * np.exp(correction)
        return pd.DataFrame(
            {
                "seconds": seconds,
                "low": seconds * np.exp(-self.half_width),
                "high": seconds * np.exp(self.half_width),
            },
            index=frame.index,
        )


def _one_thread():
    """A context in which the correction's trees run on one OpenMP thread. On a few hundred rows
    threads buy nothing (a fit on a committed prediction run's table took 1.8 s on one thread, 2.7 s on
    two cores), and their threads spin at barriers: beside one other busy process a hold-out took
    1305 s where it took 53 s alone."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="openmp")


def _regressor(seed: int):
    from sklearn.ensemble import HistGradientBoostingRegressor

    # small trees and strong shrinkage: a sweep holds a few hundred configurations
    return HistGradientBoostingRegressor(
        max_iter=300, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=5, random_state=seed
    )


def setting_fit(rows: pd.DataFrame) -> str:
    """How a setting's costs are fitted from its ``rows``: ``shrunk`` (its own costs, shrunk toward
    the scaled pooled ones: ``MIN_SHRINK_LINEAGES`` lineages), ``scaled`` (the pooled costs
    times one factor per term group: ``MIN_SCALE_LINEAGES`` lineages) or ``pooled``; either of
    the first two needs twice as many rows as there are term groups."""
    lineages = rows.model.map(lineage).nunique()
    if len(rows) < 2 * len(TERM_GROUPS):
        return "pooled"
    if lineages >= MIN_SHRINK_LINEAGES:
        return "shrunk"
    return "scaled" if lineages >= MIN_SCALE_LINEAGES else "pooled"


def setting_costs(rows: pd.DataFrame, pooled: np.ndarray) -> tuple[str, np.ndarray, float]:
    """One setting's costs from its ``rows``: how they were fitted (``setting_fit``), the
    weights, and the shrink weight (inf for scaled or pooled costs)."""
    how = setting_fit(rows)
    if how == "shrunk":
        weights, shrink = _fit_shrunk(rows, pooled)
        return how, weights, shrink
    if how == "scaled":
        return how, _fit_scales(rows, pooled), np.inf
    return how, pooled, np.inf


def fit_costs(frame: pd.DataFrame) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The cost model's weights: the pooled set fitted on every row, and per setting the set
    ``setting_costs`` fits; a setting missing from the dict uses the pooled set."""
    pooled = _fit_costs(frame)
    costs = {}
    for name, rows in frame.groupby(setting_of(frame)):
        how, weights, _ = setting_costs(rows, pooled)
        if how != "pooled":
            costs[name] = weights
    return costs, pooled


def cost_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The costs fitted on ``frame`` as a reader reads them: per setting (``all`` for the pooled
    fit) and term, the share of the peak (a FLOP term) or of the copy bandwidth (a byte term) it
    runs at, 1 / cost, and the microseconds an op takes, with how the setting's set was fitted
    (``setting_fit``) and its shrink weight (``SHRINK_GRID``). A term fitted at zero explains
    nothing the others do not and is left out."""
    pooled = _fit_costs(frame)
    names = list(cost_terms(frame.iloc[:1]).columns)
    fitted = {}
    for setting, rows in frame.groupby(setting_of(frame)):
        how, weights, shrink = setting_costs(rows, pooled)
        if how != "pooled":
            fitted[setting] = (how, weights, shrink if how == "shrunk" else None)
    fitted["all"] = ("all rows", pooled, None)
    rows = []
    for setting, (how, weights, shrink) in fitted.items():
        for name, weight in zip(names, weights, strict=True):
            if weight <= 0:
                continue
            rows.append(
                {
                    "setting": setting,
                    "fit": how,
                    "shrink": shrink,
                    "term": name,
                    "share_of_ceiling": None if name == "ops" else 1.0 / weight,
                    "us_per_op": weight if name == "ops" else None,
                }
            )
    columns = ["setting", "fit", "shrink", "term", "share_of_ceiling", "us_per_op"]
    return pd.DataFrame(rows, columns=columns)


def _fit_once(frame: pd.DataFrame, seed: int) -> Predictor:
    costs, pooled = fit_costs(frame)
    partial = Predictor(costs, pooled, None, np.inf)
    target = np.log(frame.seconds / partial.cost_seconds(frame))
    with _one_thread():
        partial.regressor = _regressor(seed).fit(design_matrix(frame), target)
    return partial


def fit(frame: pd.DataFrame, *, seed: int = 0, folds: int = 5) -> Predictor:
    """Fit on measured rows (``seconds`` per call plus the feature columns).

    The interval's half-width is the ``COVERAGE`` quantile of absolute log residuals from
    grouped cross-validation by model (each residual from a fit, costs and correction, that
    never saw its model)."""
    from sklearn.model_selection import GroupKFold

    groups = frame.model.to_numpy()
    residuals = []
    n_groups = len(set(groups))
    if n_groups >= 2:
        splitter = GroupKFold(n_splits=min(folds, n_groups))
        for train, test in splitter.split(frame, groups=groups):
            held = frame.iloc[test]
            model = _fit_once(frame.iloc[train], seed)
            residuals.append(np.abs(np.log(held.seconds / model.predict(held).seconds)))
    spread = np.concatenate(residuals) if residuals else np.array([np.inf])
    # the finite-sample conformal quantile: ceil((n + 1) q) / n
    level = min(1.0, np.ceil((len(spread) + 1) * COVERAGE) / len(spread))
    fitted = _fit_once(frame, seed)
    fitted.half_width = float(np.quantile(spread, level))
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
        small = frame.batch_size <= BATCH_FIT_MAX
        if small.any() and (~small).any():
            yield f"batch > {BATCH_FIT_MAX}", frame.index[small], frame.index[~small]
    elif kind in ("threads", "cpu"):
        column = "threads" if kind == "threads" else "device_name"
        values = sorted(frame[column].unique())
        if len(values) >= 2:
            for value in values:
                mask = frame[column] == value
                yield f"{column} {value}", frame.index[~mask], frame.index[mask]
    else:
        raise ValueError(f"unknown hold-out {kind!r}; choose from {', '.join(HOLDOUTS)}")


def abs_error_pct(measured: pd.Series, predicted: pd.Series) -> pd.Series:
    """Each prediction's absolute error, in percent of the measurement."""
    return (predicted / measured - 1.0).abs() * 100


def errors(measured: pd.Series, predicted: pd.Series) -> dict:
    """MAPE, the shares within 10% and 15%, and the worst error, all in percent."""
    error = abs_error_pct(measured, predicted)
    return {
        "mape_pct": float(error.mean()),
        "within_10pct": float((error <= 10).mean() * 100),
        "within_15pct": float((error <= 15).mean() * 100),
        "worst_pct": float(error.max()),
        "n": int(len(error)),
    }


def error_table(held: pd.DataFrame) -> pd.DataFrame:
    """MAPE and rows of scored hold-outs (``holdout``, ``seconds``, ``predicted`` and the
    configuration's columns) by hold-out, setting and image size: where a hold-out's misses
    gather, which its overall MAPE hides. Where ``held`` has the cost model's own seconds
    (``cost``, from :func:`evaluate`), ``cost_mape_pct`` is its MAPE before the correction: which
    of the two parts a miss comes from."""
    keyed = held.assign(setting=setting_of(held))
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
        setting=setting_of(held),
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
SCORE_METRICS = ("mape_pct", "within_10pct", "within_15pct", "worst_pct", "interval_coverage_pct")


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
        seen = set(setting_of(frame.loc[train]))
        parts.append(
            frame.loc[test].assign(
                fold=name,
                **{"predicted": predicted.seconds, "low": predicted.low, "high": predicted.high},
                cost=fitted.cost_seconds(frame.loc[test]),
                setting_seen=setting_of(frame.loc[test]).isin(seen).to_numpy(),
            )
        )
    if not parts:
        return frame.iloc[:0].assign(fold="", predicted=np.nan, cost=np.nan, setting_seen=False)
    return pd.concat(parts)
