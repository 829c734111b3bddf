"""Which configuration to run a model in: candidates over framework, mode, precision, batch size,
threads and hardware, each scored by its measurement where one exists and by the predictor where
none does, filtered by the user's limits, ranked by an objective, with the Pareto front marked.

Candidates are what the evidence can speak for: a framework, mode and precision the training
table has measured somewhere (a mode nobody ran would be a guess the predictor cannot check),
on every device and thread count whose ceilings 02_calibrate measured at that precision. A model
without a Flax twin keeps JAX's torchax mode, PyTorch's own graph on JAX's compiler.
Memory is the model's own bytes (parameters plus the activations alive at a forward's peak,
``features``), never the process's RSS, which moves by about 28% between runs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fwbench.families.prediction import baselines, dataset, forecast
from fwbench.families.prediction import features as fw_features
from fwbench.vocab import TORCH_GRAPH_MODES

_OBJECTIVES = ("throughput", "latency", "cost", "energy")
_BATCH_CHOICES = (1, 2, 4, 8, 16, 32, 64)
# objective -> (column, larger is better)
_RANK_BY = {
    "throughput": ("throughput_img_s", True),
    "latency": ("latency_p95_ms", False),
    "cost": ("cost_per_million_img", False),
    "energy": ("energy_j_per_img", False),
}
SETTING = ["framework", "mode", "precision"]
# what makes two candidates the same configuration, as a reader sees it
CONFIGURATION = [*SETTING, "batch_size", "threads", "device_name"]
JSON_KEYS = [
    "framework",
    "mode",
    "precision",
    "batch_size",
    "threads",
    "device_name",
    "throughput_img_s",
    "latency_p95_ms",
    "peak_mem_bytes",
    "source",
    "pareto",
]


@dataclass
class Query:
    model: str
    batch_size: int | None = None
    max_latency_ms: float | None = None  # on p95 latency
    max_memory_bytes: float | None = None
    objective: str = "throughput"
    prices: dict | None = None  # device name -> price per hour


def candidate_rows(
    query: Query, table: pd.DataFrame, ceilings: pd.DataFrame, has_twin: bool, image_size: int
) -> pd.DataFrame:
    """Every candidate configuration of ``query.model``, with its features and ceilings."""
    settings = table[SETTING].drop_duplicates()
    if not has_twin:
        # JAX needs a Flax twin only for its own layers: torchax runs PyTorch's graph on XLA
        own_layers = (settings.framework == "jax") & ~settings["mode"].isin(TORCH_GRAPH_MODES)
        settings = settings[~own_layers]
    batches = [query.batch_size] if query.batch_size else list(_BATCH_CHOICES)
    feats = pd.DataFrame(
        [fw_features.torch_features(query.model, b, image_size).row() for b in batches]
    )
    rows = []
    for setting, hardware, batch in itertools.product(
        settings.itertuples(index=False), ceilings.itertuples(index=False), batches
    ):
        if setting.precision != hardware.precision:
            continue
        rows.append(
            {
                "model": query.model,
                **setting._asdict(),
                "batch_size": batch,
                "threads": hardware.threads,
                "device": hardware.device,
                "device_name": hardware.device_name,
                "image_size": image_size,
            }
        )
    config = pd.DataFrame(rows, columns=dataset.CONFIG)
    return dataset.with_features(config, feats, ceilings)


def score(rows: pd.DataFrame, fitted: dict, measured: pd.DataFrame) -> pd.DataFrame:
    """Each candidate's throughput, p95 latency (``latency_p95_ms``), memory and energy: measured
    (the newest run's medians) where the index has the configuration, else predicted."""
    predicted = forecast.predict_rows(fitted, rows)
    out = rows[dataset.CONFIG].copy()
    out["throughput_img_s"] = predicted.throughput_img_s
    out["latency_p95_ms"] = predicted.latency_p95_ms
    out["peak_mem_bytes"] = predicted.peak_mem_bytes
    out["energy_j_per_img"] = np.nan
    out["source"] = "predicted"
    if measured.empty:
        return out
    newest = measured.sort_values("run_id").drop_duplicates(dataset.CONFIG, keep="last")
    joined = out.reset_index().merge(newest, on=dataset.CONFIG, how="left", suffixes=("", "_m"))
    found = joined.img_s.notna().to_numpy()
    index = joined["index"][found]
    out.loc[index, "throughput_img_s"] = joined.img_s[found].to_numpy()
    p95 = joined.latency_p95_s[found].to_numpy() * 1000
    out.loc[index, "latency_p95_ms"] = np.where(
        np.isnan(p95), out.loc[index, "latency_p95_ms"], p95
    )
    out.loc[index, "energy_j_per_img"] = joined.energy_j_per_img_m[found].to_numpy()
    out.loc[index, "source"] = "measured"
    return out


def pareto(frame: pd.DataFrame, columns: dict) -> pd.Series:
    """Whether no other row is at least as good in every column (``columns``: name -> larger is
    better) and better in one. NaN counts as worst."""
    values = np.column_stack(
        [
            np.nan_to_num(frame[c].to_numpy(float) * (1 if up else -1), nan=-np.inf)
            for c, up in columns.items()
        ]
    )
    front = []
    for row in values:
        dominated = np.all(values >= row, axis=1) & np.any(values > row, axis=1)
        front.append(not dominated.any())
    return pd.Series(front, index=frame.index)


@dataclass
class Ranking:
    ranked: pd.DataFrame  # the candidates that meet every limit, best first
    dropped: dict  # reason -> how many candidates it removed


def rank(scored: pd.DataFrame, query: Query) -> Ranking:
    """Filter by the query's limits (p95 latency, memory, a price for cost), rank by its
    objective, mark the Pareto front over throughput, p95 latency, memory and cost."""
    # one row per configuration, a measurement before a prediction of the same one
    measured_first = scored.source.ne("measured").to_numpy().argsort(kind="stable")
    frame = scored.iloc[measured_first].drop_duplicates(CONFIGURATION).copy()
    dropped = {}

    def keep(mask, reason):
        nonlocal frame
        dropped[reason] = int((~mask).sum())
        frame = frame[mask]

    if query.max_latency_ms is not None:
        keep(
            frame.latency_p95_ms <= query.max_latency_ms,
            f"p95 latency above {query.max_latency_ms:g} ms",
        )
    if query.max_memory_bytes is not None:
        limit = query.max_memory_bytes / 2**30
        keep(frame.peak_mem_bytes <= query.max_memory_bytes, f"more than {limit:g} GiB of memory")
    columns = {"throughput_img_s": True, "latency_p95_ms": False, "peak_mem_bytes": False}
    if query.prices:
        price = frame.device_name.map(query.prices).astype(float)
        frame = frame.assign(cost_per_million_img=price / (frame.throughput_img_s * 3600) * 1e6)
        columns["cost_per_million_img"] = False
        if query.objective == "cost":
            keep(frame.cost_per_million_img.notna(), "no price for its device")
    if query.objective == "energy":
        keep(frame.energy_j_per_img.notna(), "no energy measurement")
    frame = frame.assign(pareto=pareto(frame, columns) if len(frame) else [])
    column, larger = _RANK_BY[query.objective]
    frame = frame.sort_values(
        [column, "throughput_img_s"], ascending=[not larger, False], na_position="last"
    )
    return Ranking(frame.reset_index(drop=True), {k: v for k, v in dropped.items() if v})


def explain(ranking: Ranking, query: Query) -> str:
    """One sentence: what is recommended, by which objective, from what evidence, against what."""
    if ranking.ranked.empty:
        why = "; ".join(f"{n} with {reason}" for reason, n in ranking.dropped.items())
        return f"No configuration of {query.model} meets the limits ({why or 'no candidates'})."
    best = ranking.ranked.iloc[0]
    column, _ = _RANK_BY[query.objective]
    evidence = "measured" if best.source == "measured" else "predicted (never measured)"
    text = (
        f"Run {query.model} on {best.framework} {best['mode']} in {best.precision} at batch "
        f"{best.batch_size} with {best.threads} threads on {best.device_name}: the best "
        f"{query.objective} of {len(ranking.ranked)} candidates that meet the limits "
        f"({best[column]:.4g} {_UNITS[column]}, {evidence})"
    )
    if len(ranking.ranked) > 1:
        second = ranking.ranked.iloc[1]
        text += (
            f", ahead of {second.framework} {second['mode']} in {second.precision} at batch "
            f"{second.batch_size} ({second[column]:.4g})"
        )
    if ranking.dropped:
        text += "; left out: " + ", ".join(f"{n} with {r}" for r, n in ranking.dropped.items())
    return text + "."


_UNITS = {
    "throughput_img_s": "img/s",
    "latency_p95_ms": "ms p95",
    "cost_per_million_img": "per million images",
    "energy_j_per_img": "J/img",
}


def regret_pct(chosen: float, best: float, larger_is_better: bool = True) -> float:
    """How much worse the chosen configuration's measured value is than the best measured, in %."""
    if larger_is_better:
        return (1 - chosen / best) * 100
    return (chosen / best - 1) * 100


def choice(group: pd.DataFrame, predicted: pd.DataFrame, cap: float | None) -> dict:
    """The configuration predictions alone pick from ``group`` (measured rows of one model), and
    its regret against the best measured one; ``cap`` limits p95 latency (seconds)."""
    truly = group if cap is None else group[group.latency_p95_s <= cap]
    believed = predicted if cap is None else predicted[predicted.latency_p95_ms / 1000 <= cap]
    if truly.empty:
        return {}
    winner = truly.loc[truly.img_s.idxmax()]
    best = winner.img_s
    if believed.empty:  # the predictions say nothing fits where something does
        return {
            "regret_pct": 100.0,
            "chosen": None,
            "best": _label(winner),
            "differs": NO_PICK,
            "violates": False,
            "best_img_s": best,
        }
    chosen = group.loc[believed.throughput_img_s.idxmax()]
    violates = cap is not None and chosen.latency_p95_s > cap
    regret = 100.0 if violates else regret_pct(chosen.img_s, best)
    return {
        "regret_pct": regret,
        "chosen": _label(chosen),
        "best": _label(winner),
        "differs": _difference(chosen, winner),
        "violates": bool(violates),
        "best_img_s": best,
    }


# what a query's ``differs`` says when the predictions left nothing under its cap
NO_PICK = "no pick"


def _difference(chosen: pd.Series, best: pd.Series) -> str:
    """What a pick changed from the best measured configuration: ``setting`` (framework, mode or
    precision), ``batch size`` and ``threads``, joined by " and "; empty where it is the best."""
    parts = []
    if any(chosen[column] != best[column] for column in SETTING):
        parts.append("setting")
    if chosen.batch_size != best.batch_size:
        parts.append("batch size")
    if chosen.threads != best.threads:
        parts.append("threads")
    return " and ".join(parts)


def miss_causes(queries: pd.DataFrame, goal_regret_pct: float) -> pd.DataFrame:
    """For each kind of query (``evaluate``'s rows), how many missed the goal (regret above
    ``goal_regret_pct``) by what their pick changed from the best (``differs``), and how many of
    those broke their latency cap: why a recommender misses, which its share hides."""
    missed = queries[queries.regret_pct > goal_regret_pct]
    columns = ["query", "differs", "misses", "broke_cap", "worst_regret_pct"]
    if missed.empty:
        return pd.DataFrame(columns=columns)
    grouped = missed.groupby(["query", "differs"])
    out = grouped.agg(
        misses=("regret_pct", "size"),
        broke_cap=("violates", "sum"),
        worst_regret_pct=("regret_pct", "max"),
    ).reset_index()
    out["broke_cap"] = out.broke_cap.astype(int)
    return out.sort_values(["query", "misses"], ascending=[True, False])[columns]


def _label(row: pd.Series) -> str:
    """A measured configuration as a query's record names it."""
    return (
        f"{row.framework} {row['mode']} {row.precision} batch {row.batch_size}, "
        f"{row.threads} threads"
    )


def evaluate(table: pd.DataFrame, *, seed: int = 0) -> pd.DataFrame:
    """Recommendations for each measured model made from predictions alone, by a fit that never
    saw the model, against the exhaustive measured optimum. Two kinds of query per model and
    device: the best throughput at each batch size where two or more configurations ran
    (``batch``), and the best throughput under a p95 latency cap at the median of the model's
    measured p95 latencies (``latency``), where a pick that breaks the cap counts as 100%.
    Configurations at another image size are another query: a smaller input is not a choice
    the user has."""
    rows = []
    for model in sorted(table.model.unique()):
        others = table[table.model != model]
        if others.model.nunique() < 2:
            continue
        fitted = forecast.fit_targets(others, seed=seed)
        mine = table[table.model == model]
        mine = mine.sort_values("run_id").drop_duplicates(dataset.CONFIG, keep="last")
        predicted = forecast.predict_rows(fitted, mine)
        rows += _batch_queries(mine, predicted)
        if fitted.get("latency_p95_s") is not None:
            rows += _latency_queries(mine, predicted)
    return pd.DataFrame(rows)


def _latency_queries(measured: pd.DataFrame, predicted: pd.DataFrame) -> list[dict]:
    """The ``latency`` queries of ``measured`` (one model's configurations): at each device and
    image size with two or more measured p95 latencies, the pick that ``predicted`` (same index)
    makes under a cap at their median, against the measured best under it."""
    rows = []
    for (device_name, image_size), on_device in measured.groupby(["device_name", "image_size"]):
        timed = on_device[on_device.latency_p95_s.notna()]
        if len(timed) >= 2:
            cap = float(timed.latency_p95_s.median())
            rows.append(
                {
                    "query": "latency",
                    "model": timed.model.iloc[0],
                    "device_name": device_name,
                    "image_size": int(image_size),
                    "cap_ms": cap * 1000,
                    "candidates": len(timed),
                    **choice(timed, predicted.loc[timed.index], cap),
                }
            )
    return rows


def _batch_queries(measured: pd.DataFrame, predicted: pd.DataFrame) -> list[dict]:
    """The ``batch`` queries of ``measured`` (configurations with their measured ``img_s``): at
    each model, device, image size and batch size with two or more configurations, the pick that
    ``predicted``'s ``throughput_img_s`` (same index) makes, against the measured best."""
    rows = []
    keys = ["model", "device_name", "image_size", "batch_size"]
    for (model, device_name, image_size, batch), group in measured.groupby(keys):
        if len(group) >= 2:
            rows.append(
                {
                    "query": "batch",
                    "model": model,
                    "device_name": device_name,
                    "image_size": int(image_size),
                    "batch_size": int(batch),
                    "candidates": len(group),
                    **choice(group, predicted.loc[group.index], None),
                }
            )
    return rows


def baseline_queries(table: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """The queries of ``like`` (``evaluate``'s) answered by the constant rule instead of the
    predictions (``baselines.rule_ranking``, its framework the one that won most of the other
    models' decided pairs), each against the same measured best."""
    rows = []
    for model in sorted(set(like.model)) if len(like) else ():
        mine = table[table.model == model]
        mine = mine.sort_values("run_id").drop_duplicates(dataset.CONFIG, keep="last")
        ranked = baselines.rule_ranking(
            mine, baselines.majority_winner(table[table.model != model])
        )
        rows += _batch_queries(mine, ranked) + _latency_queries(mine, ranked)
    found = pd.DataFrame(rows)
    if found.empty:
        return found
    # the same queries as the predictions answered, no more
    return found[_query_keys(found).isin(set(_query_keys(like)))]


def _query_keys(queries: pd.DataFrame) -> pd.Series:
    """Each query as one key: its kind, model, device, image size and batch size (none for a
    latency query)."""
    batch = pd.to_numeric(queries.reindex(columns=["batch_size"]).batch_size, errors="coerce")
    return pd.Series(
        list(zip(queries["query"], queries.model, queries.device_name,
                 queries.image_size.astype(int), batch.fillna(-1).astype(int), strict=True)),
        index=queries.index,
    )  # fmt: skip


def committed_queries(scored: pd.DataFrame) -> pd.DataFrame:
    """The ``batch`` queries of a set predicted before it was measured (the frozen test's scored
    rows: ``predicted_s`` and the measured ``seconds`` per call): which framework and mode the
    committed predictions pick at each batch size, and its regret against the measured best.
    Latency queries need a predicted p95, which the committed predictions do not hold."""
    frame = scored.assign(img_s=scored.batch_size / scored.seconds)
    predicted = pd.DataFrame(
        {"throughput_img_s": scored.batch_size / scored.predicted_s}, index=scored.index
    )
    return pd.DataFrame(_batch_queries(frame, predicted))


def committed_baseline_queries(scored: pd.DataFrame, winner: str | None) -> pd.DataFrame:
    """``committed_queries`` answered by the constant rule (``baselines.rule_ranking``) with
    ``winner``, the framework that won most of the training table's decided pairs."""
    frame = scored.assign(img_s=scored.batch_size / scored.seconds)
    return pd.DataFrame(_batch_queries(frame, baselines.rule_ranking(frame, winner)))


def record_queries(
    rec, queries: pd.DataFrame, goal_regret_pct: float, extra: dict | None = None
) -> dict[str, float]:
    """Each query's ``regret_pct`` and each kind's share within ``goal_regret_pct``
    (``regret_within_5pct``) in Recorder ``rec``, all marked with ``extra`` (the frozen set's);
    returns the shares by kind."""
    base = dict(extra or {})
    for row in queries.itertuples():
        found = {
            **base,
            "query": row.query,
            "chosen": row.chosen,
            "best": row.best,
            "candidates": int(row.candidates),
            "image_size": int(row.image_size),
            "differs": row.differs,
        }
        if row.query == "latency":
            found["cap_ms"] = float(row.cap_ms)
        batch = int(row.batch_size) if row.query == "batch" else None
        rec.add(
            "regret_pct",
            row.regret_pct,
            "%",
            model=row.model,
            device_name=row.device_name,
            batch_size=batch,
            extra=found,
        )
    shares = {}
    for kind, group in queries.groupby("query"):
        shares[kind] = float((group.regret_pct <= goal_regret_pct).mean() * 100)
        rec.add(
            "regret_within_5pct", shares[kind], "%", n=len(group), extra={**base, "query": kind}
        )
    return shares
