"""The report's memory-time curve (12_memory's records): every method's peak memory against its
iteration time per model and batch size, with the time's interval from the spread between
trials, and the activation goal's verdicts; ``memory_curve_words`` puts them into sentences.

A method's kind and budget live in the records' ``extra`` (``{"method": "mu_two", "budget":
0.5}``); its full name is the ``mode``. Times are paired by trial with the plain eager step
(``none``) of the same trial, so a trial's overhead cancels what the machine did while that
process ran; trials on a shared machine are dropped when enough clean ones remain.

Every verdict here takes the trial as its unit of replication: a trial is a fresh process with
its own profile, so its prediction and its rounds share whatever that process was, and rounds
pooled across trials would count one trial's bias as many independent readings. A verdict is
given only where the interval over trials decides it; with one trial there is no interval and
the verdict stays open.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import altair as alt
import numpy as np
import pandas as pd
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from fwbench.measure.stats import paired_ratio_interval
from fwbench.report.tables import extra_columns, on_shared_machine, paired_rounds
from fwbench.results.layout import slug_without_trial
from fwbench.vocab import CONFIDENCE, MEMORY_COMPILED_KINDS
from fwbench.vocab import MEMORY_ACTIVATION_GOAL_PCT as ACTIVATION_GOAL_PCT
from fwbench.vocab import MEMORY_OVERHEAD_GOAL_PCT as OVERHEAD_GOAL_PCT

# a cell's settings beyond these (its slug less the trial, e.g. ``replay_random=False``) keep
# two cells of one model and batch size apart
KEYS = ["model", "batch_size", "device_name", "variant"]
REFERENCE = "none"
# JAX's methods (12_memory's jax_planners, on the Flax twin) against JAX's plain step
JAX_REFERENCE = "jax_none"
BASELINES = {"eager": ("checkpoint",), "compiled": ("compile_budget",)}
OURS = {"eager": "mu_two", "compiled": "compiled_mu_two"}
# the traced step without a plan, compiled whole (12_memory's compile_graph)
COMPILED_START = "compiled_graph"
_POINT_METRICS = [
    "peak_mem_bytes",
    "activation_saved_pct",
    "memory_saved_pct",
    "sim_peak_error_pct",
    "profile_drift_pct",
    "exact_max_abs_diff",
    "predicted_peak_bytes",
    "predicted_iter_ms",
    "overhead_pct",
    "replay_ms",
    "replay_repeat_pct",
    "compiled_graphs",
    "random_replays",
]
# the time model's figures count on quiet trials only, as the family's bar for it does
_QUIET_METRICS = ("sim_time_error_pct", "predicted_multiple", "measured_multiple")
MODEL_WORDS = {"resnet152": "ResNet-152", "bert": "BERT (masked LM)", "resnet50": "ResNet-50"}


def memory_rows(meas: pd.DataFrame) -> pd.DataFrame:
    """The memory records that name their method's kind (runs before the curve did not)."""
    rows = meas[(meas.family == "memory") & (meas.status == "ok") & meas.value.notna()]
    rows = rows[[isinstance(e, dict) and "method" in e for e in rows.extra]]
    if rows.empty:
        return rows
    rows = extra_columns(
        rows,
        [
            "method",
            "budget",
            "simulated_only",
            "swap_bandwidth_gbs",
            "timed_by",
            "allocator",
            "inductor_locality",
        ],
    )
    cells = rows["cell"] if "cell" in rows else pd.Series("", index=rows.index)
    return rows.assign(variant=[slug_without_trial(c) for c in cells.fillna("")])


def reference_of(method: str) -> str:
    """The plain step a method's time and savings are taken against: its own framework's."""
    return JAX_REFERENCE if method.startswith("jax_") else REFERENCE


def shares_a_model(table: pd.DataFrame) -> pd.Series:
    """Per row, whether another cell (variant) ran the same model and batch size on the same
    device: only then does a sentence or a chart panel name the cell."""
    return table.groupby(KEYS[:-1]).variant.transform("nunique") > 1


