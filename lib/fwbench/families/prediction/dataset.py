"""The predictor's data: every measured inference configuration in the index, with the features of
its model (``features``), the ceilings of its hardware (02_calibrate) and its measured seconds per
call, one row per configuration and run.

A configuration's time is the median over its trials of batch size / throughput (throughput's
blocks pipeline the calls, as a user's batch job does), and its latency the median of the trials'
p50. Trials that ran on a shared machine are left out when at least ``MIN_CLEAN_TRIALS`` clean
ones remain, the rule the report's comparisons follow; the training table (``build``) never takes
them, however few clean trials remain: a shared trial's time is another process's as much as the
model's (the meter saw torch's 2-thread throughput fall 40-100x beside niced work), and a
predictor learns its cost terms from every row alike, where a report at least lists the cell.

Only hardware that says what it is enters: a GPU by its name, a CPU by its name *with* family and
model. Records made before fwbench recorded those name only "AMD EPYC", which was a Zen 3 on some
days and a Zen 4 on others (1.5 times as fast), so a fit on them would learn two machines as one.
channels_last arms, graphs compiled for any batch size and JAX cells under an XLA option set other
than the default are left out too: the predictor's settings are each framework's modes as they
come (a tuning run's candidates would otherwise pool into their mode's configuration).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from fwbench.families.prediction import features as fw_features
from fwbench.measure import comparison
from fwbench.models import registry
from fwbench.results import db as fw_db

MIN_CLEAN_TRIALS = 3
# bytes per element the features (built in fp32) scale by
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "default": 4}
CONFIG = [
    "model",
    "framework",
    "mode",
    "precision",
    "batch_size",
    "threads",
    "device",
    "device_name",
    "image_size",
]
_IDENTIFIED_CPU = re.compile(r"\(family \d+, model \d+\)$")
_FEATURE_KEY = ["model", "batch_size", "image_size"]

_MEASURED_SQL = """
select m.campaign, m.run_id, m.notebook, m.cell, m.trial, m.model, m.framework, m.mode,
       m.precision, m.batch_size, m.threads, m.device, m.device_name, m.metric, m.value, m.extra,
       coalesce(c.shared_machine, false) as shared
from measurements m
left join cells c on c.campaign = m.campaign and c.run_id = m.run_id and c.notebook = m.notebook
     and c.cell = m.cell and coalesce(c.trial, 0) = coalesce(m.trial, 0)
where m.family = 'inference' and m.status = 'ok' and m.value > 0
  and m.metric in ('throughput_img_s', 'latency_p50_ms', 'latency_p95_ms', 'energy_j_per_img')
"""
_CEILINGS_SQL = """
select device, device_name, framework, precision, coalesce(threads, 0) as threads, metric,
       median(value) as value
from measurements
where family = 'calibration' and status = 'ok' and value > 0
  and metric in ('peak_matmul_tflops', 'copy_bandwidth_gbs')
