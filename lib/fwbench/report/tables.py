"""The computations behind 20_analysis: framework comparisons, break-even and failures.

Everything reads the tidy ``measurements`` rows of the DuckDB index (DESIGN.md section 4) and returns
sorted DataFrames, so the report built from them is the same on every run over the same data.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from fwbench.measure import verdicts
from fwbench.measure.stats import bootstrap_ci, ratio_ci
from fwbench.report.arms import pick_arm, picked_on_rounds, variant, withheld
from fwbench.vocab import ANALYSIS_NOTEBOOK, ANSI_RE, CUT

# The ratio bootstrap is seeded so that a report rebuilt from the same data is identical.
RATIO_SEED = 0
# A framework's "default" variant is vocab.DEFAULT_MODE; "best" is its tuned variant (a mode a
# tuning run picked, vocab.TUNED_MODES), else its only one, else the fastest in the run, which then
# calls no verdict (``picked_on_rounds``); of JAX's own only (a TORCH_GRAPH_MODES variant runs
# PyTorch's graph: never JAX's side of a comparison).
# ``threads`` is part of a CPU configuration (one core and two are two points of hardware); see
# ``_tidy`` for what it holds elsewhere.
CONFIG = ["model", "device", "device_name", "precision", "threads", "batch_size"]
SERIES = ["framework", "variant"]
TEXT_COLUMNS = ["notebook", "cell", "family", "model", "framework", "mode", "device", "device_name"]
# What one throughput sample of a record is, per family: a ratio bootstraps over these unless a
# configuration ran in three or more trials (then over the trials).
SAMPLE_SOURCE = {"inference": "blocks", "training": "steps"}
SAMPLE_SOURCE_TEXT = {
    "blocks": "per-block throughputs (blocks of enqueued calls, one sync per block)",
    "steps": "per-step throughputs (every training step synced)",
    "trials": "trials",
}
_MIN_TRIALS_AS_SAMPLES = 3
# A comparison keeps only the rounds in which neither arm ran on a shared machine when at least
# this many are left; with fewer it keeps them all and says so.
MIN_CLEAN_ROUNDS = 3
PAIRED_INTERVAL = (
    "rounds paired by trial, their log ratios fitted with a random run effect and a run × "
    "comparison effect (measure/verdicts.py), so the interval carries the between-run term"
)


# --------------------------------------------------------------------------- loading


def resolve_runs(con, campaign: str, run_id: str = "", baseline_run_id: str = "") -> tuple:
    """The run to analyse (default: latest) and its baseline (default: the run before it)."""
    ids = [
        r[0]
        for r in con.execute(
            "select run_id from runs where campaign = ? order by run_id", [campaign]
        ).fetchall()
    ]
    if not ids:
        known = [
            r[0] for r in con.execute("select distinct campaign from runs order by 1").fetchall()
        ]
        raise LookupError(
            f"no runs of campaign {campaign!r} in the index; known campaigns: "
            f"{', '.join(known) or 'none'}"
        )
    run_id = run_id or ids[-1]
    if run_id not in ids:
        raise LookupError(f"campaign {campaign!r} has no run {run_id!r}; runs: {', '.join(ids)}")
    earlier = [r for r in ids if r < run_id]
    baseline_run_id = baseline_run_id or (earlier[-1] if earlier else "")
    if baseline_run_id and baseline_run_id not in ids:
        raise LookupError(f"campaign {campaign!r} has no baseline run {baseline_run_id!r}")
    return run_id, baseline_run_id


def parse_json(value) -> dict:
    if isinstance(value, dict):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return {}
    return json.loads(value)


def load_measurements(con, campaign: str, run_id: str) -> pd.DataFrame:
    """One run's records, the analysis notebook's own excluded, with ``extra`` parsed."""
    frame = con.execute(
        "select * from measurements where campaign = ? and run_id = ? and notebook <> ? "
        "order by notebook, cell, trial, family, metric, batch_size",
        [campaign, run_id, ANALYSIS_NOTEBOOK],
    ).df()
    return _tidy(frame)


def load_calibration(con) -> pd.DataFrame:
    """Every ok ceiling 02_calibrate measured, in all runs of all campaigns in the index.

    MFU and the roofline fall back to these where the analysed run did not calibrate its device.
    """
    frame = con.execute(
        "select * from measurements where family = 'calibration' and status = 'ok' "
        "and value is not null and metric in ('peak_matmul_tflops', 'copy_bandwidth_gbs') "
        "order by run_id, campaign, notebook, cell, trial, metric"
    ).df()
    return _tidy(frame)


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    frame["extra"] = frame["extra"].map(parse_json)
    for col in TEXT_COLUMNS + ["precision", "status", "metric", "unit", "error"]:
        frame[col] = frame[col].astype(object).where(frame[col].notna(), "")
    frame["trial"] = frame["trial"].fillna(0).astype(int)
    frame["batch_size"] = frame["batch_size"].astype("Int64")
    # a CPU configuration's intra-op threads; 0 where it is not a CPU setting (a GPU run is one
    # configuration whatever its host's thread count) or was not recorded (records made before
    # the column), so that grouping never drops a row for a missing key
    threads = frame["threads"] if "threads" in frame else pd.Series(np.nan, index=frame.index)
    on_cpu = frame["device"].eq("cpu") & threads.notna()
    frame["threads"] = threads.where(on_cpu, 0).fillna(0).astype(int)
    frame["variant"] = [variant(r.framework, r.mode, r.extra) for r in frame.itertuples()]
    return frame


def load_cells(con, campaign: str, run_id: str) -> pd.DataFrame:
    """The run's cells that ran; a cut cell is reported by its cell_status record alone."""
    frame = con.execute(
        "select * from cells where campaign = ? and run_id = ? and notebook <> ? "
        "and status <> ? order by notebook, cell, trial",
        [campaign, run_id, ANALYSIS_NOTEBOOK, CUT],
    ).df()
    frame["parameters"] = frame["parameters"].map(parse_json)
    frame["retry_env"] = frame["retry_env"].map(parse_json)
    return frame


