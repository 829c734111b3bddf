"""Roofline placement and bound classification from measured ceilings (never datasheet peaks).

A device's ceilings are the best 02_calibrate measured on it through either framework: peak matmul
FLOP/s per precision and copy bandwidth. A configuration sits at arithmetic intensity
I = FLOPs ÷ bytes moved per image (XLA's cost analysis) and achieved FLOP/s = FLOPs per image ×
median throughput.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.analysis import CONFIG, SERIES, metric_table

# Below this share of the roofline bound, time goes to something other than arithmetic or memory
# traffic (kernel launches, Python, synchronisation): the configuration is overhead-bound.
OVERHEAD_FRACTION = 0.10
RULE = (
    "bound(I) = min(peak FLOP/s, bandwidth × I), with I = FLOPs ÷ bytes moved per image and the "
    "ceilings measured by 02_calibrate on the same device (best of both frameworks). A "
    f"configuration achieving less than {OVERHEAD_FRACTION:.0%} of bound(I) is overhead-bound; "
    "otherwise it is memory-bound when I lies left of the ridge point (peak ÷ bandwidth) and "
    "compute-bound when it lies at or right of it. Where a configuration has no byte count of its "
    "own (PyTorch has no counterpart to XLA's cost analysis), the intensity of the JAX program for "
    "the same model, precision and batch size is used."
)


def device_ceilings(meas: pd.DataFrame) -> pd.DataFrame:
    """Per device and precision: the best measured matmul TFLOP/s and copy bandwidth."""
    cal = meas[(meas.family == "calibration") & (meas.status == "ok") & meas.value.notna()]
    peak = cal[cal.metric == "peak_matmul_tflops"]
    bandwidth = cal[cal.metric == "copy_bandwidth_gbs"]
    if peak.empty or bandwidth.empty:
        return pd.DataFrame(columns=["device_name", "precision", "peak_tflops", "bandwidth_gbs"])
    best_peak = (
        peak.sort_values(["value", "framework"], ascending=[False, True])
        .groupby(["device_name", "precision"], sort=True)
        .head(1)[["device_name", "precision", "value", "framework"]]
        .rename(columns={"value": "peak_tflops", "framework": "peak_framework"})
    )
    best_bw = (
        bandwidth.sort_values(["value", "framework"], ascending=[False, True])
        .groupby("device_name", sort=True)
        .head(1)[["device_name", "value", "framework"]]
        .rename(columns={"value": "bandwidth_gbs", "framework": "bandwidth_framework"})
    )
    table = best_peak.merge(best_bw, on="device_name")
    table["ridge_flop_per_byte"] = table.peak_tflops * 1e12 / (table.bandwidth_gbs * 1e9)
    return table.sort_values(["device_name", "precision"], ignore_index=True)


def bound_tflops(intensity, peak_tflops, bandwidth_gbs):
    """The roofline: min(peak, bandwidth × intensity), in TFLOP/s."""
    return np.minimum(peak_tflops, bandwidth_gbs * 1e9 * np.asarray(intensity) / 1e12)


def classify(achieved_tflops: float, intensity: float, peak_tflops: float, bandwidth_gbs: float):
    bound = float(bound_tflops(intensity, peak_tflops, bandwidth_gbs))
    if achieved_tflops < OVERHEAD_FRACTION * bound:
        return "overhead-bound", bound
    ridge = peak_tflops * 1e12 / (bandwidth_gbs * 1e9)
    return ("memory-bound" if intensity < ridge else "compute-bound"), bound


def _flop_counts(meas: pd.DataFrame) -> pd.DataFrame:
    rows = meas[(meas.family == "inference") & (meas.metric == "achieved_tflops")]
    rows = rows[(rows.status == "ok") & rows.value.notna()]
    out = rows[CONFIG + SERIES].copy()
    out["flops_per_img"] = [e.get("flops_per_img") for e in rows.extra]
    out["bytes_per_img"] = [e.get("bytes_per_img") for e in rows.extra]
    return out.groupby(CONFIG + SERIES, sort=True).first().reset_index()


def roofline_points(meas: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's achieved TFLOP/s, MFU, intensity and bound classification."""
    table = metric_table(meas, ["achieved_tflops", "mfu"]).dropna(subset=["achieved_tflops"])
    if table.empty:
        return table
    table = table.merge(_flop_counts(meas), on=CONFIG + SERIES, how="left")
    own = table.bytes_per_img.notna() & (table.bytes_per_img > 0)
    jax_bytes = (
        table[own & (table.framework == "jax")]
        .groupby(["model", "device_name", "precision", "batch_size"])
        .bytes_per_img.median()
        .rename("jax_bytes_per_img")
        .reset_index()
    )
    table = table.merge(
        jax_bytes, on=["model", "device_name", "precision", "batch_size"], how="left"
    )
    table["intensity_source"] = np.where(own, "own (XLA cost analysis)", "JAX program's bytes")
    table["bytes_used"] = table.bytes_per_img.where(own, table.jax_bytes_per_img)
    table.loc[table.bytes_used.isna(), "intensity_source"] = "unknown"
    table["intensity"] = table.flops_per_img / table.bytes_used
    ceilings = device_ceilings(meas)
    table = table.merge(ceilings, on=["device_name", "precision"], how="left")
    regimes, bounds = [], []
    for r in table.itertuples():
        if any(pd.isna(v) for v in (r.intensity, r.peak_tflops, r.bandwidth_gbs)):
            regimes.append("unclassified")
            bounds.append(np.nan)
            continue
        regime, bound = classify(r.achieved_tflops, r.intensity, r.peak_tflops, r.bandwidth_gbs)
        regimes.append(regime)
        bounds.append(bound)
    table["bound_tflops"] = bounds
    table["share_of_bound"] = table.achieved_tflops / table.bound_tflops
    table["regime"] = regimes
    keep = (
        CONFIG
        + SERIES
        + [
            "achieved_tflops",
            "mfu",
            "flops_per_img",
            "bytes_used",
            "intensity",
            "intensity_source",
            "peak_tflops",
            "bandwidth_gbs",
            "ridge_flop_per_byte",
            "bound_tflops",
            "share_of_bound",
            "regime",
        ]
    )
    return table[keep].sort_values(CONFIG + SERIES, ignore_index=True)


def roofline_curve(ceilings: pd.DataFrame, intensities) -> pd.DataFrame:
    """Points along each device/precision roofline spanning ``intensities`` (for plotting)."""
    values = np.asarray([i for i in intensities if i and np.isfinite(i) and i > 0], dtype=float)
    rows = []
    for c in ceilings.itertuples():
        lo = min([c.ridge_flop_per_byte / 10, *values]) / 2
        hi = max([c.ridge_flop_per_byte * 10, *values]) * 2
        grid = np.unique(np.concatenate([np.geomspace(lo, hi, 40), [c.ridge_flop_per_byte]]))
        for i in grid:
            rows.append(
                {
                    "device_name": c.device_name,
                    "precision": c.precision,
                    "intensity": float(i),
                    "bound_tflops": float(bound_tflops(i, c.peak_tflops, c.bandwidth_gbs)),
                }
            )
    return pd.DataFrame(rows)
