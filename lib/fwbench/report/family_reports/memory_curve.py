"""The report's memory-time curve (12_memory's records): every method's peak memory against its
iteration time per model and batch size, with the time's interval from the spread between
trials, the activation goal, and where the μ-TWO plan's curve lies against each baseline's.

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

from fwbench.measure.stats import paired_ratio_interval
from fwbench.report.tables import extra_columns, on_shared_machine, paired_rounds
from fwbench.results.layout import slug_without_trial
from fwbench.vocab import CONFIDENCE, MEMORY_COMPILED_KINDS
from fwbench.vocab import MEMORY_ACTIVATION_GOAL_PCT as ACTIVATION_GOAL_PCT
from fwbench.vocab import MEMORY_OVERHEAD_GOAL_PCT as OVERHEAD_GOAL_PCT
from fwbench.vocab import MEMORY_SIM_ERROR_BAR_PCT as SIM_BAR_PCT

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
POINT_METRICS = [
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
QUIET_METRICS = ("sim_time_error_pct", "predicted_multiple", "measured_multiple")
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


def time_error_over_trials(quiet: pd.DataFrame) -> dict:
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
            for metric in [*POINT_METRICS, *QUIET_METRICS]:
                source = quiet_part if metric in QUIET_METRICS else part
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
            row |= time_error_over_trials(quiet_part)
            # only a compilation with Inductor's reorder_for_locality pass off records the pass
            row["inductor_locality"] = not part.inductor_locality.eq(False).any()
            # runs before the allocator was recorded leave it empty
            row["allocator"] = ", ".join(sorted(set(part.allocator.dropna()))) or None
            mine = times[times["mode"] == mode].set_index("trial")
            row["trials"] = len(mine)
            row["shared_trials"] = int(on_shared_machine(mine).sum())
            if not mine.empty:
                row["iter_time_ms"], row["time_low"], row["time_high"] = _trial_interval(
                    list(mine.value)
                )
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


def goal_points(group: pd.DataFrame, kinds=GOAL_KINDS) -> dict[str, tuple[object, str]]:
    """Per goal kind, the verdict of its best point and the point: ``meets`` with the point that
    saves the most among those that meet; else ``undecided`` with the most saving undecided
    point; else ``misses`` with the most saving point whose time is not shown beyond the goal;
    None and ``NONE_WITHIN`` where every point's time is shown beyond it, ``not run`` where the
    kind did not run (``no overhead measured`` where no point has an overhead). ``group``: one
    cell's ``curve_table`` rows; ``kinds``: the kinds to judge (JAX's segmentings too, for the
    memory index)."""
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
        verdicts = rows.apply(goal_verdict, axis=1)
        for verdict in ("meets", "undecided"):
            found = rows[verdicts == verdict]
            if not found.empty:
                points[kind] = (found.loc[found.activation_saved_pct.idxmax()], verdict)
                break
        else:
            open_time = rows[rows.apply(time_goal, axis=1) != "beyond"]
            points[kind] = (
                (open_time.loc[open_time.activation_saved_pct.idxmax()], "misses")
                if not open_time.empty
                else (None, NONE_WITHIN)
            )
    return points


def goal_words(best, verdict: str) -> str:
    """A goal point's verdict in words, with why where it is undecided and the floor's label
    where its peak is Adam's (``goal_points``)."""
    if verdict == "undecided":
        why = (
            "no interval on its time"
            if pd.isna(best.get("overhead_low", np.nan))
            else f"its time's interval holds +{OVERHEAD_GOAL_PCT:g}%"
        )
        words = f"the {ACTIVATION_GOAL_PCT:g}% goal undecided: {why}"
    else:
        words = f"{verdict} the {ACTIVATION_GOAL_PCT:g}% goal"
    if is_on_floor(best):
        words += f"; {FLOOR_WORDS}: every method that reaches it saves the same"
    return words


def _saves_more_undecided(group: pd.DataFrame, best) -> str:
    """Where a kind meets the goal, the point of that kind that saves more but whose time the
    trials leave undecided: the most the goal may allow, which the trials do not show."""
    same = group[group.measured.astype(bool) & (group.kind == best.kind)]
    more = same[
        (same.activation_saved_pct > best.activation_saved_pct)
        & (same.apply(goal_verdict, axis=1) == "undecided")
    ]
    if more.empty:
        return ""
    top = more.loc[more.activation_saved_pct.idxmax()]
    return (
        f"; {top.method} saves more, {top.activation_saved_pct:.1f}%, at {overhead_words(top)}: "
        "undecided"
    )


