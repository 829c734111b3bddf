"""The kernel-level predictor: a configuration's time per call is the framework's call cost plus
a fitted scale times the sum of its kernels' prices, measured on its own CPU model.

- ``micro_benchmarks`` reads 23_kernels' records from the index for one CPU model and thread
  count: the kernel table and each framework's empty call.
- ``KernelPredictor`` holds the prices (``kernel_prices.KernelPrices``) and one ``Setting`` per
  framework and mode, fitted on measured configurations (``dataset.measured``) of the training
  models, and predicts any configuration of a registry model from its kernels
  (``kernels.model_kernels``, read once per model, mode and batch size).
- ``lineage_holdout`` scores it as 21_prediction scores the op-category predictor: each row
  predicted with its setting's scale fitted on the other lineages' rows (the prices come from
  the micro-benchmarks, which hold no model's time); ``holdout_from_index`` does so on every
  CPU model and thread count the index has micro-benchmarks for.

Settings it covers: PyTorch eager (aten ops priced with torch's micro-benchmarks), JAX jit of
the stock or the expert twin and JAX through torchax (XLA's kernels priced with JAX's). PyTorch's compiled
modes generate kernels this does not read; they are left to the op-category predictor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

from fwbench import vocab
from fwbench.families.prediction import dataset, kernels
from fwbench.families.prediction.kernel_prices import KernelPrices, Setting, kind_shares
from fwbench.models.lineage import lineage
from fwbench.results import db as fw_db

# (framework, mode) -> which micro-benchmarks price its kernels
SETTINGS = {
    ("torch", "eager"): "torch",
    ("jax", "jit"): "jax",
    ("jax", "jit-expert"): "jax",
    ("jax", "torchax"): "jax",
}

_KERNELS_SQL = """
select framework, metric, value, extra from measurements
where family = 'prediction' and status = 'ok' and metric in ('kernel_s', 'empty_call_s')
  and device_name = ? and coalesce(threads, 0) = ?