group by all
"""


def identified(device: str, device_name: str) -> bool:
    """Whether a record's hardware is named well enough to learn from (see the module's note)."""
    return device != "cpu" or bool(_IDENTIFIED_CPU.search(device_name or ""))


def parse_extra(value) -> dict:
    """A record's ``extra`` as a dict, from the index's JSON text (or a dict already)."""
    if isinstance(value, dict):
        return value
    return json.loads(value) if value else {}


def trial_rows(con, sql: str = _MEASURED_SQL) -> pd.DataFrame:
    """The rows ``sql`` selects (with ``extra`` and ``shared``) that the predictor can learn from:
    named hardware, a thread count on a CPU, an image model, each mode as it comes (no
    channels_last, dynamic-shape or XLA option set arm); ``extra`` parsed to dicts and
    ``image_size`` read from it."""
    frame = con.execute(sql).df()
    frame["extra"] = frame["extra"].map(parse_extra)
    frame["image_size"] = [int(e.get("image_size") or 224) for e in frame.extra]
    frame["channels_last"] = [bool(e.get("channels_last")) for e in frame.extra]
    frame["threads"] = frame["threads"].fillna(0).astype(int)
    frame["trial"] = frame["trial"].fillna(0).astype(int)
    named = np.array(
        [identified(d, n) for d, n in zip(frame.device, frame.device_name, strict=True)], bool
    )
    # the features price image models: a text or speech model's records name their inputs
    images = np.array([e.get("inputs", "image") == "image" for e in frame.extra], bool)
    as_it_comes = np.array(
        [
            not e.get("dynamic_shapes") and e.get("xla_options") in (None, "", "default")
            for e in frame.extra
        ],
        bool,
    )
    keep = ~frame.channels_last & as_it_comes & named & images
    # a CPU record without its thread count cannot be placed against a ceiling
    keep &= (frame.device != "cpu") | (frame.threads > 0)
    return frame[keep]


def clean_trials(group: pd.DataFrame, *, only_clean: bool = False) -> pd.DataFrame:
    """``group``'s trials that ran alone, when at least ``MIN_CLEAN_TRIALS`` did (or, with
    ``only_clean``, however few did); else all."""
    clean = group[~group.shared.astype(bool)]
    return clean if only_clean or len(clean) >= MIN_CLEAN_TRIALS else group


def _median(group: pd.DataFrame, metric: str, only_clean: bool) -> float:
    rows = clean_trials(group[group.metric == metric], only_clean=only_clean)
    return float(np.median(rows.value)) if len(rows) else np.nan


def measured(con) -> pd.DataFrame:
    """One row per configuration and run: ``seconds`` (per call, from throughput), ``latency_s``
    and ``latency_p95_s`` (the trials' medians of p50 and p95), ``energy_j_per_img`` where a
    counter measured it, ``n_trials`` and ``trial_img_s`` (trial -> images/s, for pairing by
    round)."""
    return _configurations(trial_rows(con), only_clean=False)


def _configurations(trials: pd.DataFrame, only_clean: bool) -> pd.DataFrame:
    """``measured``'s rows from ``trials``; ``only_clean``: no shared trial at all
    (``clean_trials``), so a configuration that ran only on a shared machine has no row."""
    rows = []
    for key, group in trials.groupby(["campaign", "run_id", *CONFIG], sort=True):
        record = dict(zip(["campaign", "run_id", *CONFIG], key, strict=True))
        thr = clean_trials(group[group.metric == "throughput_img_s"], only_clean=only_clean)
        if thr.empty:
            continue
        batch = record["batch_size"]
        record.update(
            seconds=float(np.median(batch / thr.value)),
            latency_s=_median(group, "latency_p50_ms", only_clean) / 1000,
            latency_p95_s=_median(group, "latency_p95_ms", only_clean) / 1000,
            energy_j_per_img=_median(group, "energy_j_per_img", only_clean),
            img_s=float(np.median(thr.value)),
            n_trials=int(thr.trial.nunique()),
            trial_img_s={int(t): float(v) for t, v in zip(thr.trial, thr.value, strict=True)},
        )
        rows.append(record)
    columns = ["campaign", "run_id", *CONFIG, "seconds", "latency_s", "latency_p95_s", "img_s"]
    columns += ["energy_j_per_img", "n_trials"]
    return pd.DataFrame(rows, columns=[*columns, "trial_img_s"])


def ceilings(con) -> pd.DataFrame:
    """The hardware's ceilings per device, precision and thread count: the best peak matmul and
    copy bandwidth any framework reached (the medians over runs), as ``peak_tflops`` and
    ``bandwidth_gbs``. A framework's shortfall against them is what the correction learns."""
    frame = con.execute(_CEILINGS_SQL).df()
    if frame.empty:
        return pd.DataFrame(
            columns=[
                "device",
                "device_name",
                "precision",
                "threads",
                "peak_tflops",
                "bandwidth_gbs",
            ]
        )
    frame["threads"] = frame["threads"].astype(int)
    best = frame.groupby(["device", "device_name", "precision", "threads", "metric"]).value.max()
    table = best.unstack("metric").reset_index()
    table.columns.name = None
    return table.rename(
        columns={"peak_matmul_tflops": "peak_tflops", "copy_bandwidth_gbs": "bandwidth_gbs"}
    ).dropna(subset=["peak_tflops", "bandwidth_gbs"])


def feature_rows(keys: pd.DataFrame, progress=None) -> pd.DataFrame:
    """``features.torch_features`` for each distinct (model, batch size, image size) of ``keys``."""
    distinct = keys[_FEATURE_KEY].drop_duplicates().itertuples(index=False)
    distinct = list(distinct)
    rows = []
    for model, batch_size, image_size in progress(distinct) if progress else distinct:
        found = fw_features.torch_features(model, int(batch_size), int(image_size))
        rows.append(found.row())
    return pd.DataFrame(rows)


def with_features(frame: pd.DataFrame, feats: pd.DataFrame, ceiling: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s rows joined with their model's features and hardware's ceilings, and the
    ``total_bytes`` the prior divides by bandwidth: parameters plus every op's output, at the
    row's precision. Rows without a ceiling are dropped."""
    joined = frame.merge(feats, on=_FEATURE_KEY, how="inner")
    joined = joined.merge(ceiling, on=["device", "device_name", "precision", "threads"])
    scale = joined.precision.map(ELEMENT_BYTES).fillna(4) / 4
    written = joined[[c for c in joined if c.startswith("bytes:")]].sum(axis=1)
    joined["total_bytes"] = (joined.param_bytes + written) * scale
    joined["model_peak_bytes"] = joined.model_peak_bytes * scale
    return joined.reset_index(drop=True)


def build(db_path: str | Path, exclude: set[str], progress=None) -> tuple[pd.DataFrame, dict]:
    """The training table from the index at ``db_path`` and what was left out of it, by reason.
    The models of ``exclude`` (the frozen test set's, ``frozen.frozen_models``) never enter it,
    nor does a shared trial (``_configurations(only_clean=True)``), nor a model this process cannot
    build: one declared in a campaign it was not given."""
    con = fw_db.connect(db_path, read_only=True)
    try:
        trials = trial_rows(con)
        ceiling = ceilings(con)
    finally:
        con.close()
    frame = _configurations(trials, only_clean=True)
    throughput = trials[trials.metric == "throughput_img_s"]
    shared = throughput.groupby(["campaign", "run_id", *CONFIG]).shared.all().sum()
    tested = frame.model.isin(sorted(exclude))
    known = {m for m in set(frame.model) if registry.is_known(m)}
    unknown = ~frame.model.isin(sorted(known))
    frame = frame[~tested & ~unknown]
    feats = feature_rows(frame, progress) if len(frame) else pd.DataFrame(columns=_FEATURE_KEY)
    table = with_features(frame, feats, ceiling) if len(frame) else frame
    left_out = {
        "no ceiling for its device, precision and threads": len(frame) - len(table),
        "a model of the frozen test set": int(tested.sum()),
        "only trials on a shared machine": int(shared),
        "a declared model this process was not given": int((unknown & ~tested).sum()),
    }
    return table, left_out


# what a JAX row and a PyTorch row share to be a pair: the run, and the configuration but the
# setting (one run may time a model at two image sizes)
PAIR_KEY = [
    "campaign",
    "run_id",
    "model",
    "precision",
    "batch_size",
    "threads",
    "device_name",
    "image_size",
]


def winner_pairs(table: pd.DataFrame, predicted: pd.Series | None = None) -> pd.DataFrame:
    """JAX jit against PyTorch eager in each configuration and run where both ran: the measured
    ratio of seconds (JAX / PyTorch), whether its paired interval excludes 1 (``decided``), and,
    given ``predicted`` seconds (indexed like ``table``), the predicted ratio. Where ``table``
    carries a hold-out's ``setting_seen``, a pair's ``setting_seen`` holds when both its rows
    have it. A pair shares its image size too: one run may time a model at two."""
    key = PAIR_KEY
    found = comparison.pair_rows(
        table,
        key,
        comparison.framework_is("jax", ["jit"]),
        comparison.framework_is("torch", ["eager"]),
    ).drop_duplicates(key)
    rows = []
    for pair in found.itertuples(index=False):
        j, t = table.loc[pair.jax_index], table.loc[pair.torch_index]
        row = {
            **{k: getattr(pair, k) for k in key},
            "measured_ratio": j.seconds / t.seconds,
            "decided": comparison.decided(t.trial_img_s, j.trial_img_s),
        }
        if "setting_seen" in table:
            row["setting_seen"] = bool(j.setting_seen and t.setting_seen)
        if predicted is not None:
            if pair.jax_index not in predicted.index or pair.torch_index not in predicted.index:
                continue
            row["predicted_ratio"] = predicted[pair.jax_index] / predicted[pair.torch_index]
        rows.append(row)
    return pd.DataFrame(rows)
