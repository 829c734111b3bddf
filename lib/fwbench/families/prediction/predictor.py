"""Predict a configuration's time per call from its features: a roofline prior corrected in log
space by a learned model, with intervals from grouped conformal residuals, and the grouped
hold-outs that score it on what no fit has seen.

The prior is the roofline time of one call: the larger of its FLOPs over the measured peak and its
bytes over the measured bandwidth, plus the launch cost of its ops. What the prior misses (a
framework's kernels for depthwise convolutions, XLA's fusion, the threads' scaling) is learned as
log(measured / prior) by gradient boosting over the features, with the framework and mode as
columns, so one model serves both frameworks and can say which is faster where neither ran.

Intervals are split-conformal on that log ratio: the residuals come from fits that did not see the
residual's model (grouped cross-validation), so the interval holds for a model nobody ran, which
is what ``fwbench predict`` is asked about; random splits would leak the model and shrink it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fwbench.vocab import OP_CATEGORIES

# launch cost of one eager op on a CPU, before anything is learned: a few microseconds
OP_OVERHEAD_S = 5e-6
HOLDOUTS = ("family", "batch", "threads", "cpu")
BATCH_FIT_MAX = 16  # the batch hold-out fits on batch <= 16 and predicts larger batches
COVERAGE = 0.9


def model_family(name: str) -> str:
    """The architecture family a torchvision name belongs to: resnet50 -> resnet,
    wide_resnet50_2 -> wide_resnet, mobilenet_v3_small -> mobilenet, vit_b_16 -> vit."""
    found = re.match(r"(?:wide_)?[a-z]+", name)
    return found.group(0) if found else name


def prior_seconds(frame: pd.DataFrame) -> pd.Series:
    """Roofline time of one call: max(FLOPs / peak, bytes / bandwidth) + ops x launch cost."""
    compute = frame.total_flops / (frame.peak_tflops * 1e12)
    memory = frame.total_bytes / (frame.bandwidth_gbs * 1e9)
    return np.maximum(compute, memory) + frame.op_count * OP_OVERHEAD_S


def design_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """The learned correction's inputs: sizes in logs, the FLOP mix as shares, the setting."""
    flops = frame.total_flops.clip(lower=1.0)
    out = pd.DataFrame(index=frame.index)
    out["log_flops"] = np.log(flops)
    out["log_bytes"] = np.log(frame.total_bytes.clip(lower=1.0))
    out["log_params"] = np.log(frame.param_bytes.clip(lower=1.0))
    out["log_ops"] = np.log(frame.op_count.clip(lower=1.0))
    out["log_batch"] = np.log(frame.batch_size)
    out["threads"] = frame.threads.astype(float)
    out["arithmetic_intensity"] = np.log(flops / frame.total_bytes.clip(lower=1.0))
    out["log_peak"] = np.log(frame.peak_tflops)
    out["log_bandwidth"] = np.log(frame.bandwidth_gbs)
    for category in OP_CATEGORIES:
        column = f"flops:{category}"
        if column in frame:
            out[f"share:{category}"] = frame[column] / flops
    out["bf16"] = (frame.precision == "bf16").astype(float)
    for setting in ("torch eager", "torch compile", "jax jit"):
        out[setting] = ((frame["framework"] + " " + frame["mode"]) == setting).astype(float)
    return out


@dataclass
class Predictor:
    """A fitted correction and its conformal half-width (in log space)."""

    regressor: object
    columns: list[str]
    half_width: float

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Seconds per call with a ``COVERAGE`` interval, for rows with the feature columns."""
        prior = prior_seconds(frame)
        correction = self.regressor.predict(design_matrix(frame)[self.columns])
        seconds = prior * np.exp(correction)
        return pd.DataFrame(
            {
                "seconds": seconds,
                "low": seconds * np.exp(-self.half_width),
                "high": seconds * np.exp(self.half_width),
            },
            index=frame.index,
        )


def _regressor(seed: int):
    from sklearn.ensemble import HistGradientBoostingRegressor

    # small trees and strong shrinkage: a sweep holds a few hundred configurations
    return HistGradientBoostingRegressor(
        max_iter=300, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=5, random_state=seed
    )


def fit(frame: pd.DataFrame, *, seed: int = 0, folds: int = 5) -> Predictor:
    """Fit on measured rows (``seconds`` per call plus the feature columns).

    The interval's half-width is the ``COVERAGE`` quantile of absolute log residuals from
    grouped cross-validation by model (each residual from a fit that never saw its model)."""
    from sklearn.model_selection import GroupKFold

    x = design_matrix(frame)
    target = np.log(frame.seconds / prior_seconds(frame))
    groups = frame.model.to_numpy()
    residuals = []
    n_groups = len(set(groups))
    if n_groups >= 2:
        for train, test in GroupKFold(n_splits=min(folds, n_groups)).split(x, target, groups):
            model = _regressor(seed).fit(x.iloc[train], target.iloc[train])
            residuals.append(np.abs(target.iloc[test] - model.predict(x.iloc[test])))
    spread = np.concatenate(residuals) if residuals else np.array([np.inf])
    # the finite-sample conformal quantile: ceil((n + 1) q) / n
    level = min(1.0, np.ceil((len(spread) + 1) * COVERAGE) / len(spread))
    half_width = float(np.quantile(spread, level))
    return Predictor(_regressor(seed).fit(x, target), list(x.columns), half_width)


def holdout_splits(frame: pd.DataFrame, kind: str):
    """(name, train index, test index) for each fold of one grouped hold-out:
    ``family`` leaves one model family out, ``batch`` fits batch <= 16 and tests larger,
    ``threads`` leaves one thread count out, ``cpu`` leaves one CPU (device_name) out.
    A hold-out the data cannot make (one thread count, one CPU) yields nothing."""
    if kind == "family":
        families = frame.model.map(model_family)
        for family in sorted(families.unique()):
            yield family, frame.index[families != family], frame.index[families == family]
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


def errors(measured: pd.Series, predicted: pd.Series) -> dict:
    """MAPE, the shares within 10% and 15%, and the worst error, all in percent."""
    error = (predicted / measured - 1.0).abs() * 100
    return {
        "mape_pct": float(error.mean()),
        "within_10pct": float((error <= 10).mean() * 100),
        "within_15pct": float((error <= 15).mean() * 100),
        "worst_pct": float(error.max()),
        "n": int(len(error)),
    }


def correct_winner_rate(rows: pd.DataFrame) -> float:
    """Over JAX-vs-PyTorch pairs whose measured gap is decided (``decided`` True), the share where
    the predicted seconds pick the same winner. ``rows``: one per pair, with ``measured_ratio``
    and ``predicted_ratio`` (JAX seconds / PyTorch seconds) and ``decided``."""
    decided = rows[rows.decided]
    if decided.empty:
        return float("nan")
    same = (decided.measured_ratio > 1) == (decided.predicted_ratio > 1)
    return float(same.mean() * 100)


def evaluate(frame: pd.DataFrame, kind: str, *, seed: int = 0) -> pd.DataFrame:
    """Every row of ``frame`` predicted by a fit that held its group out; the hold-out's folds
    concatenated, with ``fold``, ``predicted`` seconds and the interval."""
    parts = []
    for name, train, test in holdout_splits(frame, kind):
        fitted = fit(frame.loc[train], seed=seed)
        predicted = fitted.predict(frame.loc[test])
        parts.append(
            frame.loc[test].assign(
                fold=name,
                **{"predicted": predicted.seconds, "low": predicted.low, "high": predicted.high},
            )
        )
    return pd.concat(parts) if parts else frame.iloc[:0].assign(fold="", predicted=np.nan)