"""


def micro_benchmarks(con, device_name: str, threads: int) -> tuple[pd.DataFrame, dict[str, float]]:
    """(the kernel table: framework, kind, shape, seconds; framework -> its empty call's
    seconds), from every 23_kernels run on ``device_name`` at ``threads`` (a shape measured in
    several runs keeps its median)."""
    rows = con.execute(_KERNELS_SQL, [device_name, threads]).df()
    rows["extra"] = rows["extra"].map(dataset.parse_extra)
    timed = rows[rows.metric == "kernel_s"]
    table = pd.DataFrame(
        {
            "framework": timed.framework.to_numpy(),
            "kind": [e["kind"] for e in timed.extra],
            "shape": [tuple(int(v) for v in e["shape"]) for e in timed.extra],
            "seconds": timed.value.to_numpy(),
        }
    )
    empty = rows[rows.metric == "empty_call_s"].groupby("framework").value.median()
    return table, {str(k): float(v) for k, v in empty.items()}


class KernelPredictor:
    def __init__(
        self,
        table: pd.DataFrame,
        empty_s: dict[str, float],
        kernels_of: Callable[..., list] | None = None,
    ):
        self.prices = KernelPrices().fit(table)
        self.empty_s = empty_s
        self.settings: dict[tuple[str, str], Setting] = {}
        self._kernels_of = kernels_of or _read_kernels
        self._read: dict[tuple, list] = {}

    def kernels(self, model: str, framework: str, mode: str, batch: int, size: int) -> list:
        key = (model, framework, mode, batch, size)
        if key not in self._read:
            self._read[key] = self._kernels_of(model, framework, mode, batch, size)
        return self._read[key]

    def _summed(self, row) -> tuple[float, dict[str, float]]:
        found = self.kernels(row.model, row.framework, row.mode, row.batch_size, row.image_size)
        prices = self.prices.price(SETTINGS[(row.framework, row.mode)], found)
        return float(prices.sum()), kind_shares(found, prices)

    def _overhead(self, framework: str, mode: str) -> float:
        # one call of one executable for XLA; eager's per-op cost is in its kernels' prices
        return self.empty_s.get("jax", 0.0) if SETTINGS[(framework, mode)] == "jax" else 0.0

    def fit(self, measured: pd.DataFrame, progress=lambda items: items) -> KernelPredictor:
        """One ``Setting`` per (framework, mode) the rows of ``measured`` hold (columns model,
        framework, mode, batch_size, image_size, seconds); rows of other settings are left out."""
        rows = _covered(measured)
        summed = [self._summed(r)[0] for r in progress(list(rows.itertuples()))]
        rows = rows.assign(summed_s=summed)
        for (framework, mode), group in rows.groupby(["framework", "mode"]):
            self.settings[(framework, mode)] = Setting.fit(
                self._overhead(framework, mode), group.summed_s, group.seconds
            )
        return self

    def predict(self, configs: pd.DataFrame, progress=lambda items: items) -> pd.DataFrame:
        """``configs`` (model, framework, mode, batch_size, image_size) with ``predicted_s``,
        ``low_s`` and ``high_s`` (the 90% interval) and ``share:<kind>`` (each kernel kind's
        share of the summed prices); a setting nobody fitted is refused."""
        out = []
        for row in progress(list(configs.itertuples(index=False))):
            setting = self.settings.get((row.framework, row.mode))
            if setting is None:
                raise KeyError(f"no fitted kernel-level setting for {row.framework} {row.mode}")
            summed, shares = self._summed(row)
            point, low, high = setting.predict(summed)
            out.append(
                {
                    **row._asdict(),
                    "summed_s": summed,
                    "predicted_s": point,
                    "low_s": low,
                    "high_s": high,
                    **{f"share:{kind}": share for kind, share in shares.items()},
                }
            )
        frame = pd.DataFrame(out)
        for kind in kernels.KINDS:
            column = f"share:{kind}"
            frame[column] = frame[column].fillna(0.0) if column in frame else 0.0
        return frame


def lineage_holdout(
    predictor: KernelPredictor, measured: pd.DataFrame, progress=lambda items: items
) -> pd.DataFrame:
    """The rows of ``measured`` the predictor covers, each predicted with its setting's scale and
    interval fitted on the other lineages' rows only: ``fold`` (the held-out lineage),
    ``summed_s``, ``predicted``, ``low``, ``high`` and ``setting_seen`` (False where no other
    lineage had a row of that setting: then no prediction), indexed as ``measured``."""
    rows = _covered(measured)
    if rows.empty:
        return rows.assign(fold="", summed_s=np.nan, predicted=np.nan, low=np.nan, high=np.nan,
                           setting_seen=False)  # fmt: skip
    found = [predictor._summed(r) for r in progress(list(rows.itertuples()))]
    shares = pd.DataFrame([s for _, s in found], index=rows.index).fillna(0.0).add_prefix("share:")
    rows = pd.concat([rows, shares], axis=1).assign(
        summed_s=[s for s, _ in found], fold=rows.model.map(lineage)
    )
    parts = []
    for (held, framework, mode), test in rows.groupby(["fold", "framework", "mode"]):
        train = rows[(rows.fold != held) & (rows.framework == framework) & (rows["mode"] == mode)]
        out = test.assign(predicted=np.nan, low=np.nan, high=np.nan, setting_seen=not train.empty)
        if not train.empty:
            setting = Setting.fit(
                predictor._overhead(framework, mode), train.summed_s, train.seconds
            )
            point, low, high = setting.predict(test.summed_s.to_numpy())
            out = out.assign(predicted=point, low=low, high=high)
        parts.append(out)
    return pd.concat(parts).loc[rows.index]


def holdout_from_index(
    db_file, measured: pd.DataFrame, progress=lambda items: items
) -> pd.DataFrame:
    """``lineage_holdout`` on each CPU model and thread count of ``measured`` (fp32 rows) that
    the index at ``db_file`` has 23_kernels micro-benchmarks for, with ``kernels_on`` naming
    the micro-benchmarks' hardware; empty where it has none."""
    with fw_db.connect(db_file, read_only=True) as con:
        where = con.execute(
            "select distinct device_name, coalesce(threads, 0) from measurements "
            "where family = 'prediction' and metric = 'kernel_s' and status = 'ok'"
        ).fetchall()
        benches = {(d, int(t)): micro_benchmarks(con, d, int(t)) for d, t in where}
    parts = []
    for (device_name, threads), (table, empty) in sorted(benches.items()):
        rows = measured[
            (measured.device_name == device_name)
            & (measured.threads == threads)
            & (measured.precision == "fp32")
        ]
        frameworks = set(table.framework)
        rows = rows[
            [
                SETTINGS.get((f, m)) in frameworks
                for f, m in zip(rows.framework, rows["mode"], strict=True)
            ]
        ]
        if len(rows):
            found = lineage_holdout(KernelPredictor(table, empty), rows, progress)
            parts.append(found.assign(kernels_on=f"{device_name}, {threads} threads"))
    return pd.concat(parts) if parts else measured.iloc[:0]