# --- the optimizer's floor -------------------------------------------------------------------

FLOOR_WORDS = "on Adam's floor"
# the allocator's peak at the floor differs between methods by a few kilobytes of its own
# bookkeeping, where a method above it still holds activations at its peak: megabytes
FLOOR_TOLERANCE = 1e-4
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


def optimizer_floor(cell: pd.DataFrame) -> float:
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
    at_lowest = planned[planned.peak_mem_bytes <= lowest * (1 + FLOOR_TOLERANCE)]
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
        floor[cell.index] = optimizer_floor(cell)
    on_floor = table.measured.astype(bool) & (table.peak_mem_bytes <= floor * (1 + FLOOR_TOLERANCE))
    return table.assign(optimizer_floor_bytes=floor, on_floor=on_floor)


def floor_sentence(name: str, group: pd.DataFrame) -> str | None:
    """Which of one cell's methods end on Adam's floor and what that does to their savings;
    None where none does."""
    on = group[group.on_floor.astype(bool)]
    if on.empty:
        return None
    floor = on.optimizer_floor_bytes.iloc[0]
    saved = on.activation_saved_pct.median()
    verb = "ends" if len(on) == 1 else "end"
    return (
        f"{name}: {', '.join(on.method)} {verb} on Adam's floor, a peak of "
        f"{floor / 2**20:.0f} MiB in the optimizer update (parameters, gradients and Adam's "
        "moments, no activation alive): no method can save more than the floor's "
        f"{saved:.1f}% of the activation memory, so there the saving measures the floor, not "
        "the method."
    )


def _point_at_peak(points: pd.DataFrame, peak: float):
    """The fastest point of the μ-TWO curve at or below a given peak: what that plan offers there; None
    where the peak lies outside the curve's range."""
    if points.empty or not points.peak_mem_bytes.min() <= peak <= points.peak_mem_bytes.max():
        return None
    under = points[points.peak_mem_bytes <= peak]
    return under.loc[under.iter_time_ms.idxmin()]


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


def _paired(ours, theirs) -> tuple[str | None, str]:
    """Our point's time against a baseline's, trial by trial (each trial ran both, interleaved,
    so what a trial shared cancels in its ratio): ``below``, ``above`` or ``tied`` where the
    paired interval of ours/theirs excludes 1 or not, and the words for it; None with fewer
    than two trials in common."""
    found = paired_rounds(point_arm(theirs), point_arm(ours))
    if found is None:
        return None, "one trial in common, no interval"
    paired = paired_ratio_interval(found[0], found[1])
    verdict = "below" if paired.high < 1 else "above" if paired.low > 1 else "tied"
    words = (
        f"ours/its {paired.ratio:.3f} [{paired.low:.3f}, {paired.high:.3f}] over "
        f"{paired.rounds} paired trials"
    )
    return verdict, words


def _against(ours: pd.DataFrame, row) -> str:
    """Where our curve lies against one baseline point, and why where it lies above it."""
    point = _point_at_peak(ours, row.peak_mem_bytes)
    mib = row.peak_mem_bytes / 2**20
    if point is not None:
        verdict, paired = _paired(point, row)
        where = {
            "tied": "the trials do not tell the two apart, so the curves meet there",
            # two point estimates of one process are not a comparison of the methods
            None: "one trial does not place the μ-TWO curve against it",
        }.get(verdict, f"the μ-TWO curve lies {verdict} it")
        words = (
            f"at {row.method}'s peak of {mib:.0f} MiB the μ-TWO plan takes {point.iter_time_ms:.0f} ms "
            f"against its {row.iter_time_ms:.0f} ms ({paired}): {where}"
        )
        return words + _why_slower(point) if verdict == "above" else words
    lo, hi = ours.peak_mem_bytes.min(), ours.peak_mem_bytes.max()
    lowest = ours.loc[ours.peak_mem_bytes.idxmin()]
    if row.peak_mem_bytes < lo and lowest.iter_time_ms > row.iter_time_ms:
        # less memory than our smallest plan, and no more time: the baseline beats our curve
        verdict, paired = _paired(lowest, row)
        time_words = {
            "tied": "a time the trials do not tell apart",
            None: "a time one trial cannot compare",
        }.get(verdict, "less time")
        return (
            f"{row.method} reaches {mib:.0f} MiB in {row.iter_time_ms:.0f} ms: less memory than "
            f"the μ-TWO plan's lowest point ({lowest.method}: {lo / 2**20:.0f} MiB in "
            f"{lowest.iter_time_ms:.0f} ms), in {time_words} ({paired}): the μ-TWO curve lies above it"
            + _why_slower(lowest)
        )
    side = "below" if row.peak_mem_bytes < lo else "above"
    return (
        f"{row.method} reaches {mib:.0f} MiB, {side} every peak the μ-TWO plan reached "
        f"({lo / 2**20:.0f}-{hi / 2**20:.0f} MiB), so the curves do not meet there"
    )