def trial_time_errors(quiet: pd.DataFrame) -> tuple[dict[int, float], int]:
    """The time model's error for one planned graph, one value per quiet trial of ``quiet``
    (its records from quiet trials), and how many rounds were left out as shared.

    A trial's error is its predicted multiple over the median of its own rounds' plan ÷ graph,
    as 12_memory records it. The trial, not the round, is the unit: each trial predicts from its
    own profile and runs its rounds in one process, so its rounds share that trial's bias and
    pooling them across trials would count one trial's reading thirty times. A round whose own
    contention reading says the machine was shared is left out of its trial's median; a trial
    without rounds (runs before them, or ``time_rounds: 0``) gives its recorded error."""
    recorded = quiet[quiet.metric == "sim_time_error_pct"].set_index("trial").value
    predicted = quiet[quiet.metric == "predicted_multiple"].set_index("trial").value
    timed = quiet[quiet.metric == "measured_multiple"].set_index("trial").extra
    errors, dropped = {}, 0
    for trial, error in recorded.items():
        extra = timed.get(trial)
        extra = extra if isinstance(extra, dict) else {}
        rounds, graph_rounds = extra.get("round_ms"), extra.get("graph_round_ms")
        shared = extra.get("round_shared") or []
        if not rounds or not graph_rounds or not any(shared) or trial not in predicted.index:
            # the record's error came from the unrounded rounds; the extras keep them to
            # 0.1 ms, so it is recomputed only where a round has to be left out
            errors[int(trial)] = float(error)
            continue
        kept = [
            plan_ms / graph_ms
            for plan_ms, graph_ms, busy in zip(rounds, graph_rounds, shared, strict=True)
            if not busy
        ]
        dropped += len(rounds) - len(kept)
        if kept:
            errors[int(trial)] = 100 * (predicted[trial] / float(np.median(kept)) - 1)
    return errors, dropped


def _time_error_over_trials(quiet: pd.DataFrame) -> dict:
    """The mean of one planned graph's per-trial errors (``trial_time_errors``) with its
    Student-t interval over the trials (trials − 1 degrees of freedom); one trial gives the
    error without an interval. Empty where no quiet trial timed the graph."""
    by_trial, dropped = trial_time_errors(quiet)
    if not by_trial:
        return {}
    errors = np.array([by_trial[t] for t in sorted(by_trial)])
    mean, low, high = mean_interval(errors)
    return {
        "time_error_mean_pct": mean,
        "time_error_low_pct": low,
        "time_error_high_pct": high,
        "time_error_trials": len(errors),
        # four decimals, so that the words' one decimal is not a rounding of a rounding
        "time_trial_errors_pct": json.dumps([round(float(e), 4) for e in errors]),
        "time_rounds_shared": dropped,
    }


