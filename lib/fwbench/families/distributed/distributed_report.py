"""Distributed training (13_distributed): each strategy on one and N processes, proven in float64
first, and the collectives' bus bandwidth.
"""

from __future__ import annotations

import math

import pandas as pd

from fwbench.measure import verdicts
from fwbench.report import charts, sections, tables
from fwbench.report.items import Figure, Note, Section, Table, nonempty, per_analysis, records

_DISTRIBUTED_METRICS = [
    "step_ms",
    "compute_only_step_ms",
    "grad_allreduce_ms",
    "comm_overhead_frac",
    "scaling_efficiency",
    "throughput_img_s",
    "state_bytes_per_rank",
    "peak_mem_bytes",
]


# alphabetical, the order the parity table's columns have always had
DISTRIBUTED_PARITY_METRICS = ["dist_fp64_cross_framework_max_rel", "dist_fp64_loss_parity_max_rel"]


def _distributed_rows(meas: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    rows = meas[(meas.family == "distributed") & meas.metric.isin(metrics)]
    return rows if rows.empty else tables.extra_columns(rows, ["strategy", "world_size"])


_TIMING_KEYS = ["model", "framework", "strategy", "precision", "world_size", "device_name"]


def timed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The timing rows the step-time verdicts read: where a configuration ran in interleaved
    trials, those trials alone. The cell run once before the rounds (trial 0: the float64 gate,
    whose few steps still hold compilation) is a gate, shown in the parity table, not a timing;
    a campaign run once (every cell trial 0) keeps its one cell."""
    if rows.empty or "trial" not in rows:
        return rows
    trialled = rows.trial.fillna(0) > 0
    keys = [rows[k].astype(str) for k in _TIMING_KEYS if k in rows]
    if "run_id" in rows:  # a pooled frame: each run's trials decide for that run
        keys.append(rows.run_id.astype(str))
    return rows[trialled | ~trialled.groupby(keys).transform("any")]


def _timed(meas: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """``metrics``' ok records of the timed trials (``timed_rows``)."""
    rows = _distributed_rows(meas, metrics)
    return timed_rows(rows[rows.status == "ok"]) if len(rows) else rows


def distributed_table(meas: pd.DataFrame) -> pd.DataFrame:
    """13_distributed's step time, communication share, weak-scaling efficiency and per-rank
    memory: one row per model, framework, strategy, precision and world size (strategy and
    world size live in ``extra``), the median over the timed trials (``timed_rows``)."""
    rows = _timed(meas, _DISTRIBUTED_METRICS)
    if rows.empty:
        return pd.DataFrame()
    return tables.metric_columns(rows, _TIMING_KEYS, _DISTRIBUTED_METRICS)


def most_trials(meas: pd.DataFrame) -> int:
    """The most timed trials any configuration ran in (``sentences.limitations``); a campaign
    run once counts one, and one without distributed records none."""
    rows = _timed(meas, ["step_ms"])
    if rows.empty:
        return 0
    keys = [rows[k].astype(str) for k in _TIMING_KEYS]
    return int(rows.groupby(keys).trial.nunique().max())


def _timed_sources(metrics: list[str]):
    """The notebooks behind a timing table: the timed trials' cells, not the gate's."""

    def paths(analysis, _frame: pd.DataFrame) -> list[str]:
        return analysis.sources(_timed(analysis.meas, metrics))

    return paths


def distributed_parity_table(meas: pd.DataFrame) -> pd.DataFrame:
    """The float64 gate of every strategy: its losses against its framework's one-process
    reference and the other framework's, with the check's status (failures kept)."""
    rows = _distributed_rows(meas, DISTRIBUTED_PARITY_METRICS)
    if rows.empty:
        return pd.DataFrame()
    keys = ["model", "framework", "strategy", "world_size"]
    table = tables.metric_columns(rows, keys, DISTRIBUTED_PARITY_METRICS, aggfunc="max")
    status = rows.groupby(["model", "framework", "strategy"]).status.agg(
        lambda s: "ok" if (s == "ok").all() else "failed"
    )
    return table.merge(status.rename("status").reset_index(), on=["model", "framework", "strategy"])


def busbw_table(meas: pd.DataFrame) -> pd.DataFrame:
    """The all-reduce sweeps: bus and algorithm bandwidth per framework, world size and message
    size."""
    rows = meas[(meas.family == "distributed") & (meas.metric == "allreduce_busbw_gbs")]
    rows = rows[(rows.status == "ok") & rows.value.notna()]
    if rows.empty:
        return pd.DataFrame()
    return (
        pd.DataFrame(
            {
                "framework": rows.framework,
                "world_size": [e.get("world_size") for e in rows.extra],
                "message_bytes": [e.get("message_bytes") for e in rows.extra],
                "busbw_gbs": rows.value,
                "algbw_gbs": [e.get("algbw_gbs") for e in rows.extra],
            }
        )
        .groupby(["framework", "world_size", "message_bytes"], as_index=False)
        .median()
    )


def step_parts_table(table: pd.DataFrame) -> pd.DataFrame:
    """Each data-parallel step above one process in parts that add up to it: the compute-only
    step, the gradients' all-reduce timed alone, and the rest (waiting, barriers, what the
    framework does around its collectives; negative where the all-reduce overlaps the backward
    pass)."""
    needed = {"step_ms", "compute_only_step_ms", "grad_allreduce_ms"}
    if table.empty or not needed <= set(table.columns):
        return pd.DataFrame()
    rows = table.dropna(subset=list(needed))
    rows = rows[rows.world_size > 1]
    if rows.empty:
        return pd.DataFrame()
    parts = rows[["model", "framework", "strategy", "precision", "world_size", "step_ms"]].copy()
    parts["compute_ms"] = rows.compute_only_step_ms
    parts["grad_allreduce_ms"] = rows.grad_allreduce_ms
    parts["rest_ms"] = rows.step_ms - rows.compute_only_step_ms - rows.grad_allreduce_ms
    return parts.reset_index(drop=True)


# the step-time comparisons a campaign with interleaved trials decides: B ÷ A in steps per second
_SCALING_PAIRS = (
    (("jax", "dp"), ("jax", "dp_fused")),
    (("torch", "ddp"), ("jax", "dp")),
    (("torch", "ddp"), ("jax", "dp_fused")),
)


def scaling_rounds(meas: pd.DataFrame) -> pd.DataFrame:
    """The verdicts' rounds of the step-time comparisons: one per run, trial, model, precision
    and world size where both arms of a pair ran, ``y`` the log of A's step time over B's (B ÷ A
    in steps per second). Cells without a trial number (one trial) give none."""
    rows = _distributed_rows(meas, ["step_ms"])
    if rows.empty:
        return pd.DataFrame(columns=list(verdicts.COLUMNS))
    return tables.arm_rounds(
        rows.assign(arm=rows.framework + " " + rows.strategy),
        ["model", "precision", "world_size"],
        [(" ".join(a), " ".join(b)) for a, b in _SCALING_PAIRS],
        lambda key, a, b: (key[0], key[1], int(key[2]), a, b),
        lambda a_ms, b_ms: math.log(a_ms / b_ms),
    )


def scaling_verdicts(rounds: pd.DataFrame) -> pd.DataFrame:
    """Each step-time comparison's ratio (B ÷ A in steps per second), its intervals, design and
    verdict, through the verdicts' estimator (trials as rounds, nested in runs; one run calls no
    winner)."""
    if rounds.empty:
        return pd.DataFrame()
    found = tables.estimated(rounds, imported=None)
    rows = []
    for (model, precision, n, a, b), (e, v) in sorted(found.items()):
        faster = {verdicts.FASTER_B: b, verdicts.FASTER_A: a}.get(v.verdict, "")
        rows.append(
            {
                "model": model,
                "precision": precision,
                "world_size": n,
                "a": a,
                "b": b,
                "ratio": e.ratio,
                "ci_low": e.low,
                "ci_high": e.high,
                "ci90_low": e.low90,
                "ci90_high": e.high90,
                "design": e.design,
                "faster": faster,
                # the estimator's "a"/"b" read as words in the table
                "verdict": "faster" if faster else v.verdict,
                "p_holm": v.p_holm,
            }
        )
    return pd.DataFrame(rows)


def parts_sentences(parts: pd.DataFrame) -> list[str]:
    """One sentence per step in parts, each adding up to its step time."""
    lines = []
    for r in parts.itertuples():
        rest = "overlapped" if r.rest_ms < 0 else "the rest"
        lines.append(
            f"{r.model}, {r.framework} {r.strategy} on {int(r.world_size)} processes "
            f"({r.precision}): {r.step_ms:.1f} ms a step = {r.compute_ms:.1f} ms compute "
            f"+ {r.grad_allreduce_ms:.1f} ms the gradients' all-reduce alone "
            f"{'+' if r.rest_ms >= 0 else '−'} {abs(r.rest_ms):.1f} ms {rest}."
        )
    return lines


_PART_WORDS = {
    "compute_ms": "compute",
    "grad_allreduce_ms": "the gradients' all-reduce",
    "rest_ms": "the rest",
}


def _signed(x: float, spec: str) -> str:
    return f"{'+' if x >= 0 else '−'}{format(abs(x), spec)}"


def gap_sentences(parts: pd.DataFrame, baseline=("torch", "ddp")) -> list[str]:
    """What each other strategy's step has beyond the baseline's at the same model, precision and
    world size, parted the way the steps are: each part's extra milliseconds and its share of the
    gap, largest first (a part the other strategy spends less on counts negative)."""
    lines = []
    keys = ["model", "precision", "world_size"]
    base = parts[(parts.framework == baseline[0]) & (parts.strategy == baseline[1])]
    for r in parts.merge(base, on=keys, suffixes=("", "_base")).itertuples():
        if (r.framework, r.strategy) == baseline:
            continue
        gap = r.step_ms - r.step_ms_base
        extra = {col: getattr(r, col) - getattr(r, f"{col}_base") for col in _PART_WORDS}
        shares = ", ".join(
            f"{_signed(ms, '.1f')} ms {_PART_WORDS[col]} ({_signed(100 * ms / gap, '.0f')}%)"
            for col, ms in sorted(extra.items(), key=lambda kv: -abs(kv[1]))
        )
        longer = "longer" if gap >= 0 else "shorter"
        lines.append(
            f"On {int(r.world_size)} processes ({r.model}, {r.precision}), {r.framework} "
            f"{r.strategy}'s step is {abs(gap):.1f} ms {longer} than {baseline[0]} "
            f"{baseline[1]}'s: {shares}."
        )
    return lines


@per_analysis
def runs(analysis):
    return distributed_table(analysis.meas)


@per_analysis
def parts(analysis):
    return step_parts_table(runs(analysis))


@per_analysis
def scaling(analysis):
    # the rounds of every run the verdicts pool, so that their intervals carry the between-run term
    pooled = analysis.pool_meas if not analysis.pool_meas.empty else analysis.meas
    return scaling_verdicts(scaling_rounds(pooled))


@per_analysis
def parity(analysis):
    return distributed_parity_table(analysis.meas)


@per_analysis
def busbw(analysis):
    return busbw_table(analysis.meas)


DISTRIBUTED = Section(
    "Distributed training",
    "Each strategy on 1 and N worker processes (13_distributed): step time between barriers "
    "(the slowest rank's), the share of it spent on communication (synced step against a "
    "compute-only step), weak-scaling efficiency (throughput at N over N times the "
    "throughput at 1, the batch per worker fixed), the state each rank holds, and the "
    "all-reduce bus bandwidth by message size (busbw = algbw x 2(n-1)/n, as nccl-tests). "
    "Every strategy is first proven to train the one-process function in float64 (losses "
    "within 1e-9 of both frameworks' references).",
    (
        Table(
            "distributed",
            "Step time, communication share, scaling efficiency and per-rank memory: medians "
            "over each configuration's timed trials, the ones the verdicts read (a float64 "
            "gate run once before them reports its result in the parity table; its few steps, "
            "compilation among them, are not timings).",
            runs,
            _timed_sources(_DISTRIBUTED_METRICS),
            when=nonempty(runs),
        ),
        Table(
            "distributed_parts",
            "What a data-parallel step is made of: compute (the compute-only step), the "
            "gradients' all-reduce timed alone, and the rest (waiting, barriers and what the "
            "framework adds; negative where the all-reduce overlaps the backward pass, as "
            "DDP's does). JAX dp asks for one all-reduce per gradient array, which XLA "
            "combines into variadic all-reduces carrying many arrays each (the CPU "
            "collectives still pay per array: "
            "docs/upstream/xla_cpu_allreduce_per_array.py); dp_fused flattens them into one.",
            parts,
            _timed_sources(["step_ms", "compute_only_step_ms", "grad_allreduce_ms"]),
            when=nonempty(parts),
        ),
        Note(
            lambda a: " ".join(gap_sentences(parts(a))),
            when=lambda a: not parts(a).empty and bool(gap_sentences(parts(a))),
        ),
        Note(
            lambda a: " ".join(parts_sentences(parts(a))),
            when=nonempty(parts),
        ),
        Table(
            "distributed_verdicts",
            "Step time compared across strategies with interleaved trials: B ÷ A in steps per "
            "second (above 1: B is faster), through the verdicts' estimator (trials are rounds, "
            f"nested in runs; its design stated), *faster*, *{verdicts.EQUIVALENT_WORDS}* or "
            "*inconclusive*; one run calls no winner.",
            scaling,
            _timed_sources(["step_ms"]),
            when=nonempty(scaling),
        ),
        Table(
            "distributed_parity",
            "The float64 gate: largest relative loss difference against the one-process "
            "references.",
            parity,
            records("distributed", DISTRIBUTED_PARITY_METRICS),
            when=nonempty(parity),
        ),
        Figure(
            "allreduce_busbw",
            "All-reduce bus bandwidth",
            "One fp32 all-reduce per message size at the largest world size.",
            lambda a: charts.busbw_chart(busbw(a)),
            when=nonempty(busbw),
        ),
    ),
    empty=lambda a: runs(a).empty and parity(a).empty,
    empty_note="No distributed records in this run.",
    name="distributed",
)


SECTIONS = (DISTRIBUTED,)


def _mib(nbytes: float) -> str:
    return "" if pd.isna(nbytes) else f"{nbytes / 2**20:.1f}"


def _share(frac: float) -> str:
    return "" if pd.isna(frac) else f"{100 * frac:.0f}%"


def readme_part(_content: dict, tables_dir, report_link: str) -> list[str]:
    """The README's lines, from the report's distributed tables."""
    return readme_lines(
        sections.read_table(tables_dir, "distributed"),
        sections.read_table(tables_dir, "distributed_parity"),
        report_link,
    )


def readme_lines(table: pd.DataFrame, parity: pd.DataFrame, report_link: str) -> list[str]:
    """The README's lines: 13_distributed's step times, communication share, weak-scaling efficiency and per-rank
    state, with the float64 gate each strategy passed."""
    if table.empty:
        return []
    gate = {}
    if not parity.empty:
        for r in parity.itertuples():
            worst = max(r.dist_fp64_loss_parity_max_rel, r.dist_fp64_cross_framework_max_rel)
            gate[(r.model, r.framework, r.strategy)] = f"{worst:.1e} ({r.status})"
    rows = [
        [
            str(r.model),
            f"{r.framework} {r.strategy}",
            str(int(r.world_size)),
            f"{r.step_ms:.1f}",
            _share(getattr(r, "comm_overhead_frac", float("nan"))),
            "" if pd.isna(r.scaling_efficiency) else f"{r.scaling_efficiency:.2f}",
            _mib(getattr(r, "state_bytes_per_rank", float("nan"))),
            gate.get((r.model, r.framework, r.strategy), "") if r.world_size > 1 else "",
        ]
        for r in table.sort_values(["model", "framework", "strategy", "world_size"]).itertuples()
    ]
    header = [
        "model",
        "strategy",
        "processes",
        "step (ms)",
        "communication",
        "weak scaling",
        "state per rank (MiB)",
        "float64 gate (largest relative loss gap)",
    ]
    return [
        f"Distributed training ({', '.join(sorted(set(table.precision)))}, one core per process) "
        f"([report]({report_link}#distributed-training)):",
        sections.markdown_table(header, rows),
    ]