def _why_slower(plan) -> str:
    """Why a plan point costs more than checkpointing, from its own records: whether the time
    model foresaw the cost (its error's interval over trials inside ±5%: then it is the
    planner's choice, not the machine; wholly beyond: the machine's; else the trials cannot
    tell), and how much of
    its replay runs a node more than once (each recomputed activation replays its own closure,
    where checkpointing replays a block's forward once for all the activations in it)."""
    parts = []
    predicted, measured = plan.get("predicted_multiple"), plan.get("measured_multiple")
    if pd.notna(predicted) and pd.notna(measured):
        multiples = (
            f"{predicted:.2f}× the unplanned graph predicted for {plan.method}, {measured:.2f}× "
            "measured"
        )
        bar = time_bar(plan)
        over_trials = (
            "one trial: no interval"
            if pd.isna(plan.get("time_error_low_pct", np.nan))
            else f"its error over trials {interval_words(plan, name_the_graph=False)}"
        )
        if bar == "inside":
            parts.append(
                f"the time model foresaw the cost ({multiples}; {over_trials}, inside "
                f"±{SIM_BAR_PCT:g}%), so it is the plan's choice of what to replay, not the "
                "machine"
            )
        elif bar == "beyond":
            parts.append(
                f"part of the cost lies outside the time model ({multiples}; {over_trials}, "
                f"beyond ±{SIM_BAR_PCT:g}%)"
            )
        else:
            parts.append(
                f"the trials do not show whether the time model foresaw the cost ({multiples}; "
                f"{over_trials})"
            )
    repeat, replay = plan.get("replay_repeat_pct"), plan.get("replay_ms")
    if pd.notna(repeat) and pd.notna(replay):
        parts.append(
            f"{plan.method} replays {replay:,.0f} ms of profiled forward nodes, {repeat:.0f}% "
            "of it on nodes it replays more than once, since each recomputed activation "
            "replays its own closure where torch.utils.checkpoint replays a block once"
        )
    return "; why: " + "; ".join(parts) if parts else ""


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def overhead_words(row) -> str:
    if pd.isna(row.get("overhead_low", np.nan)):
        alone = " (one trial: no interval)" if row.get("trials") == 1 else ""
        return f"{_pct(row.overhead_pct)} time{alone}"
    return f"{_pct(row.overhead_pct)} [{_pct(row.overhead_low)}, {_pct(row.overhead_high)}] time"


def sentences(table: pd.DataFrame) -> list[str]:
    """Per model and batch size: the activation memory the μ-TWO plan and the checkpointing baselines
    save against the goal (>= 50% within +33% time, decided by the overhead's interval over
    trials), the methods that end on Adam's floor, where our curve lies against each baseline at
    equal peak memory, the simulator's errors over trials and the float64 proof."""
    if table.empty:
        return []
    out = []
    shared = shares_a_model(table)
    for (model, batch, device, variant), group in table.groupby(KEYS, sort=True):
        name = f"{MODEL_WORDS.get(model, model)} at batch {batch} on {device}"
        if shared[group.index].any():
            name += f" ({variant})"
        measured = group[group.measured]
        goal = []
        points = goal_points(group)
        for kind, words in (("mu_two", "the μ-TWO plan"), ("checkpoint", "torch.utils.checkpoint")):
            best, verdict = points[kind]
            if best is None:
                goal.append(
                    f"{words}: every point's time interval lies above +{OVERHEAD_GOAL_PCT:g}%"
                    if verdict == NONE_WITHIN
                    else f"{words}: {verdict}"
                )
                continue
            goal.append(
                f"{words} saves {best.activation_saved_pct:.1f}% of the activation memory at "
                f"{overhead_words(best)} ({best.method}; {goal_words(best, verdict)}"
                f"{_saves_more_undecided(group, best) if verdict == 'meets' else ''})"
            )
        out.append(f"{name}: " + "; ".join(goal) + ".")
        floor = floor_sentence(name, measured)
        if floor:
            out.append(floor)
        for group_name in ("eager", "compiled"):
            ours = measured[measured.kind == OURS[group_name]]
            if ours.empty:
                continue
            # our curve starts at the unplanned step: eager, or the traced step compiled whole
            start = REFERENCE if group_name == "eager" else COMPILED_START
            ours = pd.concat([ours, measured[measured.kind == start]])
            for row in measured[measured.kind.isin(BASELINES[group_name])].itertuples():
                out.append(f"{name}, {group_name}: " + _against(ours, row) + ".")
        out += _compiled_sentences(name, measured)
        bars = simulator_bars(group)
        if bars:
            within, which = bars["peak_within"], "each"
            if bars["time_within"] == "not checked":
                # the verdict is the peak's alone: say so, not "each"
                which = "the peak"
            elif within == "yes":
                within = bars["time_within"]
            out.append(
                f"{name}: over {bars['planned']} planned graphs the simulator's largest error is "
                f"{bars['worst_peak_pct']:.2f}% on the peak and {bars['time_words']}; {which} "
                f"within {SIM_BAR_PCT:g}%: {within}. The float64 proof's largest difference is "
                f"{bars['exact_max_abs_diff']:.1e}."
            )
        swaps = group[~group.measured]
        if not swaps.empty:
            best = swaps.loc[swaps.activation_saved_pct.idxmax()]
            out.append(
                f"{name}, simulated only: with swapping at {best.swap_bandwidth_gbs:g} GB/s "
                f"the planner reaches {best.activation_saved_pct:.1f}% of the "
                f"activation memory at {_pct(best.overhead_pct)} predicted time ({best.method})."
            )
    return out