def mean_interval(values) -> tuple[float, float, float]:
    """Mean and Student-t interval (``CONFIDENCE``); NaN bounds for fewer than two values. The
    time model's bar is on its error itself, a few percent either side of zero, so the errors
    are averaged as they are, not as logs of ratios."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, np.nan, np.nan
    half = scipy_stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1) * values.std(ddof=1)
    half /= np.sqrt(len(values))
    return mean, mean - half, mean + half


def _trial_interval(values: list[float]) -> tuple[float, float, float]:
    """Geometric mean of per-trial times with its t-interval (the paired interval against a
    constant arm of ones is exactly that)."""
    result = paired_ratio_interval(np.ones(len(values)), np.asarray(values, dtype=float))
    return result.ratio, result.low, result.high


def _time_columns(mode: str, mine: pd.DataFrame, ref: pd.DataFrame) -> dict:
    """One method's time columns from its iteration times by trial (``mine``) and its
    reference's (``ref``): trials, shared trials, the time's interval, the trial arm and the
    overhead paired by trial."""
    row = {"trials": len(mine), "shared_trials": int(on_shared_machine(mine).sum())}
    if not mine.empty:
        row["iter_time_ms"], row["time_low"], row["time_high"] = _trial_interval(list(mine.value))
    # each trial's time and whether it ran on a shared machine, in the arm form
    # tables.paired_rounds reads, so that two methods can be compared trial by trial
    # (they ran interleaved, in the same fresh process)
    arm = _trial_arm(mine)
    row["trial_times_ms"] = json.dumps(arm)
    # the overhead pairs the same way; a trial without a contention reading counts as
    # quiet here as in every other count of this table
    found = (
        None
        if mode == reference_of(mode)
        else paired_rounds(SimpleNamespace(**_trial_arm(ref)), SimpleNamespace(**arm))
    )
    if found is not None:
        paired = paired_ratio_interval(found[0], found[1])
        row["overhead_pct"] = 100 * (paired.ratio - 1)
        row["overhead_low"] = 100 * (paired.low - 1)
        row["overhead_high"] = 100 * (paired.high - 1)
        row["rounds"] = paired.rounds
    return row


def curve_table(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per model, batch size and method: the medians of its point metrics over trials,
    its iteration time (geometric mean over trials, t-interval), its overhead against the eager
    step paired by trial (t-interval), the time model's error over quiet trials (mean of one
    error a trial, t-interval), whether its peak is Adam's floor, its verdict on the activation
    goal, and how many trials ran on a shared machine."""
    rows = memory_rows(meas)
    if rows.empty:
        return pd.DataFrame()
    if "shared_machine" not in rows:
        rows = rows.assign(shared_machine=False)
    out = []
    for key, group in rows.groupby(KEYS, sort=True):
        times = group[group.metric == "iter_time_ms"]
        for mode, part in group.groupby("mode", sort=False):
            ref = times[times["mode"] == reference_of(mode)].set_index("trial")
            first = part.iloc[0]
            row = {
                **dict(zip(KEYS, key, strict=True)),
                "method": mode,
                "kind": first.method,
                "budget": first.budget,
                "measured": not bool(first.simulated_only),
                "swap_bandwidth_gbs": first.swap_bandwidth_gbs,
            }
            # the family's bar for the time model holds on quiet trials (contention below 10%)
            quiet_part = part[~on_shared_machine(part)]
            timed = part[part.metric == "sim_time_error_pct"]
            quiet = quiet_part[quiet_part.metric == "sim_time_error_pct"]
            for metric in [*_POINT_METRICS, *_QUIET_METRICS]:
                source = quiet_part if metric in _QUIET_METRICS else part
                values = source[source.metric == metric].value
                row[metric] = float(values.median()) if not values.empty else np.nan
            row["activations_at_peak_bytes"] = _activations_at_peak(part)
            row["sim_time_worst_pct"] = (
                float(quiet.value.abs().max()) if not quiet.empty else np.nan
            )
            row["quiet_time_trials"] = len(quiet)
            # runs before the interleaved rounds compared the profiled step itself with the
            # measured time, so the two windows' difference counted as the model's error
            row["time_anchored"] = bool(timed.timed_by.notna().any()) if not timed.empty else None
            row |= _time_error_over_trials(quiet_part)
            # only a compilation with Inductor's reorder_for_locality pass off records the pass
            row["inductor_locality"] = not part.inductor_locality.eq(False).any()
            # runs before the allocator was recorded leave it empty
            row["allocator"] = ", ".join(sorted(set(part.allocator.dropna()))) or None
            row |= _time_columns(mode, times[times["mode"] == mode].set_index("trial"), ref)
            out.append(row)
    table = pd.DataFrame(out)
    table["mode_group"] = [
        "compiled" if k in MEMORY_COMPILED_KINDS else "eager" for k in table.kind
    ]
    table = _floor_columns(table)
    table["activation_goal"] = [
        goal_verdict(row) if row.measured and row.kind in GOAL_KINDS else None
        for _, row in table.iterrows()
    ]
    return table.sort_values([*KEYS, "mode_group", "kind", "budget", "method"], ignore_index=True)


