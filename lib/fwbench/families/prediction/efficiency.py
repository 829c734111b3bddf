"""Each op category's efficiency, per setting and CPU, from the per-op profiles: the time the
category's ops would take at the roofline over the time the profile measured for them.

The roofline time of a block of ops is max(FLOPs / peak, bytes written / copy bandwidth), from
the model's shapes (``features``) and the ceilings ``02_calibrate`` measured (``dataset``); the
bytes are the ops' outputs only, so the roofline is a floor and an efficiency above 1 is a
measurement below the floor: it is clipped to 1, the bound NeuSight puts on each kernel. A
block is one profile category, or a kernel that fused several (XLA's convolution with its
normalisation and activation): the fused time is shared among its parts in proportion to their
roofline times, so each part carries the block's efficiency.

A category's efficiency in a setting is the sum of its roofline times over the sum of its
measured times, over every profiled row of that setting, CPU, precision and thread count: a
ratio of sums, so the rows that spend the time decide it. A CPU or thread count nobody profiled
takes the setting's efficiencies over every CPU (``ANY_CPU``): a share of the ceilings may carry
where a time cannot, and the row's own ceilings price it. Pricing a model nobody profiled is
then the sum over its categories of roofline time over efficiency, plus the framework's time
outside every op: per op an eager forward dispatches in eager mode, per call in a compiled one
(one program launched, whatever it holds): ``per_op_seconds``.

JAX profiles recorded before XLA's fusions were read op by op name a fusion by its first category
alone, whatever it holds; they are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.families.inference.op_categories import fused_parts
from fwbench.families.prediction import costs, dataset, predictor
from fwbench.models.lineage import lineage
from fwbench.results import db as fw_db
from fwbench.vocab import OP_CATEGORIES, OVERHEAD

# each profile beside its cell's unprofiled latency at the same batch size: the profiler's own
# cost is taken out by scaling the profile to it
_PROFILE_SQL = """
select p.model, p.framework, p.mode, p.precision, p.batch_size, p.threads, p.device,
       p.device_name, p.run_id, p.trial, p.value, p.extra, l.value as latency_ms
from measurements p
left join measurements l
  on l.campaign = p.campaign and l.run_id = p.run_id and l.notebook = p.notebook
 and l.cell = p.cell and coalesce(l.trial, 0) = coalesce(p.trial, 0)
 and l.batch_size = p.batch_size and l.family = 'inference' and l.metric = 'latency_p50_ms'
 and l.status = 'ok'