def simulator_bars(group: pd.DataFrame) -> dict:
    """For one cell's rows (``curve_table``), the simulator against its 5% bars over our planned
    graphs: the largest peak error and whether it is within the bar, the time model's words and
    verdict (``_time_words``; "not checked" where no quiet trial timed a plan), and the float64
    proof's largest difference. Empty where the cell has no planned graph."""
    planned = group[group.kind.isin(["mu_two"]) & group.sim_peak_error_pct.notna()]
    if planned.empty:
        return {}
    worst_peak = planned.sim_peak_error_pct.abs().max()
    timed = planned[planned.sim_time_error_pct.notna()]
    if timed.empty:
        time_words, time_within = "no quiet trial checked the time", "not checked"
    else:
        time_words, time_within = _time_words(timed)
    return {
        "planned": len(planned),
        "worst_peak_pct": worst_peak,
        "peak_within": "yes" if worst_peak <= SIM_BAR_PCT else "no",
        "time_words": time_words,
        "time_within": time_within,
        "timed": timed,
        "exact_max_abs_diff": planned.exact_max_abs_diff.max(),
    }


def time_bar(row) -> str:
    """One planned graph's time error against the 5% bar, by its interval over trials:
    ``inside`` where the whole interval lies within ±5%, ``beyond`` where it lies wholly outside,
    ``undecided`` where it straddles the bar or one trial gave no interval."""
    low, high = row.get("time_error_low_pct", np.nan), row.get("time_error_high_pct", np.nan)
    if pd.isna(low) or pd.isna(high):
        return "undecided"
    if -SIM_BAR_PCT <= low and high <= SIM_BAR_PCT:
        return "inside"
    if low > SIM_BAR_PCT or high < -SIM_BAR_PCT:
        return "beyond"
    return "undecided"


def widest_time_interval(timed: pd.DataFrame):
    """The planned graph whose time error interval reaches farthest from zero, the one that
    decides the bar (the largest error may lie inside while another's interval straddles it);
    None where no graph has an interval."""
    spread = timed.dropna(subset=["time_error_low_pct", "time_error_high_pct"])
    if spread.empty:
        return None
    reach = pd.concat([spread.time_error_low_pct.abs(), spread.time_error_high_pct.abs()], axis=1)
    return spread.loc[reach.max(axis=1).idxmax()]


def interval_words(row, name_the_graph: bool = True) -> str:
    """A graph's time error over trials: mean, interval and the per-trial errors it comes from."""
    errors = ", ".join(f"{e:+.1f}%" for e in json.loads(row.time_trial_errors_pct))
    where = f" at {row.method}" if name_the_graph else ""
    return (
        f"{row.time_error_mean_pct:+.1f}% [{row.time_error_low_pct:+.1f}%, "
        f"{row.time_error_high_pct:+.1f}%]{where} over {int(row.time_error_trials)} trials "
        f"({errors})"
    )