def load_run(con, campaign: str, run_id: str) -> dict:
    row = con.execute(
        "select run_id, started_at, finished_at, git_sha, host, environment from runs "
        "where campaign = ? and run_id = ?",
        [campaign, run_id],
    ).fetchone()
    keys = ("run_id", "started_at", "finished_at", "git_sha", "host", "environment")
    run = dict(zip(keys, row, strict=True))
    run["environment"] = parse_json(run["environment"])
    return run


def commit_words(run: dict) -> str:
    """The commit a report names: the index's (from the kit's commit file where gpu/run.sh left
    one beside the run), and the copy's own record where it differs (a stale ``.git``)."""
    named, own = run.get("git_sha"), (run.get("environment") or {}).get("git_sha")
    if not named:
        return "an unrecorded commit"
    if own and own != named:
        return f"`{named}` (the GPU kit's commit file; the node copy's stale checkout said `{own}`)"
    return f"`{named}`"


def source_paths(rows: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """The executed notebooks (paths relative to the output folder) that produced ``rows``."""
    # a report's borrowed profiles (``why.companion_why``) come from another campaign's cells
    # and a number pooled over runs from each run's cells of the same name
    on = ["notebook", "cell"] + [k for k in ("campaign", "run_id") if k in rows and k in cells]
    keys = rows[on].drop_duplicates()
    paths = cells.merge(keys, on=on)["path"]
    return sorted(set(paths.dropna()))


# --------------------------------------------------------------------------- comparisons


def _inference_ok(meas: pd.DataFrame, metric: str, family: str = "inference") -> pd.DataFrame:
    rows = meas[(meas.family == family) & (meas.metric == metric) & (meas.status == "ok")]
    return rows[rows.value.notna()]


def throughput_samples(meas: pd.DataFrame, family: str = "inference") -> pd.DataFrame:
    """Per configuration and framework variant, the samples a ratio is computed from.

    With three or more trials the trials are the samples (their spread is the honest one), and
    ``trials``, ``shared`` and ``reruns`` hold each trial's number, whether the machine was shared
    while it ran and how often it was run again for that (columns ``shared_machine`` and
    ``reruns`` of ``meas``, where the loader added them). Otherwise the samples the record carries
    are (``SAMPLE_SOURCE``): per-block throughputs for inference, per-step images/s for training.
    """
    thr = _inference_ok(meas, "throughput_img_s", family)
    rows = []
    for key, group in thr.groupby(CONFIG + SERIES, sort=True):
        group = group.sort_values("trial")
        trials = shared = reruns = None
        if len(group) >= _MIN_TRIALS_AS_SAMPLES:
            samples, source = [float(v) for v in group.value], "trials"
            trials = [int(t) for t in group.trial]
            shared = [bool(v) for v in _column(group, "shared_machine", False)]
            reruns = [int(v) for v in _column(group, "reruns", 0)]
        else:
            samples = []
            for r in group.itertuples():
                samples.extend(float(s) for s in (r.extra.get("samples") or [r.value]))
            source = SAMPLE_SOURCE[family]
        if len(group) == 1:
            ci = (group.ci_low.iloc[0], group.ci_high.iloc[0])
        else:
            ci = bootstrap_ci(samples, seed=RATIO_SEED)
        rows.append(
            {
                **dict(zip(CONFIG + SERIES, key, strict=True)),
                "median": float(np.median(samples)),
                "ci_low": ci[0],
                "ci_high": ci[1],
                "n_samples": len(samples),
                "n_trials": len(group),
                "sample_source": source,
                "samples": samples,
                "trials": trials,
                "shared": shared,
                "reruns": reruns,
            }
        )
    return pd.DataFrame(rows)


def series_rows(frame: pd.DataFrame, key: dict, framework: str, variant: str) -> pd.DataFrame:
    """The rows of ``frame`` of one configuration (``key``: column -> value) and framework variant."""
    if frame.empty:
        return frame
    mask = (frame.framework == framework) & (frame.variant == variant)
    for column, value in key.items():
        mask &= frame[column] == value
    return frame[mask]


def _column(frame: pd.DataFrame, name: str, missing):
    if name not in frame:
        return [missing] * len(frame)
    return frame[name].astype(object).where(frame[name].notna(), missing)


def winner_word(verdict: str) -> str:
    """The matrix's ``winner``: the faster framework, or the verdict that names none."""
    return {verdicts.FASTER_A: "torch", verdicts.FASTER_B: "jax"}.get(verdict, verdict)


def decided(winner: str) -> bool:
    return winner in ("jax", "torch")


def kept_rounds(items: list, shared: list[bool]) -> list:
    """The items (rounds, or an arm's values) whose trial did not run on a shared machine, when at
    least ``MIN_CLEAN_ROUNDS`` of them are left; else all of them."""
    clean = [item for item, hit in zip(items, shared, strict=True) if not hit]
    return clean if len(clean) >= MIN_CLEAN_ROUNDS else list(items)


def paired_rounds(a, b) -> tuple[list[float], list[float], int] | None:
    """The values of two arms (``throughput_samples`` rows with trials) in the rounds both ran,
    and how many rounds were dropped because one of them ran on a shared machine: those are kept
    unless at least ``MIN_CLEAN_ROUNDS`` clean ones remain. None when they share < 2 rounds."""
    if a.trials is None or b.trials is None:
        return None
    a_by = dict(zip(a.trials, zip(a.samples, a.shared, strict=True), strict=True))
    b_by = dict(zip(b.trials, zip(b.samples, b.shared, strict=True), strict=True))
    common = sorted(set(a_by) & set(b_by))
    if len(common) < 2:
        return None
    use = kept_rounds(common, [a_by[t][1] or b_by[t][1] for t in common])
    return [a_by[t][0] for t in use], [b_by[t][0] for t in use], len(common) - len(use)


def _arm(frame: pd.DataFrame, key: dict, framework: str, variant: str):
    rows = series_rows(frame, key, framework, variant)
    return rows.iloc[0] if len(rows) == 1 else None


def log_ratio_rounds(samples: pd.DataFrame, key: dict, a: tuple, b: tuple, comparison) -> tuple:
    """Every pooled run's rounds of arm ``b`` ÷ arm ``a`` (each a (framework, variant)) as the
    estimator's long frame, and how many rounds were dropped for a shared machine."""
    parts, dropped = [], 0
    for run, frame in samples.groupby("run_id", sort=True):
        arm_a, arm_b = _arm(frame, key, *a), _arm(frame, key, *b)
        if arm_a is None or arm_b is None:
            continue
        paired = paired_rounds(arm_a, arm_b)
        if paired is None:
            continue
        values_a, values_b, lost = paired
        dropped += lost
        y = np.log(np.asarray(values_b, dtype=float) / np.asarray(values_a, dtype=float))
        parts.append(
            pd.DataFrame(
                {"comparison": [comparison] * len(y), "run": run, "round": range(len(y)), "y": y}
            )
        )
    frame = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=list(verdicts.COLUMNS))
    )
    return frame, dropped


