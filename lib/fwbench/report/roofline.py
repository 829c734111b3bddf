"""Roofline placement, bound classification and MFU from measured ceilings (never datasheet peaks).

A device's ceilings are the best 02_calibrate measured on it through either framework: peak matmul
FLOP/s per precision and copy bandwidth. A configuration sits at arithmetic intensity
I = FLOPs ÷ bytes moved per image (XLA's cost analysis) and achieved FLOP/s = FLOPs per image ×
median throughput. MFU divides achieved FLOP/s by the peak measured through the same framework.

The ceilings come from the analysed run's own calibration; for a framework, device and precision
the run did not calibrate, from the latest run in the index that did, and every table says which.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.report.tables import CONFIG, SERIES, metric_table, series_rows
from fwbench.vocab import framework_label, model_label, setting_words

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


CEILING_METRICS = ("peak_matmul_tflops", "copy_bandwidth_gbs")
# A peak is measured per framework, device, precision and (on a CPU) thread count (DESIGN.md
# section 5): one core's peak is not two cores'.
CEILING_KEY = ["framework", "device_name", "precision", "threads"]
CEILING_COLUMNS = [
    "device_name",
    "precision",
    "threads",
    "peak_tflops",
    "peak_framework",
    "peak_run_id",
    "bandwidth_gbs",
    "bandwidth_framework",
    "bandwidth_run_id",
    "ridge_flop_per_byte",
]
# One MFU per configuration and family; ``variant`` tells torch's channels_last apart.
MFU_KEY = [
    "family",
    "model",
    "framework",
    "mode",
    "variant",
    "device",
    "device_name",
    "precision",
    "threads",
]
MFU_COLUMNS = [
    *MFU_KEY,
    "batch_size",
    "achieved_tflops",
    "peak_tflops",
    "mfu",
    "n_trials",
    "ceiling_run_id",
    "ceiling_campaign",
    "ceiling_cell",
    "channels_last",
]


def _ceiling_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[(frame.family == "calibration") & (frame.status == "ok") & frame.value.notna()]
    return rows[rows.metric.isin(CEILING_METRICS)]


def _achieved_rows(meas: pd.DataFrame) -> pd.DataFrame:
    rows = meas[(meas.metric == "achieved_tflops") & (meas.status == "ok") & meas.value.notna()]
    return rows[rows.family != "calibration"]


def calibration_with_fallback(meas: pd.DataFrame, index_calibration: pd.DataFrame) -> pd.DataFrame:
    """The run's own ceiling records, plus, for each framework, device and precision it measured
    FLOP/s on but did not calibrate, the ceilings of the latest run in the index that did.

    ``index_calibration`` is ``analysis.load_calibration``: ceilings of every run in the index.
    """
    own = _ceiling_rows(meas)
    calibrated = set(map(tuple, own[own.metric == "peak_matmul_tflops"][CEILING_KEY].values))
    needed = set(map(tuple, _achieved_rows(meas)[CEILING_KEY].drop_duplicates().values))
    parts = [own]
    index = _ceiling_rows(index_calibration)
    for key in sorted(needed - calibrated):
        same = index[(index[CEILING_KEY] == pd.Series(key, index=CEILING_KEY)).all(axis=1)]
        peaks = same[same.metric == "peak_matmul_tflops"]
        if peaks.empty:
            continue
        # run ids are UTC start times, so the largest is the latest run
        latest = peaks.sort_values(["run_id", "campaign"]).iloc[-1]
        parts.append(same[(same.run_id == latest.run_id) & (same.campaign == latest.campaign)])
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else own


def device_ceilings(calibration: pd.DataFrame) -> pd.DataFrame:
    """Per device and precision: the best measured matmul TFLOP/s and copy bandwidth, and the run
    each came from. ``calibration`` holds calibration records (a run's measurements, or
    ``calibration_with_fallback``); with none, the table is empty but has all its columns."""
    cal = _ceiling_rows(calibration)
    peak = cal[cal.metric == "peak_matmul_tflops"]
    bandwidth = cal[cal.metric == "copy_bandwidth_gbs"]
    if peak.empty or bandwidth.empty:
        return pd.DataFrame(columns=CEILING_COLUMNS)
    best_peak = (
        peak.sort_values(["value", "framework"], ascending=[False, True])
        .groupby(["device_name", "precision", "threads"], sort=True)
        .head(1)[["device_name", "precision", "threads", "value", "framework", "run_id"]]
        .rename(
            columns={"value": "peak_tflops", "framework": "peak_framework", "run_id": "peak_run_id"}
        )
    )
    best_bw = (
        bandwidth.sort_values(["value", "framework"], ascending=[False, True])
        .groupby(["device_name", "threads"], sort=True)
        .head(1)[["device_name", "threads", "value", "framework", "run_id"]]
        .rename(
            columns={
                "value": "bandwidth_gbs",
                "framework": "bandwidth_framework",
                "run_id": "bandwidth_run_id",
            }
        )
    )
    table = best_peak.merge(best_bw, on=["device_name", "threads"])
    table["ridge_flop_per_byte"] = table.peak_tflops * 1e12 / (table.bandwidth_gbs * 1e9)
    order = ["device_name", "precision", "threads"]
    return table[CEILING_COLUMNS].sort_values(order, ignore_index=True)


def mfu_table(meas: pd.DataFrame, calibration: pd.DataFrame) -> pd.DataFrame:
    """MFU of every configuration of any family with achieved-FLOP/s records (inference, training).

    MFU = median achieved TFLOP/s over trials ÷ the best peak matmul TFLOP/s that 02_calibrate
    measured through the same framework on the same device at the same precision, in
    ``calibration`` (see ``calibration_with_fallback``). Without such a peak, MFU is NaN and the
    ceiling columns are empty.
    """
    achieved = _achieved_rows(meas)
    if achieved.empty:
        return pd.DataFrame(columns=MFU_COLUMNS)
    achieved = achieved.assign(channels_last=[bool(e.get("channels_last")) for e in achieved.extra])
    table = (
        achieved.groupby([*MFU_KEY, "batch_size"], sort=True, dropna=False)
        .agg(
            achieved_tflops=("value", "median"),
            n_trials=("value", "size"),
            channels_last=("channels_last", "any"),
        )
        .reset_index()
    )
    cal = _ceiling_rows(calibration)
    peaks = (
        cal[cal.metric == "peak_matmul_tflops"]
        .sort_values(["value", "run_id"], ascending=[False, False])
        .groupby(CEILING_KEY, sort=True)
        .head(1)[[*CEILING_KEY, "value", "run_id", "campaign", "cell"]]
        .rename(
            columns={
                "value": "peak_tflops",
                "run_id": "ceiling_run_id",
                "campaign": "ceiling_campaign",
                "cell": "ceiling_cell",
            }
        )
    )
    table = table.merge(peaks, on=CEILING_KEY, how="left")
    table["mfu"] = table.achieved_tflops / table.peak_tflops
    return table[MFU_COLUMNS].sort_values([*MFU_KEY, "batch_size"], ignore_index=True)


def mfu_notes(mfu: pd.DataFrame, run_id: str) -> list[str]:
    """Why an MFU is missing, and which run each borrowed ceiling came from."""
    notes = []
    keys = mfu[CEILING_KEY + ["ceiling_run_id", "ceiling_campaign"]].drop_duplicates()
    for r in keys.sort_values(CEILING_KEY).itertuples():
        what = f"{r.framework} on {r.device_name} at {setting_words(r.precision, r.threads)}"
        if pd.isna(r.ceiling_run_id):
            notes.append(
                f"No MFU for {what}: neither this run nor any run in the index calibrated it "
                "(02_calibrate measures the peak matmul FLOP/s MFU divides by)."
            )
        elif r.ceiling_run_id != run_id:
            notes.append(
                f"This run did not calibrate {what}; its MFU divides by the peak that 02_calibrate "
                f"measured in run {r.ceiling_run_id} of campaign {r.ceiling_campaign}, the latest "
                "in the index."
            )
    above = mfu[mfu.mfu > 1].sort_values(["model", "framework", "batch_size"])
    for r in above.itertuples():
        # kept as measured rather than capped: the ceiling, not the model, is what is wrong
        notes.append(
            f"MFU above 1 ({r.mfu:.2f}) for {r.model} {r.framework} {r.variant} at batch "
            f"{r.batch_size} in {setting_words(r.precision, r.threads)}: the model reached {r.achieved_tflops:.3f} TFLOP/s, more than the "
            f"{r.peak_tflops:.3f} that 02_calibrate's square matmuls reached, so that ceiling "
            "understates this framework's peak on this device."
        )
    return notes


def add_mfu_records(rec, mfu: pd.DataFrame) -> None:
    """One ``mfu`` record per configuration, with the family and descriptive columns of the rows
    it was computed from, so that a query of the index finds it beside them."""
    for r in mfu.itertuples():
        found = not pd.isna(r.peak_tflops)
        extra = {
            "achieved_tflops": float(r.achieved_tflops),
            "peak_matmul_tflops": float(r.peak_tflops) if found else None,
            "ceiling_run_id": r.ceiling_run_id if found else None,
            "ceiling_campaign": r.ceiling_campaign if found else None,
            "ceiling_cell": r.ceiling_cell if found else None,
            "channels_last": bool(r.channels_last),
        }
        if not found:
            extra["reason"] = (
                f"no peak matmul TFLOP/s of {r.framework} on {r.device_name} at "
                f"{setting_words(r.precision, r.threads)} in this run or in the index"
            )
        rec.add(
            "mfu",
            r.mfu if found else None,
            "ratio",
            n=int(r.n_trials),
            extra=extra,
            family=r.family,
            model=r.model or None,
            framework=r.framework or None,
            mode=r.mode or None,
            device=r.device or None,
            device_name=r.device_name or None,
            precision=r.precision or None,
            threads=int(r.threads) or None,
            batch_size=None if pd.isna(r.batch_size) else int(r.batch_size),
        )


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


def roofline_points(meas: pd.DataFrame, calibration: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each inference configuration's achieved TFLOP/s, MFU, intensity and bound classification.

    ``calibration``: the ceiling records to place them against (default: the run's own).
    """
    calibration = meas if calibration is None else calibration
    table = metric_table(meas, ["achieved_tflops"]).dropna(subset=["achieved_tflops"])
    if table.empty:
        return table
    mfu = mfu_table(meas, calibration)
    mfu = mfu[mfu.family == "inference"][CONFIG + SERIES + ["mfu"]]
    table = table.merge(mfu, on=CONFIG + SERIES, how="left")
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
    ceilings = device_ceilings(calibration)
    table = table.merge(ceilings, on=["device_name", "precision", "threads"], how="left")
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
    """Points along each device/precision/threads roofline spanning ``intensities`` (for
    plotting)."""
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
                    "threads": c.threads,
                    "ceiling": setting_words(c.precision, c.threads),
                    "intensity": float(i),
                    "bound_tflops": float(bound_tflops(i, c.peak_tflops, c.bandwidth_gbs)),
                }
            )
    return pd.DataFrame(rows)


