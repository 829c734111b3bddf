"""The report's memory-time curve (12_memory's records): every method's peak memory against its
iteration time per model and batch size, with the time's interval from the spread between
trials, the activation goal, and where our plan's curve lies against each baseline's.

A method's kind and budget live in the records' ``extra`` (``{"method": "mu_two", "budget":
0.5}``); its full name is the ``mode``. Times are paired by trial with the plain eager step
(``none``) of the same trial, so a trial's overhead cancels what the machine did while that
process ran; trials on a shared machine are dropped when enough clean ones remain.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import altair as alt
import numpy as np
import pandas as pd

from fwbench.measure.stats import paired_ratio_interval
from fwbench.pipeline.campaign import slug_without_trial
from fwbench.report.tables import extra_columns, on_shared_machine, paired_rounds
from fwbench.vocab import MEMORY_ACTIVATION_GOAL_PCT as ACTIVATION_GOAL_PCT
from fwbench.vocab import MEMORY_COMPILED_KINDS
from fwbench.vocab import MEMORY_OVERHEAD_GOAL_PCT as OVERHEAD_GOAL_PCT
from fwbench.vocab import MEMORY_SIM_ERROR_BAR_PCT as SIM_BAR_PCT

# a cell's settings beyond these (its slug less the trial, e.g. ``replay_random=False``) keep
# two cells of one model and batch size apart
KEYS = ["model", "batch_size", "device_name", "variant"]
REFERENCE = "none"
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
# the time model's figures count on quiet trials only, as the bar for it does
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


def shares_a_model(table: pd.DataFrame) -> pd.Series:
    """Per row, whether another cell (variant) ran the same model and batch size on the same
    device: only then does a sentence or a chart panel name the cell."""
    return table.groupby(KEYS[:-1]).variant.transform("nunique") > 1


def pooled_time_error(quiet: pd.DataFrame) -> dict:
    """The time model's error for one planned graph over the interleaved rounds of ``quiet``,
    its records from quiet trials.

    Each round gives the plan's step over the graph's; each trial predicts that multiple from
    its own profile. The rounds of every trial are pooled: the error is the predicted multiple
    over each round's measured one, a geometric mean with a t-interval over all the rounds. With
    three rounds a trial, one trial's interval is about ±10% on this VM, too wide to say whether
    a 5% bar holds; nine rounds from three trials narrow it. A round whose own contention
    reading says the machine was shared is left out, like a shared trial."""
    timed = quiet[quiet.metric == "measured_multiple"]
    predicted = quiet[quiet.metric == "predicted_multiple"].set_index("trial").value
    plan_scaled, graph, dropped = [], [], 0
    for row in timed.itertuples():
        rounds, graph_rounds = row.extra.get("round_ms"), row.extra.get("graph_round_ms")
        if not rounds or not graph_rounds or row.trial not in predicted.index:
            continue
        # runs before the per-round reading have none: every round counts
        shared = row.extra.get("round_shared") or [False] * len(rounds)
        for plan_ms, graph_ms, busy in zip(rounds, graph_rounds, shared, strict=True):
            if busy:
                dropped += 1
                continue
            # predicted / (plan / graph) per round, as the paired ratio graph / (plan / predicted)
            plan_scaled.append(plan_ms / predicted[row.trial])
            graph.append(graph_ms)
    if len(graph) < 2:
        return {}
    pooled = paired_ratio_interval(plan_scaled, graph)
    return {
        "time_error_pooled_pct": 100 * (pooled.ratio - 1),
        "time_error_low_pct": 100 * (pooled.low - 1),
        "time_error_high_pct": 100 * (pooled.high - 1),
        "time_rounds_pooled": len(graph),
        "time_rounds_shared": dropped,
    }


def _trial_interval(values: list[float]) -> tuple[float, float, float]:
    """Geometric mean of per-trial times with its t-interval (the paired interval against a
    constant arm of ones is exactly that)."""
    result = paired_ratio_interval(np.ones(len(values)), np.asarray(values, dtype=float))
    return result.ratio, result.low, result.high


def curve_table(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per model, batch size and method: the medians of its point metrics over trials,
    its iteration time (geometric mean over trials, t-interval) and its overhead against the
    eager step paired by trial (t-interval), and how many trials ran on a shared machine."""
    rows = memory_rows(meas)
    if rows.empty:
        return pd.DataFrame()
    if "shared_machine" not in rows:
        rows = rows.assign(shared_machine=False)
    out = []
    for key, group in rows.groupby(KEYS, sort=True):
        times = group[group.metric == "iter_time_ms"]
        ref = times[times["mode"] == REFERENCE].set_index("trial")
        for mode, part in group.groupby("mode", sort=False):
            first = part.iloc[0]
            row = {
                **dict(zip(KEYS, key, strict=True)),
                "method": mode,
                "kind": first.method,
                "budget": first.budget,
                "measured": not bool(first.simulated_only),
                "swap_bandwidth_gbs": first.swap_bandwidth_gbs,
            }
            # the bar for the time model holds on quiet trials (contention below 10%)
            quiet_part = part[~on_shared_machine(part)]
            timed = part[part.metric == "sim_time_error_pct"]
            quiet = quiet_part[quiet_part.metric == "sim_time_error_pct"]
            for metric in [*POINT_METRICS, *QUIET_METRICS]:
                source = quiet_part if metric in QUIET_METRICS else part
                values = source[source.metric == metric].value
                row[metric] = float(values.median()) if not values.empty else np.nan
            row["sim_time_worst_pct"] = (
                float(quiet.value.abs().max()) if not quiet.empty else np.nan
            )
            row["quiet_time_trials"] = len(quiet)
            # runs before the interleaved rounds compared the profiled step itself with the
            # measured time, so the two windows' difference counted as the model's error
            row["time_anchored"] = bool(timed.timed_by.notna().any()) if not timed.empty else None
            row |= pooled_time_error(quiet_part)
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
                if mode == REFERENCE
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


