"""Roofline placement, bound classification and MFU from measured ceilings (never datasheet peaks).

A device's ceiling at a precision and (on a CPU) thread count is the best that 02_calibrate
measured there through any framework: peak matmul FLOP/s and copy bandwidth. A configuration sits
at arithmetic intensity I = FLOPs ÷ bytes moved per image (XLA's cost analysis) and achieved
FLOP/s = FLOPs per image × median throughput. MFU divides achieved FLOP/s by the device's ceiling,
the same for both frameworks, so that a framework whose own matmul is slow on a device is not
flattered by dividing by its own shortfall. What it reaches of its own calibrated peak is a
separate number, its framework efficiency.

The ceilings come from the analysed run's own calibration; for a framework, device and precision
the run did not calibrate, from the latest run in the index that did, and every table says which.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.report.tables import CONFIG, SERIES, metric_table, series_rows
from fwbench.report.why import fused_parts
from fwbench.vocab import framework_label, model_label, setting_words

# Below this share of the roofline bound, time goes to something other than arithmetic or memory
# traffic (kernel launches, Python, synchronisation): the configuration is overhead-bound.
_OVERHEAD_FRACTION = 0.10
RULE = (
    "bound(I) = min(peak FLOP/s, bandwidth × I), with I = FLOPs ÷ bytes moved per image and the "
    "ceilings measured by 02_calibrate on the same device (best of both frameworks). A "
    f"configuration achieving less than {_OVERHEAD_FRACTION:.0%} of bound(I) is overhead-bound; "
    "otherwise it is memory-bound when I lies left of the ridge point (peak ÷ bandwidth) and "
    "compute-bound when it lies at or right of it. Where a configuration has no byte count of its "
    "own (PyTorch has no counterpart to XLA's cost analysis), the intensity of the JAX program for "
    "the same model, precision and batch size is used."
)


_CEILING_METRICS = ("peak_matmul_tflops", "copy_bandwidth_gbs")
# A peak is measured per framework, device, precision and (on a CPU) thread count (DESIGN.md
# section 5): one core's peak is not two cores'.
_CEILING_KEY = ["framework", "device_name", "precision", "threads"]
# A device's ceiling is one per device, precision and thread count, whichever framework reached it
_DEVICE_KEY = ["device_name", "precision", "threads"]
_CEILING_COLUMNS = [
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
_MFU_KEY = [
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
_MFU_COLUMNS = [
    *_MFU_KEY,
    "batch_size",
    "achieved_tflops",
    "device_peak_tflops",
    "device_peak_framework",
    "mfu",
    "framework_peak_tflops",
    "framework_efficiency",
    "n_trials",
    "ceiling_run_id",
    "ceiling_campaign",
    "ceiling_cell",
    "framework_ceiling_run_id",
    "framework_ceiling_campaign",
    "ceiling_shared",
    "channels_last",
]
# A framework whose own matmul peak is below this share of the device's ceiling runs a slow kernel
# path at that precision there (PyTorch's bf16 on a CPU without AVX-512 BF16 reached about 1% of
# JAX's); its MFU and any ratio against it at that precision say so.
SLOW_PATH_SHARE = 0.25


def _ceiling_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[(frame.family == "calibration") & (frame.status == "ok") & frame.value.notna()]
    return rows[rows.metric.isin(_CEILING_METRICS)]


def _achieved_rows(meas: pd.DataFrame) -> pd.DataFrame:
    rows = meas[(meas.metric == "achieved_tflops") & (meas.status == "ok") & meas.value.notna()]
    return rows[rows.family != "calibration"]


def calibration_with_fallback(meas: pd.DataFrame, index_calibration: pd.DataFrame) -> pd.DataFrame:
    """The run's own ceiling records, plus the ceilings of the latest run in the index that
    calibrated each framework, device, precision and thread count the run measured FLOP/s at but
    did not calibrate: every framework's, since a device's ceiling is the best of any of them.

    ``index_calibration`` is ``analysis.load_calibration``: ceilings of every run in the index.
    """
    own = _ceiling_rows(meas)
    calibrated = set(map(tuple, own[own.metric == "peak_matmul_tflops"][_CEILING_KEY].values))
    index = _ceiling_rows(index_calibration)
    devices = _achieved_rows(meas)[_DEVICE_KEY].drop_duplicates()
    frameworks = set(_achieved_rows(meas).framework) | set(index.framework)
    needed = {(f, *d) for d in map(tuple, devices.values) for f in frameworks}
    parts = [own]
    for key in sorted(needed - calibrated, key=str):
        same = index[(index[_CEILING_KEY] == pd.Series(key, index=_CEILING_KEY)).all(axis=1)]
        peaks = same[same.metric == "peak_matmul_tflops"]
        if peaks.empty:
            continue
        # run ids are UTC start times, so the largest is the latest run
        latest = peaks.sort_values(["run_id", "campaign"]).iloc[-1]
        parts.append(same[(same.run_id == latest.run_id) & (same.campaign == latest.campaign)])
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else own


def _framework_peaks(calibration: pd.DataFrame) -> pd.DataFrame:
    """Per framework, device, precision and thread count: the best peak matmul TFLOP/s
    02_calibrate measured (``framework_peak_tflops``) and where, and whether its cell ran on a
    shared machine (read low, then)."""
    cal = _ceiling_rows(calibration)
    peak = cal[cal.metric == "peak_matmul_tflops"]
    shared = peak["shared_machine"] if "shared_machine" in peak else pd.Series(False, peak.index)
    peak = peak.assign(shared=shared.fillna(False).astype(bool))
    columns = {
        "value": "framework_peak_tflops",
        "run_id": "framework_ceiling_run_id",
        "campaign": "ceiling_campaign",
        "cell": "ceiling_cell",
        "shared": "ceiling_shared",
    }
    return (
        peak.sort_values(["value", "run_id"], ascending=[False, False])
        .groupby(_CEILING_KEY, sort=True)
        .head(1)[[*_CEILING_KEY, *columns]]
        .rename(columns=columns)
        .reset_index(drop=True)
    )


def device_peaks(calibration: pd.DataFrame) -> pd.DataFrame:
    """The device's ceiling per device, precision and thread count: the best peak matmul TFLOP/s
    any framework reached there (``device_peak_tflops``), the framework that reached it and the
    run it was measured in. The predictor places its rows against the same rule
    (``families/prediction/dataset.ceilings``)."""
    peaks = _framework_peaks(calibration)
    best = (
        peaks.sort_values(["framework_peak_tflops", "framework"], ascending=[False, True])
        .groupby(_DEVICE_KEY, sort=True)
        .head(1)
    )
    return best.rename(
        columns={
            "framework": "device_peak_framework",
            "framework_peak_tflops": "device_peak_tflops",
            "framework_ceiling_run_id": "ceiling_run_id",
        }
    ).reset_index(drop=True)


def device_ceilings(calibration: pd.DataFrame) -> pd.DataFrame:
    """Per device and precision: the best measured matmul TFLOP/s and copy bandwidth, and the run
    each came from. ``calibration`` holds calibration records (a run's measurements, or
    ``calibration_with_fallback``); with none, the table is empty but has all its columns."""
    cal = _ceiling_rows(calibration)
    bandwidth = cal[cal.metric == "copy_bandwidth_gbs"]
    best_peak = device_peaks(calibration)
    if best_peak.empty or bandwidth.empty:
        return pd.DataFrame(columns=_CEILING_COLUMNS)
    best_peak = best_peak[[*_DEVICE_KEY, "device_peak_tflops", "device_peak_framework"]].assign(
        peak_run_id=best_peak.ceiling_run_id
    )
    best_peak = best_peak.rename(
        columns={"device_peak_tflops": "peak_tflops", "device_peak_framework": "peak_framework"}
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
    return table[_CEILING_COLUMNS].sort_values(_DEVICE_KEY, ignore_index=True)


def mfu_table(meas: pd.DataFrame, calibration: pd.DataFrame) -> pd.DataFrame:
    """MFU and framework efficiency of every configuration of any family with achieved-FLOP/s
    records (inference, training).

    MFU = median achieved TFLOP/s over trials ÷ the device's ceiling at that precision and thread
    count (``device_peaks``, from ``calibration``: see ``calibration_with_fallback``); framework
    efficiency = the same ÷ the framework's own calibrated peak there. Without a ceiling, each is
    NaN and its columns are empty.
    """
    achieved = _achieved_rows(meas)
    if achieved.empty:
        return pd.DataFrame(columns=_MFU_COLUMNS)
    achieved = achieved.assign(channels_last=[bool(e.get("channels_last")) for e in achieved.extra])
    table = (
        achieved.groupby([*_MFU_KEY, "batch_size"], sort=True, dropna=False)
        .agg(
            achieved_tflops=("value", "median"),
            n_trials=("value", "size"),
            channels_last=("channels_last", "any"),
        )
        .reset_index()
    )
    own = _framework_peaks(calibration)
    own = own[[*_CEILING_KEY, "framework_peak_tflops", "framework_ceiling_run_id"]].assign(
        framework_ceiling_campaign=own.ceiling_campaign
    )
    table = table.merge(own, on=_CEILING_KEY, how="left")
    device = device_peaks(calibration)
    table = table.merge(device, on=_DEVICE_KEY, how="left")
    table["mfu"] = table.achieved_tflops / table.device_peak_tflops
    table["framework_efficiency"] = table.achieved_tflops / table.framework_peak_tflops
    return table[_MFU_COLUMNS].sort_values([*_MFU_KEY, "batch_size"], ignore_index=True)


def _where(name: str, r) -> str:
    return f"{name} on {r.device_name} at {setting_words(r.precision, r.threads)}"


def mfu_notes(mfu: pd.DataFrame, run_id: str, cpu_isa: list[str] | None = None) -> list[str]:
    """What the MFU table cannot say by itself: a missing ceiling, a borrowed one, a framework
    whose own kernel path is slow at a precision (``SLOW_PATH_SHARE``), and the cause of every
    ratio above 1. ``cpu_isa``: the run's CPU's vector extensions (the run environment's
    ``cpu.isa``), which name why a CPU path is slow; None where the run did not record them."""
    notes = []
    per_framework = mfu.drop_duplicates(_CEILING_KEY).sort_values(_CEILING_KEY)
    for r in per_framework.itertuples():
        where = _where(r.framework, r)  # the record's own name, which queries of the index use
        if pd.isna(r.device_peak_tflops):
            notes.append(
                f"No MFU for {where}: neither this run nor any run in the index calibrated any "
                "framework there (02_calibrate measures the peak matmul FLOP/s MFU divides by)."
            )
        elif pd.isna(r.framework_peak_tflops):
            reached = framework_label(r.device_peak_framework)
            notes.append(
                f"No framework efficiency for {where}: no run calibrated it there; its MFU "
                f"divides by the device's ceiling, which {reached} reached."
            )
        elif r.framework_ceiling_run_id != run_id:
            device = r.device_peak_framework == r.framework
            also = ", and is the device's ceiling every framework's MFU there divides by"
            notes.append(
                f"This run did not calibrate {where}; its peak there, "
                f"{r.framework_peak_tflops:.3g} TFLOP/s, comes from run "
                f"{r.framework_ceiling_run_id} of campaign {r.framework_ceiling_campaign}, the "
                f"latest in the index{also if device else ''}."
            )
    for r in per_framework[per_framework.framework_peak_tflops.notna()].itertuples():
        share = r.framework_peak_tflops / r.device_peak_tflops
        if share < SLOW_PATH_SHARE:
            notes.append(_slow_path_note(r, share, cpu_isa))
    above = mfu[mfu.mfu > 1]
    for _, group in above.groupby(_DEVICE_KEY, sort=True):
        notes.append(_above_one_note(group))
    above = mfu[(mfu.framework_efficiency > 1) & ~(mfu.mfu > 1)]
    for _, group in above.groupby(_CEILING_KEY, sort=True):
        r = group.iloc[0]
        which = _configurations(group, "framework_efficiency")
        where = _where(framework_label(r.framework), r)
        notes.append(
            f"Framework efficiency above 1 for {where} ({which}): "
            f"its models ran faster than its own calibrated peak, {r.framework_peak_tflops:.3g} "
            "TFLOP/s, so the calibration's square matmul took a slower path than the models' ops "
            "and that peak is a lower bound of what the framework reaches there."
        )
    return notes


def _configurations(group: pd.DataFrame, column: str) -> str:
    return ", ".join(
        f"{r.model} {r.variant} {r.family} at batch {int(r.batch_size)}: {getattr(r, column):.2f}"
        for r in group.sort_values(["model", "variant", "family", "batch_size"]).itertuples()
    )


def _above_one_note(group: pd.DataFrame) -> str:
    r = group.iloc[0]
    where = f"{r.device_name} at {setting_words(r.precision, r.threads)}"
    cause = (
        "the calibration that set it ran on a shared machine, so it reads low"
        if bool(r.ceiling_shared)
        else "the calibration's matmul did not reach what the model did: the ceiling is a lower "
        "bound of this device's peak"
    )
    return (
        f"MFU above 1 on {where} ({_configurations(group, 'mfu')}): these models reached more "
        f"than the device's ceiling, {r.device_peak_tflops:.3g} TFLOP/s "
        f"({framework_label(r.device_peak_framework)}'s); {cause}. Kept as measured rather than "
        "capped: the ceiling, not the model, is what is wrong."
    )


# The instruction a CPU needs for a precision's matmuls to run natively (the run environment's
# ``cpu.isa`` names, from measure.device.ISA_FLAGS)
_NATIVE_ISA = {"bf16": ("avx512_bf16", "AVX-512 BF16"), "fp16": ("avx512_fp16", "AVX-512 FP16")}


def _slow_path_note(r, share: float, cpu_isa: list[str] | None) -> str:
    name = framework_label(r.framework)
    setting = setting_words(r.precision, r.threads)
    text = (
        f"{name}'s {r.precision} kernel path is slow on {r.device_name}: its peak matmul at "
        f"{setting}, {r.framework_peak_tflops:.3g} TFLOP/s, is {share:.1%} of the device's "
        f"ceiling there, {r.device_peak_tflops:.3g} ({framework_label(r.device_peak_framework)}'s)"
    )
    native = _NATIVE_ISA.get(r.precision)
    if r.device == "cpu" and native:
        flag, words = native
        if cpu_isa is None:
            text += f" (this run did not record whether the CPU has {words})"
        elif flag in cpu_isa:
            text += f", although the CPU has {words}"
        else:
            isa = ", ".join(cpu_isa) or "none of those recorded"
            text += f", on a CPU whose ISA list ({isa}) has no {words}"
    return (
        text + f". Its MFU at {r.precision} measures that path, and so does any JAX ÷ PyTorch "
        f"ratio at {r.precision} on this device: it says how slow the path is, not how the "
        "frameworks compare where both run a native kernel."
    )


def add_mfu_records(rec, mfu: pd.DataFrame) -> None:
    """One ``mfu`` record per configuration, with the family and descriptive columns of the rows
    it was computed from, so that a query of the index finds it beside them. ``extra`` carries
    the device's ceiling the value divides by (``device_peak_tflops``, which framework reached
    it and the run it came from) and the framework efficiency against its own peak. Records
    made before the device ceiling carry ``peak_matmul_tflops`` instead: the framework's own
    peak, which their value divided by."""
    for r in mfu.itertuples():
        found = not pd.isna(r.device_peak_tflops)
        own = not pd.isna(r.framework_peak_tflops)
        extra = {
            "achieved_tflops": float(r.achieved_tflops),
            "device_peak_tflops": float(r.device_peak_tflops) if found else None,
            "device_peak_framework": r.device_peak_framework if found else None,
            "ceiling_run_id": r.ceiling_run_id if found else None,
            "ceiling_campaign": r.ceiling_campaign if found else None,
            "ceiling_cell": r.ceiling_cell if found else None,
            "framework_peak_tflops": float(r.framework_peak_tflops) if own else None,
            "framework_efficiency": float(r.framework_efficiency) if own else None,
            "framework_ceiling_run_id": r.framework_ceiling_run_id if own else None,
            "channels_last": bool(r.channels_last),
        }
        if not found:
            extra["reason"] = (
                f"no peak matmul TFLOP/s of any framework on {r.device_name} at "
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
    if achieved_tflops < _OVERHEAD_FRACTION * bound:
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
    mfu = mfu[mfu.family == "inference"][CONFIG + SERIES + ["mfu", "framework_efficiency"]]
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
            "framework_efficiency",
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
_NAMED_SHARE = 0.8


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
    # a kernel XLA built around a convolution or dot counts whole, with what it fused after it
    in_flops = ops.category.map(lambda c: fused_parts(c)[0] in FLOP_CATEGORIES).astype(bool)
    flop_ms = float(ops[in_flops].ms.sum())
    if total <= 0 or flop_ms <= 0:
        return "Its profile holds no convolution or matmul time, so it cannot say more."
    fraction = flop_ms / total
    others = ops[~in_flops].sort_values("ms", ascending=False)
    others = others[others.ms > 0]
    outside = float(others.ms.sum())
    reached = others.ms.cumsum().shift(fill_value=0.0) < _NAMED_SHARE * outside
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