where p.family = 'profile' and p.metric = 'op_time_ms' and p.status = 'ok' and p.value >= 0
"""
SETTING = ["framework", "mode", "device", "device_name", "precision", "threads"]
CONFIG = [*SETTING, "model", "batch_size", "image_size"]
OVERHEAD_TERM = "outside every op"
# the efficiencies of every CPU and thread count together, for a CPU or thread count nobody profiled
ANY_CPU = "any CPU"
# modes whose time outside the ops grows with the ops dispatched; a compiled mode's is per call
_EAGER_MODES = ("eager",)


def profile_rows(con) -> pd.DataFrame:
    """Per configuration and profile category, ms per call (the mean over its trials and runs),
    scaled to the cell's unprofiled latency where the profile ran slower; profiles of unnamed JAX
    fusions left out."""
    frame = dataset.trial_rows(con, _PROFILE_SQL)
    columns = [*CONFIG, "category", "ms"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    named = [
        fw != "jax" or mode != "jit" or bool(e.get("fusions_recorded"))
        for fw, mode, e in zip(frame.framework, frame["mode"], frame.extra, strict=True)
    ]
    frame = frame[np.array(named, bool)]
    wall = np.array([e.get("wall_ms") or np.nan for e in frame.extra], float)
    # a profiled call runs slower than an unprofiled one (the profiler's own cost, most of it
    # per op in eager mode); each category is scaled by the cell's unprofiled latency over the
    # profiled wall time, never up
    scale = np.fmin(1.0, frame.latency_ms.to_numpy(float) / wall)
    frame = frame.assign(
        category=[e.get("category") for e in frame.extra],
        value=frame.value * np.where(np.isfinite(scale), scale, 1.0),
    )
    grouped = frame.groupby([*CONFIG, "category"], sort=True)
    return grouped.agg(ms=("value", "mean")).reset_index()[columns]


def category_times(profiles: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and op category: its roofline seconds and measured seconds (a
    fused block's time shared by roofline), and per configuration the framework's seconds
    outside every op with its op count (category ``OVERHEAD_TERM``). ``profiles`` are
    ``profile_rows`` joined with the features and ceilings (``dataset.with_features``)."""
    columns = [*CONFIG, "category", "roofline_s", "measured_s", "op_count"]
    if profiles.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    roofs = costs.category_roofline_s(profiles).to_dict("records")
    for row, roof_of in zip(profiles.to_dict("records"), roofs, strict=True):
        key = {c: row[c] for c in CONFIG} | {"op_count": row["op_count"]}
        seconds = row["ms"] / 1e3
        if row["category"] == OVERHEAD:
            rows.append(
                {**key, "category": OVERHEAD_TERM, "roofline_s": 0.0, "measured_s": seconds}
            )
            continue
        parts = tuple(p for p in fused_parts(row["category"]) if p in OP_CATEGORIES)
        roof = np.array([roof_of[p] for p in parts])
        if not len(parts) or roof.sum() <= 0:
            continue  # time with no FLOPs or bytes to price it by ("other")
        for part, part_roof in zip(parts, roof, strict=True):
            measured = seconds * part_roof / roof.sum()
            rows.append({**key, "category": part, "roofline_s": part_roof, "measured_s": measured})
    out = pd.DataFrame(rows, columns=columns)
    return out.groupby([*CONFIG, "category"], sort=True, as_index=False).agg(
        roofline_s=("roofline_s", "sum"),
        measured_s=("measured_s", "sum"),
        op_count=("op_count", "max"),
    )


def _per(mode: str) -> str:
    return "op" if mode in _EAGER_MODES else "call"


def _pooled(times: pd.DataFrame) -> pd.DataFrame:
    """``times`` with every CPU and thread count as one (``ANY_CPU``, threads 0): a share of the
    ceilings, unlike a time, may carry to a CPU nobody profiled, whose own ceilings price it."""
    cpu = times.device == "cpu"
    return times[cpu].assign(device_name=ANY_CPU, threads=0)


def efficiencies(times: pd.DataFrame) -> pd.DataFrame:
    """Per setting and op category: the efficiency (sum of roofline over sum of measured
    seconds, at most 1), the rows and models behind it; and per setting the microseconds
    outside every op (``overhead_us``, under category ``OVERHEAD_TERM``), per op dispatched in
    an eager mode and per call in a compiled one (``per``)."""
    columns = [*SETTING, "category", "efficiency", "overhead_us", "per", "rows", "models"]
    if times.empty:
        return pd.DataFrame(columns=columns)
    out = []
    both = pd.concat([times, _pooled(times)], ignore_index=True)
    for key, group in both.groupby([*SETTING, "category"], sort=True):
        entry = dict(zip([*SETTING, "category"], key, strict=True))
        entry.update(rows=len(group), models=group.model.nunique())
        if entry["category"] == OVERHEAD_TERM:
            per = _per(entry["mode"])
            count = group.op_count.clip(lower=1).sum() if per == "op" else len(group)
            entry.update(efficiency=np.nan, overhead_us=group.measured_s.sum() / count * 1e6)
            entry["per"] = per
        else:
            measured = group.measured_s.sum()
            ratio = group.roofline_s.sum() / measured if measured > 0 else 1.0
            entry.update(efficiency=min(1.0, ratio), overhead_us=np.nan, per="")
        out.append(entry)
    return pd.DataFrame(out, columns=columns)