def curve_chart(table: pd.DataFrame) -> alt.Chart:
    """Peak memory against iteration time per model (rows) and batch size (columns), one line
    per method kind, the time's interval as a horizontal rule; eager and compiled in separate
    panels (compiled points are drawn hollow)."""
    data = table[table.measured]
    if "variant" not in data:  # 12_memory's own summary of one cell
        data = data.assign(variant="")
    several = shares_a_model(data)
    data = data.assign(
        peak_MB=lambda d: d.peak_mem_bytes / 2**20,
        model_batch=[
            f"{MODEL_WORDS.get(m, m)}, batch {b} ({g}{', ' + v if s else ''})"
            for m, b, g, v, s in zip(
                data.model, data.batch_size, data.mode_group, data.variant, several, strict=True
            )
        ],
    )
    base = alt.Chart().encode(
        x=alt.X("iter_time_ms:Q", title="iteration time (ms)", scale=alt.Scale(zero=False)),
        y=alt.Y("peak_MB:Q", title="peak memory (MiB)", scale=alt.Scale(zero=False)),
        color=alt.Color("kind:N", title="method"),
    )
    line = base.mark_line(point=True).encode(
        order="iter_time_ms:Q",
        tooltip=[
            "method",
            alt.Tooltip("peak_MB:Q", format=".0f"),
            alt.Tooltip("iter_time_ms:Q", format=".0f"),
            alt.Tooltip("activation_saved_pct:Q", format=".1f"),
            alt.Tooltip("overhead_pct:Q", format="+.1f"),
        ],
    )
    rule = base.mark_rule().encode(x="time_low:Q", x2="time_high:Q")
    return (
        alt.layer(line, rule, data=data)
        .properties(width=280, height=200)
        .facet(facet=alt.Facet("model_batch:N", title=None), columns=2)
        .resolve_scale(x="independent", y="independent")
    )


GOAL_KINDS = ("mu_two", "checkpoint")  # the eager methods the activation goal is stated for
JAX_GOAL_KIND = "jax_remat"  # JAX's jax.checkpoint on the same segments as checkpoint's


def best_within(table: pd.DataFrame, overhead_pct: float = OVERHEAD_GOAL_PCT) -> dict[str, object]:
    """Per goal kind (the μ-TWO plan, checkpointing), the measured row that saves the most activation
    memory within ``overhead_pct`` of added time by its point estimate, or None where no row of
    that kind stays within it. Simulated rows (swap) never count: their saving was not measured.
    12_memory reads its one trial this way; the report's verdicts, over trials, are
    ``goal_points``'. ``table``: one model and batch size, with ``kind``, ``measured``,
    ``overhead_pct`` and ``activation_saved_pct``."""
    best = {}
    for kind in GOAL_KINDS:
        rows = table[
            table.measured.astype(bool)
            & (table.kind == kind)
            & (table.overhead_pct <= overhead_pct)
        ]
        best[kind] = None if rows.empty else rows.loc[rows.activation_saved_pct.idxmax()]
    return best


def time_goal(row, overhead_pct: float = OVERHEAD_GOAL_PCT) -> str:
    """Where one method's overhead lies against the time goal, by its interval over trials:
    ``within`` where the whole interval lies at or below ``overhead_pct``, ``beyond`` where it
    lies wholly above, ``undecided`` where it holds the goal or one trial gave no interval."""
    low, high = row.get("overhead_low", np.nan), row.get("overhead_high", np.nan)
    if pd.notna(high) and high <= overhead_pct:
        return "within"
    if pd.notna(low) and low > overhead_pct:
        return "beyond"
    return "undecided"


def goal_verdict(row) -> str:
    """One measured method against the activation goal (at least 50% of the activation memory
    saved within +33% time): ``meets`` where it saves enough and its time is shown within,
    ``misses`` where it saves too little or its time is shown beyond, ``undecided`` otherwise.
    The saving needs no interval: a peak is bytes, the same in every trial."""
    if not row.activation_saved_pct >= ACTIVATION_GOAL_PCT:
        return "misses"
    return {"within": "meets", "beyond": "misses", "undecided": "undecided"}[time_goal(row)]


