"""The JAX ÷ PyTorch ratio predicted directly, with its interval.

A ratio read off two predictions carries both predictions' errors; where the two sides miss the
same way (a model that runs slow everywhere) the errors cancel, and where they miss apart the
winner flips. The direct model learns log(JAX seconds / PyTorch eager seconds) of pairs measured
in the same run, from the JAX side's setting (jit on a Flax twin, or PyTorch's graph through
torchax), the sizes and the op mix (``predictor.design_matrix``); as the predictor does, it
picks what it reads by cross-validation grouped by lineage (``predictor.best_correction``: the
mean ratio of the other lineages, the sizes, or the sizes and the mix) and takes its conformal
interval from the same folds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fwbench.families.prediction import dataset, predictor
from fwbench.measure import comparison
from fwbench.models.lineage import lineage

JAX_MODES = ("jit", "torchax")


def pairs(table: pd.DataFrame) -> pd.DataFrame:
    """Each JAX row of ``table`` (``JAX_MODES``) with the PyTorch eager row of its run and
    configuration; a JAX row whose run timed no PyTorch (torchax's own campaigns) takes the median
    of the configuration's PyTorch eager rows in other runs on the same CPU (``same_run`` False:
    the between-run spread rides along, and it is never ``decided``). The JAX row's columns,
    ``torch_seconds``, ``torch_index`` (the row, or the first of those pooled), ``log_ratio`` (JAX
    over PyTorch) and ``decided`` (the paired trials' interval excludes 1)."""
    is_jax = comparison.framework_is("jax", JAX_MODES)
    is_torch = comparison.framework_is("torch", ["eager"])
    torch = table[is_torch(table)]
    right = torch[dataset.PAIR_KEY].assign(
        torch_seconds=torch.seconds.to_numpy(), torch_index=torch.index
    )
    if "trial_img_s" in torch:
        right["torch_trials"] = torch.trial_img_s.to_numpy()
    right = right.drop_duplicates(dataset.PAIR_KEY)
    jax = table[is_jax(table)].reset_index(names="jax_index")
    # the same run's PyTorch row where there is one (``comparison.pair_rows``, as every pairing)
    found = comparison.pair_rows(table, dataset.PAIR_KEY, is_jax, is_torch, keep_missing=True)
    same = (
        jax.merge(found[["jax_index", "torch_index"]], on="jax_index")
        .merge(right.drop(columns=dataset.PAIR_KEY), on="torch_index")
        .reindex(columns=[*jax.columns, *right.columns.drop(dataset.PAIR_KEY)])
        .assign(same_run=True)
    )
    config = dataset.PAIR_KEY[2:]
    pooled = right.groupby(config, as_index=False).agg(
        torch_seconds=("torch_seconds", "median"), torch_index=("torch_index", "first")
    )
    rest = jax[~jax.jax_index.isin(same.jax_index)]
    other = rest.merge(pooled, on=config, how="inner").assign(same_run=False)
    out = pd.concat([same, other], ignore_index=True)
    out["log_ratio"] = np.log(out.seconds / out.torch_seconds)
    out["decided"] = [
        bool(s) and isinstance(t, dict) and comparison.decided(t, j)
        for s, t, j in zip(
            out.same_run,
            out.get("torch_trials", pd.Series(None, index=out.index)),
            out.get("trial_img_s", pd.Series(None, index=out.index)),
            strict=True,
        )
    ]
    return out


@dataclass
class _RatioModel:
    """The fitted ratio model: what it reads (``predictor.CORRECTIONS``; ``none`` is the mean log
    ratio), the fitted regressor, and the conformal half-width in log space."""

    reads: str
    mean: float
    regressor: object = None
    half_width: float = np.inf
    misses: dict = field(default_factory=dict)

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The predicted ratio (JAX seconds / PyTorch seconds) of ``rows`` (JAX rows with the
        feature columns) with its ``predictor.COVERAGE`` interval."""
        log = _predict_log(self.reads, self.mean, self.regressor, rows)
        return pd.DataFrame(
            {
                "ratio": np.exp(log),
                "low": np.exp(log - self.half_width),
                "high": np.exp(log + self.half_width),
            },
            index=rows.index,
        )


def _predict_log(reads: str, mean: float, regressor, rows: pd.DataFrame) -> np.ndarray:
    if reads == "none":
        return np.full(len(rows), mean)
    with predictor.one_thread():
        return regressor.predict(predictor.design_matrix(rows, reads))


def _fit_reads(rows: pd.DataFrame, seed: int) -> dict:
    """The mean log ratio and a regressor per ``predictor.CORRECTIONS`` reading, on ``rows``."""
    fitted = {"mean": float(rows.log_ratio.mean())}
    for reads in predictor.CORRECTIONS:
        if reads != "none":
            with predictor.one_thread():
                model = predictor.regressor(seed).fit(
                    predictor.design_matrix(rows, reads), rows.log_ratio
                )
            fitted[reads] = model
    return fitted


def fit(rows: pd.DataFrame, *, seed: int = 0, folds: int = 5) -> _RatioModel:
    """Fit on ``pairs`` rows: each reading scored by folds that hold whole lineages out, the best
    kept (``predictor.best_correction``), its residuals the interval's."""
    misses = pd.DataFrame(np.nan, index=np.arange(len(rows)), columns=list(predictor.CORRECTIONS))
    for train, test in predictor.lineage_folds(rows, folds):
        part = _fit_reads(rows.iloc[train], seed)
        held = rows.iloc[test]
        for reads in predictor.CORRECTIONS:
            log = _predict_log(reads, part["mean"], part.get(reads), held)
            misses.loc[test, reads] = np.abs(held.log_ratio.to_numpy() - log)
    whole = _fit_reads(rows, seed)
    scored = misses.dropna()
    reads = predictor.best_correction(scored) if len(scored) else "none"
    spread = scored[reads].to_numpy() if len(scored) else np.array([])
    return _RatioModel(
        reads,
        whole["mean"],
        whole.get(reads),
        predictor.conformal_quantile(spread),
        {k: float(v) for k, v in scored.mean().items()},
    )


def evaluate(table: pd.DataFrame, predicted: pd.Series, *, seed: int = 0) -> pd.DataFrame:
    """The lineage hold-out of the direct ratio: every pair of ``table`` predicted by a ratio
    model that never saw its lineage, beside the ratio of the predictor's own predictions of its
    two rows (``predicted``: ``predictor.evaluate``'s lineage hold-out, indexed like ``table``);
    ``pairs``'s columns plus ``fold``, ``ratio``, ``low``, ``high``, ``indirect`` and what the
    fold's model read (``reads``)."""
    every = pairs(table)
    every = every[every.jax_index.isin(predicted.index) & every.torch_index.isin(predicted.index)]
    found = []
    lineages = every.model.map(lineage)
    for held_out in sorted(lineages.unique()):
        train, held = every[lineages != held_out], every[lineages == held_out]
        if train.model.map(lineage).nunique() < 2:
            continue
        model = fit(train.reset_index(drop=True), seed=seed)
        indirect = predicted[held.jax_index].to_numpy() / predicted[held.torch_index].to_numpy()
        found.append(
            held.assign(fold=held_out, reads=model.reads, indirect=indirect, **model.predict(held))
        )
    return pd.concat(found) if found else every.iloc[:0]


def scores(held: pd.DataFrame) -> pd.DataFrame:
    """Per JAX mode (and ``all``) of a scored hold-out (``evaluate``): the direct ratio's and the
    indirect one's error (in percent of the measured ratio), the shares within ±20%, the correct
    winner over the decided pairs (NaN where none is) and how often the interval held."""
    measured = np.exp(held.log_ratio)
    out = []
    for name, group in [("all", held), *held.groupby("mode", sort=True)]:
        m = measured[group.index] if name != "all" else measured
        entry = {"jax_mode": name, "pairs": len(group), "decided": int(group.decided.sum())}
        for label, ratio in (("direct", group.ratio), ("indirect", group.indirect)):
            error = predictor.abs_error_pct(m, ratio)
            right = ((m > 1) == (ratio > 1))[group.decided.astype(bool)]
            entry[f"{label}_mape_pct"] = float(error.mean())
            entry[f"{label}_within_20pct"] = float((error <= 20).mean() * 100)
            entry[f"{label}_correct_winner_pct"] = (
                float(right.mean() * 100) if len(right) else np.nan
            )
        entry["direct_coverage_pct"] = float(((m >= group.low) & (m <= group.high)).mean() * 100)
        out.append(entry)
    return pd.DataFrame(out)