def best_within(table: pd.DataFrame, overhead_pct: float = OVERHEAD_GOAL_PCT) -> dict[str, object]:
    """Per goal kind (our plan, checkpointing), the measured row that saves the most activation
    memory within ``overhead_pct`` of added time, or None where no row of that kind stays within
    it. Simulated rows (swap) never count: their saving was not measured. ``table``: one model
    and batch size, with ``kind``, ``measured``, ``overhead_pct`` and ``activation_saved_pct``
    (``curve_table``'s rows, or 12_memory's summary of one trial)."""
    best = {}
    for kind in GOAL_KINDS:
        rows = table[
            table.measured.astype(bool)
            & (table.kind == kind)
            & (table.overhead_pct <= overhead_pct)
        ]
        best[kind] = None if rows.empty else rows.loc[rows.activation_saved_pct.idxmax()]
    return best


# goal_points' verdict where a kind ran but every point cost more than the time goal
NONE_WITHIN = f"none within +{OVERHEAD_GOAL_PCT:g}%"


def goal_points(group: pd.DataFrame) -> dict[str, tuple[object, str]]:
    """Per goal kind, its row that saves the most within the time goal (``best_within``) and its
    verdict against the activation goal: ``meets`` or ``misses``; without such a row, None and
    ``NONE_WITHIN`` where the kind ran, ``not run`` where it did not."""
    points = {}
    for kind, best in best_within(group).items():
        if best is not None:
            met = best.activation_saved_pct >= ACTIVATION_GOAL_PCT
            points[kind] = (best, "meets" if met else "misses")
        else:
            ran = (group.measured.astype(bool) & (group.kind == kind)).any()
            points[kind] = (None, NONE_WITHIN if ran else "not run")
    return points


