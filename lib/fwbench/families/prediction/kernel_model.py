"""The kernel-level predictor: a configuration's time per call is the framework's call cost plus
a fitted scale times the sum of its kernels' prices, measured on its own CPU model.

- ``micro_benchmarks`` reads 23_kernels' records from the index for one CPU model and thread
  count: the kernel table and each framework's empty call.
- ``KernelPredictor`` holds the prices (``kernel_prices.KernelPrices``) and one ``Setting`` per
  framework and mode, fitted on measured configurations (``dataset.measured``) of the training
  models, and predicts any configuration of a registry model from its kernels
  (``kernels.model_kernels``, read once per model, mode and batch size).

Settings it covers: PyTorch eager (aten ops priced with torch's micro-benchmarks), JAX jit of
the stock twin and JAX through torchax (XLA's kernels priced with JAX's). PyTorch's compiled
modes generate kernels this does not read; they are left to the op-category predictor.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from fwbench.families.prediction import dataset, kernels
from fwbench.families.prediction.kernel_prices import KernelPrices, Setting, kind_shares

# (framework, mode) -> which micro-benchmarks price its kernels
SETTINGS = {("torch", "eager"): "torch", ("jax", "jit"): "jax", ("jax", "torchax"): "jax"}

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


def _covered(measured: pd.DataFrame) -> pd.DataFrame:
    keys = list(zip(measured.framework, measured["mode"], strict=True))
    return measured[np.array([key in SETTINGS for key in keys], bool)]


def _read_kernels(model: str, framework: str, mode: str, batch: int, size: int) -> list:
    return kernels.model_kernels(model, framework, batch, size, mode=mode)
