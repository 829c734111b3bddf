"""A kernel's price from micro-benchmarks of its own kind measured on the device, and a model's
time as the sum of its kernels' prices.

- ``KernelPrices.fit`` takes the micro-benchmark table (one row per measured kernel: framework,
  kind, shape, seconds; ``kernel_bench.py`` measures it). A kernel measured in that shape is
  priced at its measurement. Any other is priced from its nearest measured neighbours of the
  *same kind and framework* (scikit-learn's distance-weighted k-nearest neighbours over the
  kernel's log-scale features, ``Kernel.features``): what they took over a reference time
  (FLOPs and bytes at nominal rates), times the kernel's own reference time, so a kernel larger
  than any measured one costs more, not the same. A kind with no measurement is refused, never
  guessed from another kind.
- ``Setting`` turns a sum of kernel prices into a model's time for one framework and mode:
  the per-call overhead measured with the kernels (an empty call), and one scale fitted on the
  training models' measured times (one number per setting, never per model: what the micro-
  benchmarks miss in common, cache effects between kernels, threads left idle), with the 90%
  interval of the training models' log residuals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fwbench.families.prediction.kernels import Kernel

# nominal rates that make a reference time: only their ratio matters to the fit, which learns
# what share of them each neighbourhood reaches
_REF_FLOPS = 1e11
_REF_BYTES = 1e10
_NEIGHBOURS = 4


def reference_seconds(kernel: Kernel) -> float:
    return max(kernel.flops / _REF_FLOPS, kernel.bytes / _REF_BYTES, 1e-9)


class KernelPrices:
    """Prices per framework and kernel kind, from one device's micro-benchmark table."""

    def __init__(self, neighbours: int = _NEIGHBOURS):
        self.neighbours = neighbours
        self._measured: dict[tuple, float] = {}
        self._models: dict[tuple[str, str], object] = {}

    def fit(self, table: pd.DataFrame) -> KernelPrices:
        """``table``: columns framework, kind, shape (a tuple of ints), seconds (> 0)."""
        from sklearn.neighbors import KNeighborsRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if table.empty:
            raise ValueError("no micro-benchmarks to price kernels from")
        if (table.seconds <= 0).any():
            raise ValueError("a micro-benchmark took no time: its empty call was not subtracted")
        rows = table.assign(shape=table["shape"].map(lambda s: tuple(int(v) for v in s)))
        self._measured = rows.groupby(["framework", "kind", "shape"]).seconds.median().to_dict()
        for (framework, kind), group in rows.groupby(["framework", "kind"]):
            kernels = [Kernel(kind, shape) for shape in group["shape"]]
            features = np.stack([k.features() for k in kernels])
            ratio = np.log(group.seconds.to_numpy() / [reference_seconds(k) for k in kernels])
            model = make_pipeline(
                StandardScaler(),
                KNeighborsRegressor(
                    n_neighbors=min(self.neighbours, len(group)), weights="distance"
                ),
            )
            self._models[(framework, kind)] = model.fit(features, ratio)
        return self

    def kinds(self, framework: str) -> set[str]:
        return {kind for fw, kind in self._models if fw == framework}

    def price(self, framework: str, kernels: list[Kernel]) -> np.ndarray:
        """Seconds per kernel, in order."""
        out = np.empty(len(kernels))
        todo: dict[str, list[int]] = {}
        for i, kernel in enumerate(kernels):
            found = self._measured.get((framework, kernel.kind, kernel.shape))
            if found is not None:
                out[i] = found
            else:
                todo.setdefault(kernel.kind, []).append(i)
        for kind, where in todo.items():
            model = self._models.get((framework, kind))
            if model is None:
                raise KeyError(f"no {kind} kernel of {framework} was measured on this device")
            chosen = [kernels[i] for i in where]
            ratio = model.predict(np.stack([k.features() for k in chosen]))
            out[where] = np.exp(ratio) * [reference_seconds(k) for k in chosen]
        return out


@dataclass(frozen=True)
class Setting:
    """One framework and mode: ``overhead + scale × Σ prices``, with its 90% interval."""

    overhead_s: float
    scale: float = 1.0
    low: float = 1.0  # factors on the prediction for the 90% interval
    high: float = 1.0
    fitted_on: int = 0  # training models (× batch sizes) the scale was fitted on

    def predict(self, summed_s: float) -> tuple[float, float, float]:
        """(seconds, low, high) for a model whose kernels' prices add up to ``summed_s``."""
        point = self.overhead_s + self.scale * summed_s
        return point, point * self.low, point * self.high

    @classmethod
    def fit(cls, overhead_s: float, summed_s, measured_s) -> Setting:
        """The scale that makes the median training model right, in log terms, and the 5th and
        95th percentiles of what is left."""
        summed, measured = np.asarray(summed_s, float), np.asarray(measured_s, float)
        if len(summed) == 0 or (summed <= 0).any() or (measured <= 0).any():
            raise ValueError("a setting is fitted on one measured model or more, times > 0")
        # the scale applies to the kernels only; the overhead was measured, not fitted
        work = np.maximum(measured - overhead_s, 1e-9)
        scale = float(np.exp(np.median(np.log(work / summed))))
        residual = np.log(measured / (overhead_s + scale * summed))
        low, high = np.quantile(residual, [0.05, 0.95]) if len(residual) > 1 else (0.0, 0.0)
        return cls(overhead_s, scale, math.exp(low), math.exp(high), len(summed))


def kind_shares(kernels: list[Kernel], prices: np.ndarray) -> dict[str, float]:
    """Each kernel kind's share of a model's summed price: where a prediction's time comes
    from, and so which kinds carry its error."""
    total = float(np.sum(prices))
    shares: dict[str, float] = {}
    for kernel, price in zip(kernels, prices, strict=True):
        shares[kernel.kind] = shares.get(kernel.kind, 0.0) + float(price) / total
    return shares


def leave_one_out(table: pd.DataFrame, neighbours: int = _NEIGHBOURS) -> pd.DataFrame:
    """Each measured kernel priced from the others of its kind (its own measurement left out):
    how well the neighbourhood prices a shape the sweep did not measure. One row per kernel:
    framework, kind, shape, seconds, priced, error_pct (signed, of the measurement)."""
    rows = []
    for (framework, kind), group in table.groupby(["framework", "kind"]):
        if len(group) < 2:
            continue
        for i in range(len(group)):
            rest = group.drop(group.index[i])
            held = group.iloc[i]
            kernel = Kernel(kind, tuple(int(v) for v in held["shape"]))
            # a duplicate of the held-out shape would be priced by its own measurement
            rest = rest[rest["shape"].map(lambda s, held=kernel.shape: tuple(s) != held)]
            if rest.empty:
                continue
            priced = KernelPrices(neighbours).fit(rest).price(framework, [kernel])[0]
            rows.append(
                {
                    "framework": framework,
                    "kind": kind,
                    "shape": kernel.shape,
                    "seconds": float(held.seconds),
                    "priced": float(priced),
                    "error_pct": 100.0 * (priced - held.seconds) / held.seconds,
                }
            )
    return pd.DataFrame(rows)