def per_op_seconds(frame: pd.DataFrame, table: pd.DataFrame) -> pd.Series:
    """Seconds per call of each row of ``frame`` (features and ceilings joined) from the
    efficiencies ``table`` of its setting: each category's roofline over its efficiency, plus the
    time outside every op (per op or per call, as ``efficiencies`` measured it). NaN where the
    setting has no efficiency for a category the row spends time on, or no overhead."""
    lookup = {(tuple(r[c] for c in SETTING), r["category"]): r for r in table.to_dict("records")}
    out = []
    roofline = costs.category_roofline_s(frame).to_numpy()
    for row, roofs in zip(frame.to_dict("records"), roofline, strict=True):
        setting = tuple(row[c] for c in SETTING)
        pooled = tuple({"device_name": ANY_CPU, "threads": 0}.get(c, row[c]) for c in SETTING)
        # this CPU and thread count's profiles where there are any, else every CPU's
        exact = any((setting, c) in lookup for c in (*OP_CATEGORIES, OVERHEAD_TERM))
        setting = setting if exact else pooled
        total = 0.0
        for category, roof in zip(OP_CATEGORIES, roofs, strict=True):
            if roof <= 0:
                continue
            found = lookup.get((setting, category))
            total += roof / found["efficiency"] if found else np.nan
        overhead = lookup.get((setting, OVERHEAD_TERM))
        if overhead is None:
            total = np.nan
        else:
            total += (
                overhead["overhead_us"] * 1e-6 * (row["op_count"] if overhead["per"] == "op" else 1)
            )
        out.append(total)
    return pd.Series(out, index=frame.index, dtype=float)


def build(db_path, exclude: set[str], progress=None) -> pd.DataFrame:
    """``category_times`` of every profile in the index at ``db_path`` whose hardware has measured
    ceilings, the models of ``exclude`` (the frozen test set's) left out."""
    con = fw_db.connect(db_path, read_only=True)
    try:
        profiles = profile_rows(con)
        ceiling = dataset.ceilings(con)
    finally:
        con.close()
    profiles = profiles[~profiles.model.isin(sorted(exclude))]
    if profiles.empty:
        return category_times(profiles)
    feats = dataset.feature_rows(profiles, progress)
    return category_times(dataset.with_features(profiles, feats, ceiling))


def lineage_holdout(times: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The per-op sum scored as the predictor's lineage hold-out scores it: each row of ``table``
    (measured seconds, features and ceilings) priced by efficiencies learned from the profiles
    of the other lineages only, under ``table``'s index; rows whose setting lacks an efficiency
    they need are left out."""
    columns = [*dataset.CONFIG, "lineage", "seconds", "per_op_s"]
    if times.empty or table.empty:
        return pd.DataFrame(columns=columns)
    profiled, measured = times.model.map(lineage), table.model.map(lineage)
    parts = []
    for held in sorted(measured.unique()):
        rows = table[measured == held]
        priced = per_op_seconds(rows, efficiencies(times[profiled != held]))
        parts.append(rows.assign(lineage=held, per_op_s=priced)[columns])
    out = pd.concat(parts)
    return out[out.per_op_s.notna()]


def holdout_table(per_op: pd.DataFrame, held: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per setting (and ``all``): the per-op sum's MAPE, median error and shares within ±15% and
    ±20% on the lineage hold-out (``lineage_holdout``), beside the predictor's own lineage
    hold-out on the same rows (``held``, from ``predictor.evaluate`` on the same table, matched
    by index: the table holds a configuration once per run): its fitted cost sum before the
    correction and its prediction."""
    keyed = per_op.assign(setting=costs.setting_of(per_op))
    if held is not None and len(held):
        keyed = keyed.join(held[["cost", "predicted"]])
    out = []
    for setting, group in [("all", keyed), *keyed.groupby("setting", sort=True)]:
        error = predictor.abs_error_pct(group.seconds, group.per_op_s)
        entry = {
            "setting": setting,
            "rows": len(group),
            "models": group.model.nunique(),
            "per_op_mape_pct": float(error.mean()),
            "per_op_median_pct": float(error.median()),
            "per_op_within_15pct": float((error <= 15).mean() * 100),
            "per_op_within_20pct": float((error <= 20).mean() * 100),
        }
        for column in ("cost", "predicted"):
            if column in group:
                miss = predictor.abs_error_pct(group.seconds, group[column])
                entry[f"{column}_mape_pct"] = float(miss.mean())
        out.append(entry)
    return pd.DataFrame(out)