def predict_from_index(
    db_file,
    training: pd.DataFrame,
    configs: pd.DataFrame,
    device_name: str,
    threads: int,
    progress=lambda items: items,
) -> pd.DataFrame:
    """``configs`` (model, framework, mode, batch_size, image_size) of the settings this covers,
    predicted on ``device_name`` at ``threads``: prices from the index's micro-benchmarks there,
    each setting fitted on ``training``'s fp32 rows of that CPU and thread count. Empty where the
    index has no micro-benchmarks there, or no setting of ``configs`` has training rows."""
    with fw_db.connect(db_file, read_only=True) as con:
        table, empty = micro_benchmarks(con, device_name, threads)
    if table.empty:
        return configs.iloc[:0]
    rows = training[
        (training.device_name == device_name)
        & (training.threads == threads)
        & (training.precision == "fp32")
    ]
    found = KernelPredictor(table, empty).fit(rows, progress)
    keys = zip(configs.framework, configs["mode"], strict=True)
    wanted = configs[np.array([key in found.settings for key in keys], bool)]
    columns = ["model", "framework", "mode", "batch_size", "image_size"]
    return found.predict(wanted[columns], progress) if len(wanted) else configs.iloc[:0]


def shares_from_index(
    db_file,
    configs: pd.DataFrame,
    device_name: str,
    threads: int,
    progress=lambda items: items,
    kernels_of: Callable[..., list] | None = None,
) -> pd.DataFrame:
    """The rows of ``configs`` (model, framework, mode, batch_size, image_size) of the settings this
    covers, each with ``share:<kind>`` for every kernel kind: its share of the row's summed prices
    on ``device_name`` at ``threads``, where a prediction's time comes from. No setting is fitted:
    the shares need the prices only. Empty where the index has no micro-benchmarks there.
    ``kernels_of`` reads a configuration's kernels (by default, from what the framework runs)."""
    with fw_db.connect(db_file, read_only=True) as con:
        table, empty = micro_benchmarks(con, device_name, threads)
    rows = _covered(configs)
    if table.empty or rows.empty:
        return rows.iloc[:0]
    priced = KernelPredictor(table, empty, kernels_of)
    found = [priced._summed(r)[1] for r in progress(list(rows.itertuples()))]
    shares = pd.DataFrame(found, index=rows.index).reindex(columns=list(kernels.KINDS))
    return pd.concat([rows, shares.fillna(0.0).add_prefix("share:")], axis=1)


def side_by_side(
    held: pd.DataFrame, category_held: pd.DataFrame | None, with_baseline: pd.DataFrame
) -> pd.DataFrame:
    """On ``held``'s rows (``lineage_holdout``'s, predicted): the kernel-level predictor's
    scores, the op-category predictor's lineage hold-out on the same rows (``category_held``,
    ``predictor.evaluate``'s) and the baseline's (``with_baseline``: ``held`` through
    ``baselines.add_to_holdout``), over all rows and per setting."""
    from fwbench.families.prediction import baselines, predictor

    out = []
    settings = [("all", held.index)] + [
        (f"{f} {m}", g.index) for (f, m), g in held.groupby(["framework", "mode"])
    ]
    for setting, index in settings:
        rows = held.loc[index]
        found = predictor.interval_scores(rows.seconds, rows.predicted, rows.low, rows.high)
        out.append({"setting": setting, "predictor": "kernels", **found,
                    **predictor.winner_score(rows)})  # fmt: skip
        if category_held is not None:
            other = rows.assign(
                **{k: category_held[k].reindex(index) for k in ("predicted", "low", "high")}
            )
            other = other[other.predicted.notna()]
            if len(other):
                found = predictor.interval_scores(
                    other.seconds, other.predicted, other.low, other.high
                )
                out.append({"setting": setting, "predictor": "op categories", **found,
                            **predictor.winner_score(other)})  # fmt: skip
        out.append({"setting": setting, "predictor": baselines.NAME,
                    **baselines.holdout_scores(with_baseline.loc[index])})  # fmt: skip
    return pd.DataFrame(out)


def _covered(measured: pd.DataFrame) -> pd.DataFrame:
    keys = list(zip(measured.framework, measured["mode"], strict=True))
    return measured[np.array([key in SETTINGS for key in keys], bool)]


def _read_kernels(model: str, framework: str, mode: str, batch: int, size: int) -> list:
    return list(_lowered(model, framework, mode, batch, size))


# once per process: the hold-out builds a predictor per CPU model and the test's kinds another,
# and each would otherwise lower and compile the same models again on this machine
@functools.cache
def _lowered(model: str, framework: str, mode: str, batch: int, size: int) -> tuple:
    layers = vocab.twin_layers(mode) if framework == "jax" and mode != "torchax" else "stock"
    return tuple(kernels.model_kernels(model, framework, batch, size, mode=mode, layers=layers))