def _compared_arms(samples: pd.DataFrame, run_id: str, comparisons=("best", "defaults")):
    """Each comparison ``run_id`` made: (configuration, comparison, JAX arm, PyTorch arm, and
    the key its rounds go by in the estimator), the arms picked in ``run_id``."""
    this = samples[samples.run_id == run_id]
    for key, group in this.groupby(CONFIG, sort=True):
        key_dict = dict(zip(CONFIG, key, strict=True))
        for comparison in comparisons:
            jax, torch = pick_arm(group, "jax", comparison), pick_arm(group, "torch", comparison)
            if jax is not None and torch is not None:
                picked = any(picked_on_rounds(group, f, comparison) for f in ("jax", "torch"))
                yield key_dict, comparison, jax, torch, (*key, jax.variant, torch.variant), picked


def _jax_over_torch_rounds(samples: pd.DataFrame, key: dict, jax, torch, ident) -> tuple:
    """``log_ratio_rounds`` of JAX's arm over PyTorch's, in every pooled run."""
    return log_ratio_rounds(samples, key, ("torch", torch.variant), ("jax", jax.variant), ident)


def best_rounds(samples: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The rounds of every best-mode comparison ``run_id`` made, from every pooled run."""
    parts = [
        _jax_over_torch_rounds(samples, key, jax, torch, ident)[0]
        for key, _, jax, torch, ident, _ in _compared_arms(samples, run_id, ("best",))
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def cpu_identity(environment: dict) -> tuple | None:
    """The CPU a run measured on (vendor, family, model, stepping); None where the run did not
    record them, so that it is pooled with no other run."""
    cpu = environment.get("cpu") or {}
    if cpu.get("family") is None:
        return None
    return (cpu.get("vendor"), cpu.get("family"), cpu.get("model"), cpu.get("stepping"))


def pooled_run_ids(con, campaign: str, run_id: str) -> list[str]:
    """The runs of ``campaign`` up to ``run_id`` made on its CPU model with the same notebook
    sources (where both recorded them): the runs its verdicts pool."""
    rows = con.execute(
        "select run_id, environment from runs where campaign = ? and run_id <= ? order by run_id",
        [campaign, run_id],
    ).fetchall()
    envs = {r: parse_json(e) for r, e in rows}
    mine = envs.get(run_id, {})
    identity = cpu_identity(mine)
    if identity is None:
        return [run_id]
    sources = mine.get("notebook_sources")
    return [
        r
        for r, env in envs.items()
        if cpu_identity(env) == identity
        and (not sources or not env.get("notebook_sources") or env["notebook_sources"] == sources)
    ]


def pooled_samples(
    con, campaign: str, run_ids: list[str], family: str = "inference", loaded: dict | None = None
):
    """``throughput_samples`` of each run, with its cells' contention readings, in one frame with
    a ``run_id`` column; ``loaded`` holds runs' measurements already read (run id -> frame)."""
    frames = []
    for rid in run_ids:
        meas = (loaded or {}).get(rid)
        if meas is None:
            meas = with_cell_readings(
                load_measurements(con, campaign, rid), load_cells(con, campaign, rid)
            )
        frames.append(throughput_samples(meas, family).assign(run_id=rid))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _runs_on_cpu(con, environment: dict, until: str | None = None) -> dict[str, list[str]]:
    """Every campaign's runs made on the CPU model ``environment`` names, oldest first; with
    ``until`` (a run id) only those that started no later, so that a report rebuilt after more
    runs were made says what it said."""
    identity = cpu_identity(environment)
    if identity is None:
        return {}
    rows = con.execute("select campaign, run_id, environment from runs order by run_id").fetchall()
    by_campaign: dict[str, list[str]] = {}
    for campaign, rid, env in rows:
        if (until is None or rid <= until) and cpu_identity(parse_json(env)) == identity:
            by_campaign.setdefault(campaign, []).append(rid)
    return by_campaign


def samples_on_cpu(
    con, environment: dict, until: str | None = None
) -> dict[str, tuple[list[str], pd.DataFrame]]:
    """Every campaign's runs on the CPU model ``environment`` names, with their
    ``pooled_samples`` (campaign -> (run ids, frame)), read once for all that compares campaigns."""
    return {
        campaign: (ids, pooled_samples(con, campaign, ids))
        for campaign, ids in sorted(_runs_on_cpu(con, environment, until).items())
    }


def with_cell_readings(meas: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Each record with its cell's contention verdict and re-run count, which the trial
    comparisons drop and count by."""
    keys = ["notebook", "cell", "trial"]
    readings = [c for c in ("shared_machine", "reruns") if c in cells]
    if meas.empty or not readings:
        return meas
    return meas.merge(cells[keys + readings], how="left", on=keys)


def arm_rounds(rows: pd.DataFrame, keys: list[str], pairs, label, log_ratio) -> pd.DataFrame:
    """The verdicts' rounds of each ``(a, b)`` arm pair of ``pairs``: one per run, trial and
    ``keys`` in which both arms ran, from ``rows`` (records with an ``arm`` column). Interleaved
    trials count from 1, so a cell without one (trial 0 or none: run once) is no round.
    ``label(key, a, b)`` names a comparison, ``log_ratio(a_value, b_value)`` is a round's ``y``."""
    empty = pd.DataFrame(columns=list(verdicts.COLUMNS))
    if rows.empty or "trial" not in rows or "run_id" not in rows:
        return empty
    rows = rows[(rows.status == "ok") & rows.value.notna() & rows.trial.notna() & (rows.trial > 0)]
    if rows.empty:
        return empty
    arms = rows.pivot_table(
        index=["run_id", "trial", *keys], columns="arm", values="value", aggfunc="median"
    )
    out = [
        {"comparison": label(tuple(key), a, b), "run": run, "round": trial, "y": log_ratio(x, y)}
        for a, b in pairs
        if a in arms and b in arms
        for (run, trial, *key), (x, y) in arms[[a, b]].dropna().iterrows()
    ]
    return pd.DataFrame(out, columns=list(verdicts.COLUMNS))


def estimated(rounds: pd.DataFrame, imported: verdicts.Between | None) -> dict:
    """Each comparison's estimate and verdict from the pooled rounds of one group, the variance
    components fitted on the group. ``imported`` is the CPU model's shared between-run term
    (``trust.shared_between``): a single run takes it, and so does a group whose own runs fit 0."""
    if rounds.empty:
        return {}
    runs = rounds.run.nunique()
    single = runs < 2
    components = verdicts.fit(
        rounds, imported=imported if single else None, floor=None if single else imported
    )
    found = verdicts.estimate(rounds, components)
    return {e.comparison: (e, v) for e, v in zip(found, verdicts.decide(found), strict=True)}


def comparison_matrix(
    samples: pd.DataFrame, run_id: str = "", imported: verdicts.Between | None = None
) -> pd.DataFrame:
    """JAX ÷ PyTorch throughput for each configuration, best modes and defaults, with verdicts.

    ``samples`` holds ``throughput_samples`` rows of one run, or of several runs of a campaign
    (column ``run_id``) made on one CPU model with the same notebook sources. The arms are picked
    in ``run_id`` (default: the latest); their rounds are paired by trial in every run and go
    through ``verdicts``: intervals with the between-run term, the design stated, and *faster*,
    *equivalent* or *inconclusive*. One run without ``imported`` calls no winner ("within one
    run"); arms without trials fall back to a two-sample bootstrap of within-run samples, which
    says nothing about how a whole run moves, and call no winner either. A ``best`` comparison
    whose arm was the fastest of several modes in this run calls none either
    (``verdicts.PICKED_ON_ROUNDS``): modes are chosen on a tuning run, never on the rounds judged.
    """
    if samples.empty:
        return pd.DataFrame()
    if "run_id" not in samples:
        samples = samples.assign(run_id=run_id or "run")
    run_id = run_id or samples.run_id.max()
    rows, parts, dropped = [], [], {}
    for key_dict, comparison, jax, torch, ident, picked in _compared_arms(samples, run_id):
        if ident not in dropped:
            part, dropped[ident] = _jax_over_torch_rounds(samples, key_dict, jax, torch, ident)
            parts.append(part)
        ratio, low, high = ratio_ci(jax.samples, torch.samples, seed=RATIO_SEED)
        rows.append(
            {
                **key_dict,
                "comparison": comparison,
                "jax_variant": jax.variant,
                "torch_variant": torch.variant,
                "jax_img_s": jax["median"],
                "torch_img_s": torch["median"],
                "ratio": ratio,
                "ci_low": low,
                "ci_high": high,
                "ci90_low": np.nan,
                "ci90_high": np.nan,
                "winner": verdicts.WITHIN_ONE_RUN,
                "interval": "within-run",
                "between_term": "none",
                "runs": 1,
                "rounds": 1,
                "design": "1 run, within-run samples",
                "p_holm": np.nan,
                "runs_to_decide": np.nan,
                "dropped_shared": dropped[ident],
                "picked_on_rounds": picked,
                "ident": ident,
                "sample_source": "trials"
                if "trials" in (jax.sample_source, torch.sample_source)
                else jax.sample_source,
            }
        )
    if not rows:
        return pd.DataFrame(rows)
    found = estimated(pd.concat(parts, ignore_index=True), imported)
    for row in rows:
        if row["ident"] not in found:
            continue
        e, v = found[row["ident"]]
        winner = withheld(winner_word(v.verdict), row["picked_on_rounds"])
        row.update(
            ratio=e.ratio, ci_low=e.low, ci_high=e.high, ci90_low=e.low90, ci90_high=e.high90,
            winner=winner, interval="paired", between_term=e.between, runs=e.runs,
            rounds=e.rounds, design=e.design, p_holm=v.p_holm, runs_to_decide=v.more_runs,
        )  # fmt: skip
    return pd.DataFrame(rows).drop(columns="ident")


def metric_table(meas: pd.DataFrame, metrics: list[str], family: str = "inference") -> pd.DataFrame:
    """Median over trials of each metric of a family, one row per configuration and variant."""
    rows = meas[(meas.family == family) & meas.metric.isin(metrics) & (meas.status == "ok")]
    if rows.empty:
        return pd.DataFrame(columns=CONFIG + SERIES + metrics)
    table = rows.pivot_table(
        index=CONFIG + SERIES, columns="metric", values="value", aggfunc="median"
    ).reset_index()
    table.columns.name = None
    for metric in metrics:
        if metric not in table:
            table[metric] = np.nan
    return table[CONFIG + SERIES + metrics].sort_values(CONFIG + SERIES, ignore_index=True)


def energy_unavailable_reasons(meas: pd.DataFrame) -> list[str]:
    rows = meas[(meas.metric == "energy_j_per_img") & meas.value.isna()]
    reasons = {str(e.get("source_or_reason") or e.get("reason") or "") for e in rows.extra}
    return sorted(r for r in reasons if r)


# --------------------------------------------------------------------------- failures


def error_line(error: str, limit: int = 200) -> str:
    """The last meaningful line of an error tail, without terminal colour codes."""
    lines = [ln.strip() for ln in ANSI_RE.sub("", error or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not set(ln) <= set("-^~ ")]
    text = lines[-1] if lines else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def on_shared_machine(rows: pd.DataFrame) -> pd.Series:
    """Per row, whether its cell ran on a shared machine; a row without a contention reading
    (runs before the meter, or a cell that failed first) counts as quiet."""
    return rows.shared_machine.fillna(0).astype(bool)


# --------------------------------------------------------------------------- other families


DESCRIPTIVE = ["model", "framework", "mode", "device_name", "precision", "batch_size"]


def family_table(meas: pd.DataFrame, family: str) -> pd.DataFrame:
    """All ok metrics of a family, one row per configuration (median over trials)."""
    rows = meas[(meas.family == family) & (meas.status == "ok") & meas.value.notna()]
    if rows.empty:
        return pd.DataFrame()
    index = [c for c in DESCRIPTIVE if (rows[c].astype(str) != "").any() and rows[c].notna().any()]
    rows = rows.assign(**{c: rows[c].astype(object).where(rows[c].notna(), "") for c in index})
    table = rows.pivot_table(index=index, columns="metric", values="value", aggfunc="median")
    table = table.reset_index()
    table.columns.name = None
    return table.sort_values(index, ignore_index=True)


def extra_columns(rows: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """``rows`` with the named entries of each record's ``extra`` as columns of their own."""
    return rows.assign(**{name: [e.get(name) for e in rows.extra] for name in names})


def metric_columns(
    rows: pd.DataFrame, keys: list[str], metrics: list[str], aggfunc: str = "median"
) -> pd.DataFrame:
    """One row per ``keys``, one column per metric of ``metrics`` that the rows have, in that
    order (a family table whose configuration lives partly in ``extra``)."""
    table = rows.pivot_table(index=keys, columns="metric", values="value", aggfunc=aggfunc)
    table = table.reset_index()
    table.columns.name = None
    return table[[*keys, *(m for m in metrics if m in table.columns)]]


def memory_table(meas: pd.DataFrame, family: str = "inference") -> pd.DataFrame:
    """Peak memory with images/s per GB, per cell of a family that records both."""
    table = metric_table(meas, ["peak_mem_bytes", "throughput_img_s"], family)
    table["peak_mem_gb"] = table.peak_mem_bytes / 1e9
    table["img_s_per_gb"] = table.throughput_img_s / table.peak_mem_gb
    return table.dropna(subset=["peak_mem_bytes"]).reset_index(drop=True)