def _point_at_peak(points: pd.DataFrame, peak: float):
    """The fastest point of our curve at or below a given peak: what our plan offers there; None
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


def _arm(point) -> SimpleNamespace:
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
    found = paired_rounds(_arm(theirs), _arm(ours))
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
        if verdict is None:  # one trial: the point estimates alone
            verdict = "on or below" if point.iter_time_ms <= row.iter_time_ms else "above"
        where = (
            "the trials do not tell the two apart, so the curves meet there"
            if verdict == "tied"
            else f"our curve lies {verdict} it"
        )
        words = (
            f"at {row.method}'s peak of {mib:.0f} MiB our plan takes {point.iter_time_ms:.0f} ms "
            f"against its {row.iter_time_ms:.0f} ms ({paired}): {where}"
        )
        return words + _why_slower(point) if verdict == "above" else words
    lo, hi = ours.peak_mem_bytes.min(), ours.peak_mem_bytes.max()
    lowest = ours.loc[ours.peak_mem_bytes.idxmin()]
    if row.peak_mem_bytes < lo and lowest.iter_time_ms > row.iter_time_ms:
        # less memory than our smallest plan, and no more time: the baseline beats our curve
        verdict, paired = _paired(lowest, row)
        time_words = "a time the trials do not tell apart" if verdict == "tied" else "less time"
        return (
            f"{row.method} reaches {mib:.0f} MiB in {row.iter_time_ms:.0f} ms: less memory than "
            f"our plan's lowest point ({lowest.method}: {lo / 2**20:.0f} MiB in "
            f"{lowest.iter_time_ms:.0f} ms), in {time_words} ({paired}): our curve lies above it"
            + _why_slower(lowest)
        )
    side = "below" if row.peak_mem_bytes < lo else "above"
    return (
        f"{row.method} reaches {mib:.0f} MiB, {side} every peak our plan reached "
        f"({lo / 2**20:.0f}-{hi / 2**20:.0f} MiB), so the curves do not meet there"
    )


def _why_slower(plan) -> str:
    """Why a plan point costs more than checkpointing, from its own records: whether the time
    model foresaw the cost (then it is the planner's choice, not the machine), and how much of
    its replay runs a node more than once (each recomputed activation replays its own closure,
    where checkpointing replays a block's forward once for all the activations in it)."""
    parts = []
    predicted, measured = plan.get("predicted_multiple"), plan.get("measured_multiple")
    if pd.notna(predicted) and pd.notna(measured):
        if 100 * abs(predicted / measured - 1) <= SIM_BAR_PCT:
            parts.append(
                f"the time model foresaw {plan.method}'s cost ({predicted:.2f}× the unplanned "
                f"graph predicted, {measured:.2f}× measured), so it is the plan's choice of "
                "what to replay, not the machine"
            )
        else:
            parts.append(
                f"the time model predicted {predicted:.2f}× the unplanned graph for "
                f"{plan.method} where {measured:.2f}× was measured, so part of its cost lies "
                "outside the model"
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
    """Per model and batch size: the activation memory saved within +33% time by our plan and
    by the checkpointing baselines against the >= 50% goal, where our curve lies against each
    baseline at equal peak memory, the simulator's errors and the float64 proof."""
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
        for kind, words in (("mu_two", "our plan"), ("checkpoint", "torch.utils.checkpoint")):
            best, verdict = points[kind]
            if best is None:
                goal.append(
                    f"{words}: no point within +{OVERHEAD_GOAL_PCT:g}% time"
                    if verdict == NONE_WITHIN
                    else f"{words}: {verdict}"
                )
                continue
            goal.append(
                f"{words} saves {best.activation_saved_pct:.1f}% of the activation memory at "
                f"{overhead_words(best)} ({best.method}; {verdict} the "
                f"{ACTIVATION_GOAL_PCT:g}% goal)"
            )
        out.append(f"{name}: " + "; ".join(goal) + ".")
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


def has_pooled_rounds(timed: pd.DataFrame) -> bool:
    """Whether every timed graph has a pooled error over interleaved rounds: then the pooled
    intervals decide the time bar, else the trials do (``_time_words``)."""
    return "time_error_pooled_pct" in timed and timed.time_error_pooled_pct.notna().all()


def _time_words(timed: pd.DataFrame) -> tuple[str, str]:
    """The time model's error over planned graphs, and whether the 5% bar holds: ``yes`` where
    every pooled interval lies within ±5%, ``no`` where one lies wholly beyond it, ``not shown``
    otherwise (an interval straddles the bar: the rounds cannot tell). Without pooled rounds the
    trials decide, and a graph with one quiet trial decides nothing: one reading has no interval
    (in one trial of memory_breakdown, the traced and the eager step, one computation, differed
    by up to 27%)."""
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
    if not has_pooled_rounds(timed):
        decided = timed[timed.quiet_time_trials >= 2]
        undecided = len(timed) - len(decided)
        if undecided:
            words += (
                f"; {undecided} of {len(timed)} graphs have one quiet trial and no interleaved "
                "rounds, so no interval"
            )
        if (decided.sim_time_worst_pct > SIM_BAR_PCT).any():
            return words, "no"
        return words, "not shown" if undecided else "yes"
    worst = timed.loc[timed.time_error_pooled_pct.abs().idxmax()]
    low, high = timed.time_error_low_pct, timed.time_error_high_pct
    inside = ((low >= -SIM_BAR_PCT) & (high <= SIM_BAR_PCT)).sum()
    beyond = ((low > SIM_BAR_PCT) | (high < -SIM_BAR_PCT)).sum()
    shared = int(timed.get("time_rounds_shared", pd.Series(dtype=float)).fillna(0).sum())
    left_out = f"; {shared} rounds on a shared machine left out" if shared else ""
    words += (
        f". Pooled over the quiet trials' interleaved rounds "
        f"({int(timed.time_rounds_pooled.min())} or more a graph{left_out}), the largest error is "
        f"{worst.time_error_pooled_pct:+.1f}% at {worst.method} (95% interval "
        f"{worst.time_error_low_pct:+.1f}% to {worst.time_error_high_pct:+.1f}%), and "
        f"{inside} of {len(timed)} graphs have their interval inside ±{SIM_BAR_PCT:g}%"
    )
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
            f"{name}, compiled: our plan at budget {row.budget:g} peaks at {eager / 2**20:.0f} MiB "
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