def _time_words(timed: pd.DataFrame) -> tuple[str, str]:
    """The time model's error over planned graphs, and whether the 5% bar holds: ``yes`` where
    every graph's interval over trials lies inside ±5%, ``no`` where one lies wholly beyond it,
    ``not shown`` otherwise (an interval straddles the bar, or a graph has one quiet trial and
    so no interval: in one trial of memory_breakdown, the traced and the eager step, one
    computation, differed by up to 27%)."""
    worst_time = timed.sim_time_worst_pct.max()
    what = (
        "the plan's time as a multiple of the unplanned graph's"
        if timed.time_anchored.all()
        else "the profiled step plus the replay against the measured time, an "
        "earlier time model that counts the drift between two timing windows"
    )
    words = (
        f"{timed.sim_time_error_pct.abs().max():.1f}% on the time ({what}, median over "
        f"{int(timed.quiet_time_trials.min())} or more quiet trials; "
        f"{worst_time:.1f}% in the worst single trial)"
    )
    # a row names every allocator its trials ran on, joined with ", " (curve_table)
    named = timed.get("allocator", pd.Series(dtype=object)).dropna()
    allocators = sorted({a for joined in named for a in joined.split(", ")})
    if allocators:
        words += f"; the steps' malloc: {' and '.join(allocators)}"
    bars = timed.apply(time_bar, axis=1)
    inside, beyond = int((bars == "inside").sum()), int((bars == "beyond").sum())
    alone = int((~(timed.time_error_trials >= 2)).sum())
    widest = widest_time_interval(timed)
    if widest is not None:
        shared = int(timed.time_rounds_shared.fillna(0).sum())
        left_out = f", {shared} rounds on a shared machine left out" if shared else ""
        words += (
            ". With the trial as the unit (each quiet trial's error from its own rounds"
            f"{left_out}; a 95% t-interval over the trials), the interval reaching farthest is "
            f"{interval_words(widest)}, and {inside} of {len(timed)} graphs have their interval "
            f"inside ±{SIM_BAR_PCT:g}%"
        )
    if alone:
        words += f"; {alone} of {len(timed)} graphs have one quiet trial: no interval"
    return words, "no" if beyond else ("yes" if inside == len(timed) else "not shown")


def _compiled_sentences(name: str, measured: pd.DataFrame) -> list[str]:
    """How much of each compiled plan's saving survives compilation: its eager peak, its compiled
    peak, the traced step compiled without a plan (``compiled_graph``, where the run has it: it
    holds the optimizer update as the plan does) and the model compiled without a budget
    (``compile_budget_1.0``, the optimizer left eager). The first pair says what compiling did to
    the plan, the second what compiling the whole step did on its own."""
    out = []
    by_method = measured.set_index("method")
    unplanned = by_method.peak_mem_bytes.get("compile_budget_1.0")
    whole = by_method.peak_mem_bytes.get(COMPILED_START)
    for row in measured[measured.kind == "compiled_mu_two"].itertuples():
        eager = by_method.peak_mem_bytes.get(f"mu_two@{row.budget:g}")
        if eager is None or pd.isna(eager):
            continue
        words = (
            f"{name}, compiled: the μ-TWO plan at budget {row.budget:g} peaks at {eager / 2**20:.0f} MiB "
            f"run eagerly and {row.peak_mem_bytes / 2**20:.0f} MiB compiled"
        )
        if whole is not None and not pd.isna(whole):
            change = 100 * (row.peak_mem_bytes / whole - 1)
            words += (
                f"; the same traced step without a plan, compiled, peaks at {whole / 2**20:.0f} "
                f"MiB, so compiled the plan changes the peak by {change:+.1f}%"
            )
        if unplanned is not None and not pd.isna(unplanned):
            words += f" (the model compiled without a budget: {unplanned / 2**20:.0f} MiB)"
        words += _graph_words(row, by_method)
        if not row.inductor_locality:
            words += "; every compilation ran with Inductor's reorder_for_locality pass off"
        out.append(words + ".")
    return out


def _graph_words(row, by_method: pd.DataFrame) -> str:
    """Into how many graphs torch.compile cut a compiled plan, against the unplanned step, and
    how many random ops the plan replays (each replay, and each capture of the generator state it
    replays from, is a call torch.compile does not trace); empty for runs that did not count."""
    graphs = getattr(row, "compiled_graphs", np.nan)
    if pd.isna(graphs):
        return ""
    words = f"; compiled into {graphs:.0f} graphs"
    whole = by_method.get("compiled_graphs", pd.Series(dtype=float)).get(COMPILED_START)
    if whole is not None and not pd.isna(whole):
        words += f" where the unplanned step made {whole:.0f}"
    replays = getattr(row, "random_replays", np.nan)
    if not pd.isna(replays):
        words += (
            f", its plan running {replays:.0f} replays of a random op from a saved generator state"
        )
    return words
