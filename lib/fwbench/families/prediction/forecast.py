"""One configuration's forecast, as ``fwbench predict`` prints it: throughput with its interval, p50
latency and the model's own bytes, from predictors fitted on the training table that the latest
21_prediction run left beside its executed notebook (else one built from the index), placed
against this machine's measured ceilings; and the measurement, where one exists.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fwbench.families.prediction import dataset, predictor
from fwbench.families.prediction import features as fw_features

TABLE_NAME = "training_table.csv"
_TABLE_GLOB = f"prediction/*/21_prediction/{TABLE_NAME}"
# columns that hold per-trial dicts in memory: saved as JSON, read back as dicts
_AS_JSON = ("trial_img_s",)
TARGETS = ("seconds", "latency_s", "latency_p95_s")


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
    encoded = {c: table[c].map(json.dumps) for c in _AS_JSON if c in table}
    table.assign(**encoded).to_csv(path, index=False)
    return path


def latest_table(executed: Path) -> Path | None:
    """The training table of the newest 21_prediction run under ``executed`` (run ids sort by
    time), or None."""
    found = sorted(Path(executed).glob(_TABLE_GLOB))
    return found[-1] if found else None


def load_table(path: Path) -> pd.DataFrame:
    """A saved training table, its per-trial columns as dicts of trial number to value (a
    table saved before they were kept has none)."""
    table = pd.read_csv(path)
    for column in (c for c in _AS_JSON if c in table):
        table[column] = table[column].map(
            lambda text: (
                {int(k): v for k, v in json.loads(text).items()} if isinstance(text, str) else {}
            )
        )
    return table


def training_table(
    executed: Path, db_path: Path, exclude: set[str], progress=None
) -> tuple[pd.DataFrame, str]:
    """The newest 21_prediction run's table under ``executed``, else one built from the index
    at ``db_path`` (slower: every measured model's features) without the models of ``exclude``;
    and where it came from."""
    saved = latest_table(executed)
    if saved is not None:
        return load_table(saved), str(saved)
    return dataset.build(db_path, exclude, progress=progress)[0], str(db_path)


def request_row(request: Request, ceiling: pd.Series) -> pd.DataFrame:
    """The request's features (from shapes alone, on the meta device) with the machine's ceilings,
    in the training table's columns."""
    found = fw_features.torch_features(request.model, request.batch_size, request.image_size)
    config = pd.DataFrame([{column: getattr(request, column) for column in dataset.CONFIG}])
    ceilings = pd.DataFrame([ceiling])[
        ["device", "device_name", "precision", "threads", "peak_tflops", "bandwidth_gbs"]
    ]
    return dataset.with_features(config, pd.DataFrame([found.row()]), ceilings)


def fit_targets(table: pd.DataFrame, seed: int = 0) -> dict:
    """One predictor per target (``TARGETS``: seconds per call from throughput, p50 and p95
    latency), each fitted on the rows that measured it; None where fewer than two models did."""
    fitted = {}
    for column in TARGETS:
        rows = table[table[column].notna()] if column in table else table.iloc[:0]
        enough = rows.model.nunique() >= 2
        fitted[column] = (
            predictor.fit(rows.assign(seconds=rows[column]), seed=seed) if enough else None
        )
    return fitted


def predict_rows(fitted: dict, rows: pd.DataFrame) -> pd.DataFrame:
    """Throughput with its interval, p50 and p95 latency (ms) and the model's bytes for request
    rows (``request_row``'s columns), indexed like ``rows``."""
    timing = fitted["seconds"].predict(rows)
    batch = rows.batch_size.astype(float)
    out = pd.DataFrame(
        {
            "throughput_img_s": batch / timing.seconds,
            # a longer call is a lower throughput: the interval's ends swap
            "throughput_low": batch / timing.high,
            "throughput_high": batch / timing.low,
            "peak_mem_bytes": rows.model_peak_bytes.astype("int64"),
        },
        index=rows.index,
    )
    for column, name in (("latency_s", "latency_ms"), ("latency_p95_s", "latency_p95_ms")):
        model = fitted.get(column)
        out[name] = model.predict(rows).seconds * 1000 if model else float("nan")
    return out


def forecast(table: pd.DataFrame, row: pd.DataFrame, *, seed: int = 0) -> dict:
    """The forecast for one request row (``request_row``): the keys ``fwbench predict --json``
    prints, without ``measured``."""
    found = predict_rows(fit_targets(table, seed=seed), row).iloc[0]
    latency_ms = float(found.latency_ms)
    return {
        "throughput_img_s": float(found.throughput_img_s),
        "interval": {"low": float(found.throughput_low), "high": float(found.throughput_high)},
        "latency_ms": None if math.isnan(latency_ms) else latency_ms,
        "peak_mem_bytes": int(found.peak_mem_bytes),
        "coverage": predictor.COVERAGE,
        "trained_on": int(len(table)),
    }


def _same_configuration(measured: pd.DataFrame, request: Request) -> pd.Series:
    """Rows of this model and configuration on this machine, at any image size."""
    mask = pd.Series(True, index=measured.index)
    for column in ("model", "framework", "mode", "precision", "batch_size", "threads"):
        mask &= measured[column] == getattr(request, column)
    return mask & (measured.device_name == request.device_name)


def measured_sizes(measured: pd.DataFrame, request: Request) -> list[int]:
    """Image sizes other than the request's at which this configuration was measured here:
    ``fwbench predict`` builds a model at its own size (EfficientNetV2-S at 384 px) while
    10_inference builds every model at 224 px unless told, so a measurement can sit one flag
    away."""
    if measured.empty:
        return []
    rows = measured[_same_configuration(measured, request)]
    return sorted({int(s) for s in rows.image_size} - {int(request.image_size)})


def measured_throughput(measured: pd.DataFrame, request: Request) -> dict | None:
    """The newest run's median throughput of exactly this configuration on this machine."""
    if measured.empty:
        return None
    mask = _same_configuration(measured, request)
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