# The two dense models of the zoo: their FLOPs are convolutions and matmuls, which can run near a
# roofline bound, so the share of it says how much a framework leaves on the table. The depthwise
# networks sit far below any such bound by design; their share would say little.
BOUND_SHARE_MODELS = ("resnet50", "vit_b_16")
# A best mode below this share of its bound says what holds it back.
HELD_BACK_SHARE = 0.7
# The categories that hold a dense model's FLOPs: time elsewhere is time the bound does not pay for.
FLOP_CATEGORIES = ("convolution", "depthwise/grouped convolution", "matmul/linear", "attention")
# A held-back sentence names other categories until they hold this share of the time outside the
# FLOP categories.
NAMED_SHARE = 0.8


def bound_share_sentences(points: pd.DataFrame, matrix: pd.DataFrame, ops: pd.DataFrame) -> list:
    """For ResNet-50 and ViT-B/16 (``BOUND_SHARE_MODELS``), each framework's best mode's share of
    its roofline bound, one sentence per configuration and framework; below ``HELD_BACK_SHARE``,
    what holds it back, from its per-op breakdown ``ops`` (``why.breakdown``).

    The share factors into the fraction f of the profiled time spent in the categories that hold
    the FLOPs (``FLOP_CATEGORIES``) and the share those ops reach while they run (share ÷ f):
    the first says how much time goes elsewhere, the second how far the FLOP ops themselves fall
    short of the bound.
    """
    if points.empty or matrix.empty or "share_of_bound" not in points:
        return []
    best = matrix[(matrix.comparison == "best") & matrix.model.isin(BOUND_SHARE_MODELS)]
    lines = []
    for r in best.sort_values([c for c in CONFIG if c in best]).itertuples():
        key = {c: getattr(r, c) for c in CONFIG}
        for framework in ("torch", "jax"):
            variant = getattr(r, f"{framework}_variant")
            point = series_rows(points, key, framework, variant)
            if point.empty or pd.isna(point.share_of_bound.iloc[0]):
                continue
            p = point.iloc[0]
            sentence = _share_sentence(p, framework, variant)
            if p.share_of_bound < HELD_BACK_SHARE:
                sentence += " " + _held_back(p, series_rows(ops, key, framework, variant))
            lines.append(sentence)
    return lines


