"""The cost model: a configuration's seconds per call as a sum of costs, as a kernel-by-kernel
predictor sums kernels. Each op category's FLOPs over the measured peak, each category's output
bytes and the parameters' bytes over the measured copy bandwidth, and the op count, every term
weighted by a non-negative cost that is fitted (one set per framework and mode, since their
kernels differ) by non-negative least squares on relative error. A new model is a new mix of the
same categories, so the sum carries over to it; a depthwise convolution costs what depthwise
convolutions cost, whichever network it sits in.

``predictor`` corrects the sum and puts an interval on it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.families.prediction import dataset
from fwbench.models.lineage import lineage
from fwbench.vocab import OP_CATEGORIES

# launch cost of one eager op on a CPU, before anything is learned: a few microseconds
_OP_OVERHEAD_S = 5e-6
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


def setting_of(frame: pd.DataFrame) -> pd.Series:
    return frame["framework"] + " " + frame["mode"]


def roofline_seconds(frame: pd.DataFrame) -> pd.Series:
    """The unfitted roofline of one call: max(FLOPs / peak, bytes / bandwidth) + ops x launch
    cost; the yardstick the fitted costs are scored against."""
    compute = frame.total_flops / (frame.peak_tflops * 1e12)
    memory = frame.total_bytes / (frame.bandwidth_gbs * 1e9)
    return np.maximum(compute, memory) + frame.op_count * _OP_OVERHEAD_S


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


def category_roofline_s(frame: pd.DataFrame) -> pd.DataFrame:
    """Each op category's roofline seconds in every row of ``frame`` (features and ceilings
    joined): the larger of its two cost terms at the ceilings, its FLOPs over the peak and its
    output bytes over the copy bandwidth."""
    terms = cost_terms(frame)
    return pd.DataFrame(
        {c: np.maximum(terms[f"flops:{c}"], terms[f"bytes:{c}"]) for c in OP_CATEGORIES},
        index=frame.index,
    )


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
    floor = frame.op_count.to_numpy() * _OP_OVERHEAD_S
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
    costs = {name: weights for name, (how, weights, _) in _settings(frame, pooled).items()}
    return costs, pooled


def _settings(frame: pd.DataFrame, pooled: np.ndarray) -> dict[str, tuple[str, np.ndarray, float]]:
    """``setting_costs`` of each setting of ``frame`` not fitted as ``pooled``."""
    fitted = {}
    for name, rows in frame.groupby(setting_of(frame)):
        how, weights, shrink = setting_costs(rows, pooled)
        if how != "pooled":
            fitted[name] = (how, weights, shrink)
    return fitted


def cost_seconds(
    costs: dict[str, np.ndarray], pooled: np.ndarray, frame: pd.DataFrame
) -> pd.Series:
    """The cost model's seconds per call of each row of ``frame``: its setting's costs (the pooled
    ones for a setting not fitted), floored at a launch per op."""
    terms = cost_terms(frame).to_numpy()
    weights = np.stack([costs.get(s, pooled) for s in setting_of(frame)])
    floor = frame.op_count.to_numpy() * _OP_OVERHEAD_S
    return pd.Series(np.maximum((terms * weights).sum(axis=1), floor), index=frame.index)


def cost_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The costs fitted on ``frame`` as a reader reads them: per setting (``all`` for the pooled
    fit) and term, the share of the peak (a FLOP term) or of the copy bandwidth (a byte term) it
    runs at, 1 / cost, and the microseconds an op takes, with how the setting's set was fitted
    (``setting_fit``) and its shrink weight (``SHRINK_GRID``). A term fitted at zero explains
    nothing the others do not and is left out."""
    pooled = _fit_costs(frame)
    names = list(cost_terms(frame.iloc[:1]).columns)
    fitted = {
        setting: (how, weights, shrink if how == "shrunk" else None)
        for setting, (how, weights, shrink) in _settings(frame, pooled).items()
    }
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