# goal_points' verdict where a kind ran but every point's time interval lies above the goal
NONE_WITHIN = f"none within +{OVERHEAD_GOAL_PCT:g}%"
# one-sided, for "the step time is within the goal", after Holm's adjustment across the points
# a verdict chooses among: the level at which a point's own 95% interval lies within the goal,
# so a point read alone is judged as its interval shows it
ALPHA = 0.025


def log_time_ratios(row, reference) -> np.ndarray:
    """A curve row's per-trial log time ratios against its reference row (the plain step of its
    framework), paired by trial; empty with fewer than two trials in common."""
    found = paired_rounds(point_arm(reference), point_arm(row))
    if found is None:
        return np.array([])
    return np.log(np.asarray(found[1]) / np.asarray(found[0]))


def within_goal_p(logs: np.ndarray, overhead_pct: float = OVERHEAD_GOAL_PCT) -> float:
    """One-sided p-value that a plan's mean log time ratio is below the goal's, over its
    paired trials (Student's t; NaN for fewer than 2 trials; without spread the trials agree
    exactly, 0 below the goal and 1 at or above it)."""
    if len(logs) < 2:
        return np.nan
    bound = np.log1p(overhead_pct / 100)
    if np.std(logs, ddof=1) == 0:
        return 0.0 if logs.mean() < bound else 1.0
    t = (logs.mean() - bound) / (logs.std(ddof=1) / np.sqrt(len(logs)))
    return float(scipy_stats.t.cdf(t, len(logs) - 1))


def holm_within_goal(rows: pd.DataFrame, group: pd.DataFrame) -> pd.Series:
    """Each of ``rows``' Holm-adjusted one-sided p that its time is within the goal, adjusted
    across ``rows`` (the points one verdict chooses among); NaN where a row cannot be tested.
    ``group``: the cell's rows, which hold each row's reference."""
    p = pd.Series(np.nan, index=rows.index)
    for index, row in rows.iterrows():
        reference = group[group.method == reference_of(row.method)]
        if not reference.empty:
            p[index] = within_goal_p(log_time_ratios(row, reference.iloc[0]))
    tested = p.notna()
    if tested.any():
        p[tested] = multipletests(p[tested], alpha=ALPHA, method="holm")[1]
    return p


def goal_points(group: pd.DataFrame, kinds=GOAL_KINDS) -> dict[str, tuple[object, str]]:
    """Per goal kind, the verdict of its best point and the point: ``meets`` with the point that
    saves the most among those that save enough and whose time is shown within the goal after
    Holm's adjustment across the kind's points (the point carries ``p_holm`` and ``points``, how
    many it was chosen among); else ``undecided`` with the most saving point that saves enough
    and whose time is not shown beyond; else ``misses`` with the most saving point whose time is
    not shown beyond the goal; None and ``NONE_WITHIN`` where every point's time is shown beyond
    it, ``not run`` where the kind did not run (``no overhead measured`` where no point has an
    overhead). ``group``: one cell's ``curve_table`` rows; ``kinds``: the kinds to judge (JAX's
    segmentings too, for the memory index)."""
    points = {}
    for kind in kinds:
        rows = group[group.measured.astype(bool) & (group.kind == kind)]
        if rows.empty:
            points[kind] = (None, "not run")
            continue
        # a point without an overhead (its records lack the eager step's) says nothing on time
        rows = rows[rows.overhead_pct.notna()]
        if rows.empty:
            points[kind] = (None, "no overhead measured")
            continue
        p = holm_within_goal(rows, group)
        rows = rows.assign(p_holm=p, points=int(p.notna().sum()))
        saves = rows.activation_saved_pct >= ACTIVATION_GOAL_PCT
        open_time = rows[rows.apply(time_goal, axis=1) != "beyond"]
        for verdict, found in (
            ("meets", rows[saves & (rows.p_holm < ALPHA)]),
            ("undecided", open_time[saves[open_time.index]]),
            ("misses", open_time),
        ):
            if not found.empty:
                points[kind] = (found.loc[found.activation_saved_pct.idxmax()], verdict)
                break
        else:
            points[kind] = (None, NONE_WITHIN)
    return points


