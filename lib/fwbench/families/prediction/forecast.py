"""One configuration's forecast, as ``fwbench predict`` prints it: throughput with its interval, p50
latency and the model's own bytes, from predictors fitted on the training table that the latest
21_prediction run left beside its executed notebook (else one built from the index), placed
against this machine's measured ceilings; and the measurement, where one exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fwbench.families.prediction import dataset, predictor
from fwbench.families.prediction import features as fw_features

TABLE_NAME = "training_table.csv"
TABLE_GLOB = f"prediction/*/21_prediction/{TABLE_NAME}"
# columns that hold per-trial dicts in memory and cannot round-trip a CSV
_NOT_SAVED = ("trial_img_s",)


@dataclass
class Request:
    model: str
    framework: str
    mode: str
    batch_size: int
    precision: str
    threads: int
    device: str
    device_name: str
    image_size: int


def save_table(table: pd.DataFrame, folder: Path) -> Path:
    path = Path(folder) / TABLE_NAME
    table.drop(columns=[c for c in _NOT_SAVED if c in table]).to_csv(path, index=False)
    return path


def latest_table(executed: Path) -> Path | None:
    """The training table of the newest 21_prediction run under ``executed`` (run ids sort by
    time), or None."""
    found = sorted(Path(executed).glob(TABLE_GLOB))
    return found[-1] if found else None


def load_table(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)


def request_row(request: Request, ceiling: pd.Series) -> pd.DataFrame:
    """The request's features (from shapes alone, on the meta device) with the machine's ceilings,
    in the training table's columns."""
    found = fw_features.torch_features(request.model, request.batch_size, request.image_size)
    config = pd.DataFrame([{column: getattr(request, column) for column in dataset.CONFIG}])
    ceilings = pd.DataFrame([ceiling])[
        ["device", "device_name", "precision", "threads", "peak_tflops", "bandwidth_gbs"]
    ]
    return dataset.with_features(config, pd.DataFrame([found.row()]), ceilings)


def fit_pair(table: pd.DataFrame, seed: int = 0) -> tuple[predictor.Predictor, object]:
    """A predictor of seconds per call (from throughput) and one of p50 latency, where the table
    has latencies (else None)."""
    timing = predictor.fit(table, seed=seed)
    latency_rows = table[table.latency_s.notna()] if "latency_s" in table else table.iloc[:0]
    latency = None
    if latency_rows.model.nunique() >= 2:
        latency = predictor.fit(latency_rows.assign(seconds=latency_rows.latency_s), seed=seed)
    return timing, latency


def forecast(table: pd.DataFrame, row: pd.DataFrame, *, seed: int = 0) -> dict:
    """The forecast for one request row (``request_row``): the keys ``fwbench predict --json``
    prints, without ``measured``."""
    timing, latency = fit_pair(table, seed=seed)
    seconds = timing.predict(row).iloc[0]
    batch = float(row.batch_size.iloc[0])
    latency_ms = float(latency.predict(row).seconds.iloc[0] * 1000) if latency else float("nan")
    return {
        "throughput_img_s": batch / seconds.seconds,
        # a longer call is a lower throughput: the interval's ends swap
        "interval": {"low": batch / seconds.high, "high": batch / seconds.low},
        "latency_ms": None if math.isnan(latency_ms) else latency_ms,
        "peak_mem_bytes": int(row.model_peak_bytes.iloc[0]),
        "coverage": predictor.COVERAGE,
        "trained_on": int(len(table)),
    }


def measured_throughput(measured: pd.DataFrame, request: Request) -> dict | None:
    """The newest run's median throughput of exactly this configuration on this machine."""
    if measured.empty:
        return None
    mask = pd.Series(True, index=measured.index)
    for column in ("model", "framework", "mode", "precision", "batch_size", "threads"):
        mask &= measured[column] == getattr(request, column)
    mask &= measured.device_name == request.device_name
    mask &= measured.image_size == request.image_size
    rows = measured[mask].sort_values("run_id")
    if rows.empty:
        return None
    last = rows.iloc[-1]
    return {
        "throughput_img_s": float(last.img_s),
        "campaign": last.campaign,
        "run_id": last.run_id,
        "trials": int(last.n_trials),
    }