def _share_sentence(p, framework: str, variant: str) -> str:
    where = (
        f"{model_label(p.model)} at batch {int(p.batch_size)} in "
        f"{setting_words(p.precision, p.threads)} on {p.device_name}"
    )
    return (
        f"{framework_label(framework)}'s best mode on {where}, {variant}, reaches "
        f"{p.share_of_bound:.2f} of its roofline bound ({p.achieved_tflops:.3f} of "
        f"{p.bound_tflops:.3f} TFLOP/s, {p.regime})."
    )


def _held_back(p, ops: pd.DataFrame) -> str:
    if ops.empty:
        return "No per-op profile of it was recorded, so nothing here says what holds it back."
    total = float(ops.ms.sum())
    flop_ms = float(ops[ops.category.isin(FLOP_CATEGORIES)].ms.sum())
    if total <= 0 or flop_ms <= 0:
        return "Its profile holds no convolution or matmul time, so it cannot say more."
    fraction = flop_ms / total
    others = ops[~ops.category.isin(FLOP_CATEGORIES)].sort_values("ms", ascending=False)
    others = others[others.ms > 0]
    outside = float(others.ms.sum())
    reached = others.ms.cumsum().shift(fill_value=0.0) < NAMED_SHARE * outside
    named = ", ".join(
        f"{o.category} {o.ms:.2f} ms ({o.ms / total:.0%})" for o in others[reached].itertuples()
    )
    text = (
        f"What holds it back, from its profile ({total:.2f} ms per call): its convolution and "
        f"matmul ops take {fraction:.0%} of the time and, while they run, reach about "
        f"{p.share_of_bound / fraction:.2f} of the bound"
    )
    if named:
        text += f"; the other {1 - fraction:.0%} goes to {named}"
    return text + "."