# --- the optimizer's floor -------------------------------------------------------------------

FLOOR_WORDS = "on Adam's floor"
# the allocator's peak at the floor differs between methods by a few kilobytes of its own
# bookkeeping, where a method above it still holds activations at its peak: megabytes
_FLOOR_TOLERANCE = 1e-4
# the unplanned step, eager and traced: the two always share a peak, so their agreeing never
# shows a floor
UNPLANNED = (REFERENCE, "graph")


def _activations_at_peak(part: pd.DataFrame) -> float:
    """One method's activation bytes at its simulated peak (its ``peak_part_bytes`` records,
    median over trials); NaN where the run recorded no parts (before them, or a baseline the
    simulator does not model)."""
    parts = part[part.metric == "peak_part_bytes"]
    acts = [
        v for v, e in zip(parts.value, parts.extra, strict=True) if e.get("part") == "activations"
    ]
    return float(np.median(acts)) if acts else np.nan


def _optimizer_floor(cell: pd.DataFrame) -> float:
    """The peak of one cell's optimizer update (parameters, gradients and Adam's moments, no
    activation alive), where every method's saving stops; NaN where no method reached it.

    Where the simulator's parts at the peak were recorded, a method whose peak holds no
    activation is on the floor and its measured peak is the floor. Runs before the parts only
    show it by its effect: two methods that keep different activations, the μ-TWO plan at two budgets
    or a plan and a checkpointing segmentation, measure the same lowest peak, which no activation
    can then be setting."""
    eager = cell[cell.measured.astype(bool) & (cell.mode_group == "eager")]
    with_parts = eager[eager.activations_at_peak_bytes.notna()]
    if not with_parts.empty:
        empty = with_parts[with_parts.activations_at_peak_bytes <= 0]
        return float(empty.peak_mem_bytes.min()) if not empty.empty else np.nan
    planned = eager[~eager.kind.isin(UNPLANNED)]
    if planned.empty:
        return np.nan
    lowest = eager.peak_mem_bytes.min()
    at_lowest = planned[planned.peak_mem_bytes <= lowest * (1 + _FLOOR_TOLERANCE)]
    return float(lowest) if len(at_lowest) >= 2 else np.nan


def is_on_floor(row) -> bool:
    """Whether a ``curve_table`` row's peak is Adam's floor (False where the table predates the
    column)."""
    found = row.get("on_floor", False)
    return bool(pd.notna(found) and found)


def _floor_columns(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each cell's ``optimizer_floor_bytes`` and, per measured method, whether its
    peak is that floor (``on_floor``)."""
    floor = pd.Series(np.nan, index=table.index)
    for _, cell in table.groupby(KEYS, sort=False):
        floor[cell.index] = _optimizer_floor(cell)
    on_floor = table.measured.astype(bool) & (
        table.peak_mem_bytes <= floor * (1 + _FLOOR_TOLERANCE)
    )
    return table.assign(optimizer_floor_bytes=floor, on_floor=on_floor)


def _trial_arm(times: pd.DataFrame) -> dict:
    """One method's iteration times indexed by trial as the arm ``tables.paired_rounds`` reads:
    trials, samples and whether each trial ran on a shared machine (no reading: not shared)."""
    return {
        "trials": [int(t) for t in times.index],
        "samples": [float(v) for v in times.value],
        "shared": [bool(s) for s in times.shared_machine.fillna(0)],
    }


def point_arm(point) -> SimpleNamespace:
    """A curve point's trial times as the arm ``tables.paired_rounds`` reads."""
    found = point.trial_times_ms
    return (
        SimpleNamespace(**json.loads(found))
        if isinstance(found, str)
        else SimpleNamespace(trials=None)
    )
