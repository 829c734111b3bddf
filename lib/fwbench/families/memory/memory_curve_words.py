"""The memory-time curve in words (``memory_curve``'s table): per model and batch size, the
activation goal's verdict for each planner, the methods on Adam's floor, where the μ-TWO curve
lies against each baseline at equal peak memory (paired by trial), what compiling did to a plan,
and the simulator against its bars over trials.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from fwbench.families.memory.memory_curve import (
    BASELINES,
    COMPILED_START,
    FLOOR_WORDS,
    KEYS,
    MODEL_WORDS,
    NONE_WITHIN,
    OURS,
    REFERENCE,
    goal_points,
    is_on_floor,
    point_arm,
    shares_a_model,
    time_goal,
)
from fwbench.measure.stats import paired_ratio_interval
from fwbench.report.tables import paired_rounds
from fwbench.vocab import MEMORY_ACTIVATION_GOAL_PCT as ACTIVATION_GOAL_PCT
from fwbench.vocab import MEMORY_OVERHEAD_GOAL_PCT as OVERHEAD_GOAL_PCT
from fwbench.vocab import MEMORY_SIM_ERROR_BAR_PCT as SIM_BAR_PCT


def _goal_words(best, verdict: str) -> str:
    """A goal point's verdict in words, with Holm's adjustment where it was chosen among several,
    why where it is undecided, what the μ-TWO plan's budget settles, and the floor's label where
    its peak is Adam's (``goal_points``)."""
    among = best.get("points", 0)
    holm = (
        f"Holm-adjusted p {best.p_holm:.3g} across its {among:.0f} points"
        if among > 1 and pd.notna(best.get("p_holm", np.nan))
        else None
    )
    if verdict == "undecided":
        if pd.isna(best.get("overhead_low", np.nan)):
            why = "no interval on its time"
        elif time_goal(best) == "within" and holm:
            why = f"its time is within +{OVERHEAD_GOAL_PCT:g}% alone but not after {holm}"
        else:
            why = f"its time's interval holds +{OVERHEAD_GOAL_PCT:g}%"
        words = f"the {ACTIVATION_GOAL_PCT:g}% goal undecided: {why}"
    else:
        words = f"{verdict} the {ACTIVATION_GOAL_PCT:g}% goal"
        if verdict == "meets" and holm:
            words += f" ({holm})"
    if best.kind == "mu_two" and verdict in ("meets", "undecided"):
        # a budget of b leaves about b of the activations: the saving is the plan's by design
        words += "; its budget sets the saving, so only the time is tested"
    if is_on_floor(best):
        words += f"; {FLOOR_WORDS}: every method that reaches it saves the same"
    return words


def _saves_more_undecided(group: pd.DataFrame, best) -> str:
    """Where a kind meets the goal, the point of that kind that saves more but whose time the
    trials do not show beyond the goal: the most the goal may allow, which the trials do not
    show."""
    same = group[group.measured.astype(bool) & (group.kind == best.kind)]
    more = same[
        (same.activation_saved_pct > best.activation_saved_pct)
        & (same.apply(time_goal, axis=1) != "beyond")
    ]
    if more.empty:
        return ""
    top = more.loc[more.activation_saved_pct.idxmax()]
    return (
        f"; {top.method} saves more, {top.activation_saved_pct:.1f}%, at {overhead_words(top)}: "
        "undecided"
    )


def _floor_sentence(name: str, group: pd.DataFrame) -> str | None:
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
                f"{overhead_words(best)} ({best.method}; {_goal_words(best, verdict)}"
                f"{_saves_more_undecided(group, best) if verdict == 'meets' else ''})"
            )
        out.append(f"{name}: " + "; ".join(goal) + ".")
        floor = _floor_sentence(name, measured)
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
