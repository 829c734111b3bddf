"""Sentences generated from the numbers: the executive summary and the methodology of a report.

Nothing here is written by hand about results: each sentence is a template filled from a row of
the comparison matrix (or another analysis table), so the text cannot drift from the data.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from fwbench import vocab
from fwbench.measure import verdicts
from fwbench.measure.meters.contention import SHARED_FRACTION
from fwbench.report import regressions, trust
from fwbench.report.tables import (
    MIN_CLEAN_ROUNDS,
    PAIRED_INTERVAL,
    SAMPLE_SOURCE_TEXT,
    commit_words,
    energy_unavailable_reasons,
    on_shared_machine,
)
from fwbench.vocab import CUT, DEFAULT_MODE, kind_label, model_label, setting_words


def times(x: float) -> str:
    return f"{x:.2f}×"


def interval(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]"


def ratio_sentence(row) -> str:
    """One comparison-matrix row as a sentence, with its verdict and its design."""
    where = (
        f"on {model_label(row.model)} at batch {row.batch_size} in "
        f"{setting_words(row.precision, row.threads)} "
        f"on {row.device_name or row.device}"
    )
    label = "best modes" if row.comparison == "best" else "defaults"
    if (row.jax_variant, row.torch_variant) == (DEFAULT_MODE["jax"], DEFAULT_MODE["torch"]):
        label = "best modes and defaults" if row.comparison == "best" else label
    modes = f"{label}: JAX {row.jax_variant} vs PyTorch {row.torch_variant}; {_design_words(row)}"
    ratio = f"JAX ÷ PyTorch throughput {times(row.ratio)} {interval(row.ci_low, row.ci_high)}"
    if row.winner == verdicts.EQUIVALENT:
        return (
            f"JAX and PyTorch are {verdicts.EQUIVALENT_WORDS} {where} ({modes}; {ratio}, its 90% "
            f"interval {interval(row.ci90_low, row.ci90_high)} inside [0.95, 1.05])."
        )
    if row.winner == verdicts.INCONCLUSIVE:
        more = getattr(row, "runs_to_decide", float("nan"))
        need = (
            f"; about {more:.0f} runs of this size in all would decide it" if more == more else ""
        )
        return f"Inconclusive {where} ({modes}; {ratio}{need})."
    if row.winner == verdicts.WITHIN_ONE_RUN:
        return f"Within one run {where} ({modes}): {ratio}, no between-run term, so no winner."
    if row.winner == verdicts.PICKED_ON_ROUNDS:
        return (
            f"No verdict {where} ({modes}): {ratio}; a mode was picked as the fastest of several "
            "on these same rounds, which favours it, so no winner is called (a tuning run picks "
            "modes apart: params/tuning_cpu.yaml)."
        )
    if row.winner == "jax":
        factor, low, high, fast, slow = row.ratio, row.ci_low, row.ci_high, "JAX", "PyTorch"
    else:
        factor, low, high = 1.0 / row.ratio, 1.0 / row.ci_high, 1.0 / row.ci_low
        fast, slow = "PyTorch", "JAX"
    return f"{fast} is {times(factor)} {interval(low, high)} faster than {slow} {where} ({modes})."


def _design_words(row) -> str:
    """What the interval rests on: "3 runs × 8 rounds", and where the between-run term came from."""
    between = getattr(row, "between_term", "none")
    if between == "imported":
        return f"{row.design}, the between-run term imported from this CPU's repeated runs"
    if between == "pooled":
        return f"{row.design}, the between-run term pooled over this CPU model's campaigns"
    return row.design


def headline_rows(matrix: pd.DataFrame) -> pd.DataFrame:
    """Per model, device and precision, the largest batch size both frameworks measured.

    The defaults row is left out where the best variants are the defaults: one sentence, not two.
    """
    if matrix.empty:
        return matrix
    setting = ["model", "device_name", "precision", "threads"]
    largest = matrix.groupby(setting).batch_size.transform("max")
    rows = matrix[matrix.batch_size == largest]
    key = [*setting, "batch_size"]
    best = rows[rows.comparison == "best"][[*key, "jax_variant", "torch_variant"]]
    joined = rows.merge(best, on=key, how="left", suffixes=("", "_best"))
    joined.index = rows.index
    repeat = (
        (joined.comparison == "defaults")
        & (joined.jax_variant == joined.jax_variant_best)
        & (joined.torch_variant == joined.torch_variant_best)
    )
    rows = rows[~repeat]
    order = {"best": 0, "defaults": 1}
    return (
        rows.assign(_order=rows.comparison.map(order))
        .sort_values([*setting, "_order"])
        .drop(columns="_order")
    )


def _tally_sentence(matrix: pd.DataFrame, comparison: str) -> str:
    rows = matrix[matrix.comparison == comparison]
    counts = rows.winner.value_counts()
    label = "best modes" if comparison == "best" else "defaults (PyTorch eager vs JAX jit)"
    text = (
        f"Over all {len(rows)} configurations compared with {label}, JAX is faster in "
        f"{counts.get('jax', 0)}, PyTorch in {counts.get('torch', 0)}, "
        f"{counts.get(verdicts.EQUIVALENT, 0)} are {verdicts.EQUIVALENT_WORDS} and "
        f"{counts.get(verdicts.INCONCLUSIVE, 0)} are inconclusive"
    )
    within = counts.get(verdicts.WITHIN_ONE_RUN, 0)
    if within:
        text += f"; {within} are within one run and call no winner"
    picked = counts.get(verdicts.PICKED_ON_ROUNDS, 0)
    if picked:
        text += f"; {picked} picked a mode on their own rounds and call no winner"
    return text + "."


def kind_sentences(kinds: pd.DataFrame) -> list[str]:
    """Per architecture, best modes: the geometric mean of the ratios and the verdicts' tally. A
    framework "leads" only where it alone has verdicts in its favour and the mean agrees; otherwise
    the mean is reported as a mean, not as a lead."""
    out = []
    for r in kinds[kinds.comparison == "best"].itertuples() if not kinds.empty else []:
        spread = (
            f"JAX ÷ PyTorch from {times(r.min_ratio)} to {times(r.max_ratio)}; JAX wins "
            f"{r.jax_wins}, PyTorch wins {r.torch_wins}, equivalent {r.equivalent}, "
            f"undecided {r.undecided}"
        )
        head = f"On {kind_label(r.kind)}s (best modes)"
        mean = f"the JAX ÷ PyTorch ratios have a geometric mean of {times(r.geomean_ratio)}"
        jax_leads = r.jax_wins > 0 and r.torch_wins == 0 and r.geomean_ratio > 1
        torch_leads = r.torch_wins > 0 and r.jax_wins == 0 and r.geomean_ratio < 1
        if jax_leads or torch_leads:
            lead = "JAX leads" if jax_leads else "PyTorch leads"
            factor = r.geomean_ratio if jax_leads else 1.0 / r.geomean_ratio
            out.append(f"{head}, {lead} by a geometric mean of {times(factor)} ({spread}).")
        elif r.jax_wins and r.torch_wins:
            out.append(f"{head}, each framework is faster somewhere; {mean} ({spread}).")
        elif not (r.jax_wins or r.torch_wins):
            out.append(f"{head}, no comparison has a faster framework; {mean} ({spread}).")
        else:
            out.append(f"{head}, {mean} ({spread}).")
    return out


def history_sentence(changes: pd.DataFrame, runs: int, run_id: str) -> str:
    """What the change-point detector found in the campaign's histories up to ``run_id``."""
    need = 2 * regressions.MIN_SIZE
    if runs < need:
        return (
            f"The campaign has {runs} run{'s' if runs != 1 else ''} up to this one; the "
            f"regression detector needs at least {need} points of a history, so it has nothing "
            "to say yet."
        )
    method = (
        f"a change-point search over each metric's per-run history, each split tested against "
        f"the history's own scatter (p < {regressions.ALPHA}, at least "
        f"{regressions.MIN_CHANGE:.0%} change)"
    )
    if changes.empty:
        return f"Over {runs} runs, {method} found no change in any metric's level."
    counts = changes.direction.value_counts()
    here = changes[changes.run_id == run_id]
    regressed = _count(counts.get("regression", 0), "regression")
    improved = _count(counts.get("improvement", 0), "improvement")
    undirected = counts.get(regressions.UNDIRECTED, 0)
    # so that the parts add up to the whole when a metric has no better side to call them by
    sides = (
        f"{regressed}, {improved} and {undirected} in metrics with no better side"
        if undirected
        else f"{regressed} and {improved}"
    )
    text = (
        f"Over {runs} runs, {method} found {_count(len(changes), 'level change')}: "
        f"{sides}; {len(here)} start at this run"
    )
    worst = changes[changes.direction == "regression"]
    if not worst.empty:
        row = worst.assign(size=worst.change_pct.abs()).sort_values("size").iloc[-1]
        # a level that leaves zero has no relative size; say so rather than print +inf%
        size = (
            f"up from a level of 0 at run {row.run_id}"
            if math.isinf(row.change_pct)
            else f"{row.change_pct:+.1f}% from run {row.run_id}"
        )
        text += f". The largest regression is {row.metric} of {row.configuration} ({size})"
    return text + "."


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def matrix_intro(matrix: pd.DataFrame) -> str:
    """The comparison section's opening, which says where the intervals come from."""
    text = (
        "JAX ÷ PyTorch throughput (images/s) for every model, device, precision and "
        "batch size, with a 95% interval; > 1 means JAX is faster. A framework is *faster* when "
        "the interval excludes 1 after Holm's adjustment across the campaign's comparisons, "
        f"*{verdicts.EQUIVALENT_WORDS}* when the 90% interval lies inside [0.95, 1.05], and otherwise "
        "*inconclusive*."
    )
    if matrix.empty:
        return text
    designs = "; ".join(sorted(set(matrix.design)))  # a design's own words hold commas
    fitted = int((matrix.between_term == "fitted").sum())
    imported = int((matrix.between_term == "imported").sum())
    pooled = int((matrix.between_term == "pooled").sum())
    within = len(matrix) - fitted - imported - pooled
    parts = [f" Designs: {designs}."]
    if fitted:
        parts.append(f" {fitted} of {len(matrix)} ratios pool repeated runs: {PAIRED_INTERVAL}.")
    if imported:
        parts.append(
            f" {imported} come from one run whose interval imports the between-run variance "
            "this CPU model showed over three or more runs (its upper 80% bound)."
        )
    if pooled:
        parts.append(
            f" {pooled} take the between-run variance pooled over every campaign with repeated "
            "runs on this CPU model (its upper 80% bound), because their own runs fit none (a "
            "single run has none to fit; a few runs often fit exactly 0)."
        )
    if within:
        parts.append(
            f" {within} are within one run: their intervals hold no between-run term (a run "
            "shifts every ratio it measures by a few percent), so they call no winner."
        )
    return text + "".join(parts)


def trust_sentences(
    matrix: pd.DataFrame, cells: pd.DataFrame, aa: pd.DataFrame, aa_rate: float
) -> list[str]:
    """Trials, re-runs and dropped rounds, and the A/A control, as sentences. Trials and re-runs
    are counted per cell (one kernel, which measures every batch size of its grid point)."""
    sentences = []
    trialled = cells[cells.trial > 0] if not cells.empty else cells
    reruns = int(trialled.reruns.fillna(0).sum()) if "reruns" in trialled else 0
    still = int(on_shared_machine(trialled).sum())
    paired = trust.distinct(matrix[matrix.interval == "paired"]) if not matrix.empty else matrix
    dropped = int(paired.dropped_shared.sum()) if not paired.empty else 0
    sentences.append(
        f"{len(trialled)} trial cells ran, each in its own kernel. {reruns} more "
        f"attempt{'s' if reruns != 1 else ''} ran while other processes and the hypervisor took "
        f"more than {SHARED_FRACTION:.0%} of the CPU and {'were' if reruns != 1 else 'was'} "
        f"discarded and run again; {still} trial{'s' if still != 1 else ''} stayed shared after "
        f"that, and the {len(paired)} paired comparisons left out {dropped} "
        f"round{'s' if dropped != 1 else ''} with a shared arm (a comparison keeps them only when "
        f"fewer than {MIN_CLEAN_ROUNDS} clean rounds remain)."
    )
    if aa.empty:
        sentences.append(
            "No duplicate arm ran in two or more pooled runs, so the verdicts' false-winner "
            "rate is not measured here (a campaign measures it with duplicate cells and "
            "repeated runs: params/headline.yaml)."
        )
    else:
        n = len(aa)
        short = (
            f" (the goal is read over at least {trust.AA_MIN_COMPARISONS} comparisons; these "
            f"{n} are too few to show it)"
            if n < trust.AA_MIN_COMPARISONS
            else ""
        )
        vague = int((aa.df < 1).sum()) if "df" in aa else 0
        unbounded = (
            f"; {vague} of them rest on less than one degree of freedom (the between-run term "
            "fitted on the A/A rounds is a small difference of mean squares), an interval too "
            "wide to call either way"
            if vague
            else ""
        )
        sentences.append(
            f"A/A control: duplicate arms (the same configuration as two cells), each run's "
            f"copy ÷ original judged with the verdicts' estimator, called a winner in "
            f"{int(aa.false_winner.sum())} of {n} comparisons over {aa.run_id.nunique()} runs: "
            f"a false-winner rate of {aa_rate:.1%} (goal ≤ {trust.AA_GOAL:.0%}){short}"
            f"{unbounded}."
        )
    return sentences


def stability_sentence(summary: dict, run_id: str) -> str:
    """The calibration check in a sentence (``trust.calibration_summary``): the joint test, its
    simulated power beside it, and the per-comparison count for reading."""
    if not summary["comparisons"]:
        return (
            "Calibration needs two or more earlier runs of this campaign on this CPU model "
            "with the same notebook sources; there are fewer, so it is not checked here."
        )
    n, inside = summary["comparisons"], summary["inside"]
    if "common" not in summary:
        test = "the joint test could not be formed"
    else:
        test = (
            f"the joint test of run {run_id} against the {summary['earlier_runs']} earlier runs "
            f"reads a shift of every ratio at {summary['common']:.1f} (threshold "
            f"{summary['common_threshold']:.1f}) and a shift of some at {summary['rest']:.1f} "
            f"(threshold {summary['rest_threshold']:.1f}), thresholds simulated on stable runs "
            "at this design and the fitted variance components. At that design the test passes "
            f"{summary['stable_passes']:.0%} of stable machines (goal ≥ 95%), fails "
            f"{summary['uniform_fails']:.0%} of runs with every ratio 10% off (goal ≥ 90%) and "
            f"{summary['half_fails']:.0%} of runs with one framework 10% slower on half the "
            "comparisons (goal ≥ 80%)"
        )
    return (
        f"Calibration: {test}; {summary['reversed']} decided verdicts reversed (goal 0); for "
        f"reading, {inside} of {n} ratios lie inside their 95% prediction intervals. "
        + ("The check passes." if summary["passes"] else "The check fails.")
    )


def regression_evaluation_sentence(scores: pd.DataFrame, needed: int | None) -> str:
    """The detector's scores on histories with this run's trial noise and the campaign's run
    noise, and how many trials or runs per point would meet the goals where it misses them."""
    if scores.empty:
        return (
            f"No arm has the {trust.POINT_TRIALS} trials a history point is the median of, so "
            "the regression detector is not scored on this run's noise."
        )
    row = scores[(scores.method == "changepoint") & (scores.scenario == "current")].iloc[0]
    needs = trust.regression_needs(scores)
    # run_sd_source is RunNoise.describe(): "estimated from N runs (...)" or "default (why)"
    source = (
        f"estimated from the campaign's {needs['run_sd_runs']} runs"
        if str(needs["run_sd_source"]).startswith("estimated")
        else "a default, since the campaign has too few runs to estimate it"
    )
    text = (
        f"On 10-run histories whose points are medians of {trust.POINT_TRIALS} trials resampled "
        f"from this run's trials, each run shifted by a run effect of SD {needs['run_sd']:.3f} "
        f"on the log scale ({source}), with a slowdown from the sixth run on, the change-point "
        f"detector found {row['recall_0.05']:.0%}, {row['recall_0.1']:.0%} and "
        f"{row['recall_0.2']:.0%} of 5%, 10% and 20% slowdowns, raised "
        f"{row.false_per_100:.1f} false alerts per 100 unchanged histories, and detected a "
        f"median of {row.delay_median:.0f} runs after the change (goals: ≥ 90% at 10%, ≤ 1 per "
        "100, within 3 runs)"
    )
    if bool(row.meets_goals):
        return text + "; it meets them all."
    more = []
    if needs["trials_needed"] is not None:
        more.append(f"{needs['trials_needed']} trials per point")
    if needs["runs_needed"] is not None:
        more.append(f"the mean of {needs['runs_needed']} runs per point")
    if not more:
        return text + "; it misses at least one, and no design tried here meets them all."
    return text + f"; it misses at least one, and meets them all with {' or '.join(more)}."


def failure_sentence(failures: pd.DataFrame, retries: pd.DataFrame) -> str:
    if failures.empty and retries.empty:
        return "Every cell ran to completion; no batch size ran out of memory."
    status = failures.status if not failures.empty else pd.Series(dtype=object)
    parts = [f"{n} {s}" for s, n in sorted(status[status != CUT].value_counts().items())]
    cut = int((status == CUT).sum())  # cells the run stopped before: not run, not failed
    parts += [f"{cut} cut before {'they' if cut > 1 else 'it'} ran to the end"] if cut else []
    text = f"Not every measurement succeeded: {', '.join(parts) or 'none failed'}"
    if not retries.empty:
        rescued = int((retries.final_status == "ok").sum())
        cells = "cell was" if len(retries) == 1 else "cells were"
        text += f"; {len(retries)} {cells} retried with a changed environment ({rescued} rescued)"
    return text + " (see Failures and workarounds)."


def shared_machine_sentence(shared: pd.DataFrame, cells: pd.DataFrame) -> str | None:
    """A warning when some cells ran while the machine was shared; None when none did."""
    if shared.empty:
        return None
    worst = (shared.other_cpu_frac.fillna(0) + shared.steal_frac.fillna(0)).max()
    return (
        f"{len(shared)} of {len(cells)} cells ran on a shared machine (other processes and the "
        f"hypervisor took up to {worst:.0%} of the CPU time): their timings are not comparable with "
        "an idle run's; they are listed under Failures."
    )


def contention_sentence(cells: pd.DataFrame) -> str:
    """How much of the CPU other processes and the hypervisor took during the run's cells."""
    columns = {"other_cpu_frac", "steal_frac", "shared_machine"}
    read = cells.dropna(subset=["other_cpu_frac", "steal_frac"]) if columns <= set(cells) else None
    if read is None or read.empty:
        return "This run predates the contention meter: no reading."
    shared = int(on_shared_machine(read).sum())
    verdict = (
        "none ran on a shared machine"
        if shared == 0
        else f"{shared} ran on a shared machine (above {SHARED_FRACTION:.0%})"
    )
    return (
        f"Over the {len(read)} cells with a contention reading, other processes took up to "
        f"{read.other_cpu_frac.max():.0%} and the hypervisor up to {read.steal_frac.max():.0%} of "
        f"the CPU time; {verdict}."
    )


def executive_summary(
    matrix, kinds, history, failures, retries, families=(), shared_machine=None, trust_lines=()
) -> list[str]:
    """``history``: the sentence of ``history_sentence``. ``families``: the other families' lines
    (training's, web audio's), placed after the inference ones. ``shared_machine``: the sentence
    of ``shared_machine_sentence``, placed first when present. ``trust_lines``: the A/A and
    stability sentences, placed after the comparisons they qualify."""
    sentences = [shared_machine] if shared_machine else []
    sentences += [ratio_sentence(r) for r in headline_rows(matrix).itertuples()]
    if not matrix.empty:
        compared = set(matrix.comparison)
        sentences += [_tally_sentence(matrix, c) for c in ("best", "defaults") if c in compared]
    elif not families:  # a training or web-audio campaign's summary is its family's lines
        sentences.append("No inference configuration was measured on both frameworks in this run.")
    sentences += list(trust_lines)
    sentences += kind_sentences(kinds)
    sentences += list(families)
    sentences.append(history)
    sentences.append(failure_sentence(failures, retries))
    return sentences


# --------------------------------------------------------------------------- methodology


_STOP_RULE_KEYS = ("batch_sizes", "min_iters", "min_seconds", "warmup", "block_size", "image_size")


def _stop_rules(cells: pd.DataFrame) -> list[str]:
    """The distinct timing parameters each notebook ran with, as read from its cells."""
    seen: dict[tuple, int] = {}
    for r in cells.itertuples():
        params = tuple(
            (k, json.dumps(r.parameters[k])) for k in _STOP_RULE_KEYS if k in r.parameters
        )
        if params:
            seen[(r.notebook, params)] = seen.get((r.notebook, params), 0) + 1
    lines = []
    for (notebook, params), count in sorted(seen.items()):
        values = ", ".join(f"{k}={v}" for k, v in params)
        lines.append(f"{notebook} ({count} cell{'s' if count > 1 else ''}): {values}")
    return lines


def precision_settings(meas: pd.DataFrame) -> pd.DataFrame:
    """The precision switches each framework recorded, per precision."""
    rows = []
    for r in meas[meas.family == "inference"].itertuples():
        settings = r.extra.get("settings")
        if settings:
            rows.append(
                {
                    "framework": r.framework,
                    "precision": r.precision,
                    "settings": json.dumps(settings, sort_keys=True),
                }
            )
    if not rows:
        return pd.DataFrame()
    return (
        pd.DataFrame(rows)
        .drop_duplicates()
        .sort_values(["framework", "precision", "settings"], ignore_index=True)
    )


def _ratio_method(samples: list[pd.DataFrame]) -> str:
    """How the ratios' intervals were computed, from the sample sources the ratios actually used
    (``tables.throughput_samples`` frames, one per family)."""
    used = sorted(
        {s for frame in samples if not frame.empty for s in frame.sample_source if s != "trials"}
    )
    trialled = any(not f.empty and (f.sample_source == "trials").any() for f in samples)
    text = (
        "Ratios are JAX ÷ PyTorch throughput with a 95% interval; a framework is faster only "
        "when the interval carries a between-run term and excludes 1 after Holm's adjustment, "
        "equivalent when the 90% interval lies within ±5%, and inconclusive otherwise. "
    )
    if trialled:
        text += (
            f"Where both frameworks ran in trials, a ratio pairs the trials of the same round: "
            f"{PAIRED_INTERVAL}, leaving out rounds with an arm on a shared machine when "
            f"{MIN_CLEAN_ROUNDS} or more clean ones remain. "
        )
    if used:
        over = " and ".join(SAMPLE_SOURCE_TEXT[s] for s in used)
        text += (
            f"With one trial per side: a two-sample percentile bootstrap "
            f"({vocab.BOOTSTRAP_RESAMPLES:,} resamples, fixed seed) over the {over}, which "
            "carries no between-run noise. "
        )
    return text + (
        "Best modes take each framework's tuned arm (modes tuned and jit-tuned: the candidate a "
        "tuning run picked before this run), else its only arm, else its fastest arm in this run, "
        "which then calls no winner (the pick would favour it); candidates are PyTorch's eager, "
        "torch.compile, max-autotune and freezing, with or without channels_last, compile and "
        "freezing also with one graph for any batch size, and JAX's jit "
        "of the stock or the expert layers under each XLA option set. Defaults are PyTorch eager "
        "against JAX jit."
    )


def _cpu_words(env: dict) -> str:
    """The CPU with its family, model and vector extensions where the run recorded them."""
    cpu = env.get("cpu") or {}
    if cpu.get("family") is None:
        return env.get("cpu_model") or "unrecorded"
    isa = ", ".join(cpu.get("isa") or []) or "none of AVX2, AVX-512, AMX"
    return f"{cpu['name']} (family {cpu['family']}, model {cpu['model']}; {isa})"


def methodology(
    run: dict, meas: pd.DataFrame, cells: pd.DataFrame, samples: list[pd.DataFrame] = ()
) -> list[str]:
    """Bullet points describing how this run was measured, from what the run recorded.

    ``samples``: the ``analysis.throughput_samples`` frames the ratios were computed from."""
    env = run.get("environment") or {}
    packages = env.get("packages") or {}
    devices = sorted({d for d in meas.device_name if d})
    lines = [
        f"Run `{run['run_id']}` started {run.get('started_at') or 'at an unrecorded time'} and "
        f"finished {run.get('finished_at') or 'at an unrecorded time'}; code at "
        f"{commit_words(run)} on host `{run.get('host') or 'unknown'}`.",
        f"Devices measured: {', '.join(devices) or 'none recorded'}. CPU: {_cpu_words(env)} "
        f"({env.get('cpu_count') or '?'} logical cores); "
        f"Python {env.get('python') or '?'} on {env.get('platform') or 'an unrecorded platform'}.",
    ]
    gpus = [g for g in env.get("gpus") or [] if g.get("name")]
    for g in gpus:
        lines.append(
            f"GPU {g['index']}: {g['name']}, driver {g.get('driver')}, SM clock "
            f"{g.get('sm_clock_mhz')}/{g.get('sm_clock_max_mhz')} MHz, power limit "
            f"{g.get('power_limit_w')} W."
        )
    if packages:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(packages.items()) if v)
        lines.append(
            f"Package versions: {versions}; pip freeze hash "
            f"`{env.get('pip_freeze_hash', 'unrecorded')}`."
        )
    env_vars = {k: v for k, v in sorted((env.get("env_vars") or {}).items()) if v}
    lines.append(
        "Environment variables: "
        + (", ".join(f"`{k}={v}`" for k, v in env_vars.items()) or "none of the tracked ones set")
        + "."
    )
    ran = cells[cells.status != CUT] if "status" in cells else cells  # a cut trial never ran
    trials = ran.groupby("notebook").trial.max() if not ran.empty else pd.Series(dtype=int)
    repeated = {nb: int(t) for nb, t in trials.items() if t and t > 1}
    lines.append(
        "Trials: "
        + (", ".join(f"{nb} ×{t}" for nb, t in sorted(repeated.items())) or "each cell ran once")
        + ". Each cell ran in its own kernel process."
    )
    rules = _stop_rules(ran)
    if rules:
        lines.append(
            "Timing parameters set by the campaign (the rest at the notebooks' defaults): "
            + "; ".join(rules)
            + "."
        )
    for r in precision_settings(meas).itertuples():
        lines.append(f"Precision {r.precision} on {r.framework}: `{r.settings}`.")
    lines.append(_ratio_method(list(samples)))
    return lines


def limitations(samples: pd.DataFrame, meas: pd.DataFrame, trials=()) -> list[str]:
    """What the numbers of this run cannot tell, partly read from the run itself. ``trials``: the
    most trials a configuration ran in, per family beside inference that pairs trials as rounds."""
    lines = [
        "PyTorch has no counterpart to XLA's cost analysis, so its roofline position borrows the "
        "byte count of the JAX program for the same model; PyTorch eager usually moves more bytes.",
        "CPU numbers depend on thread counts and the memory system; they do not predict GPU "
        "results.",
        "The interactive HTML figures load Vega from a CDN; the PNG and SVG files stand alone.",
    ]
    if max([0 if samples.empty else samples.n_trials.max(), *trials]) < 3:
        lines.insert(
            0,
            "Fewer than three trials per configuration: intervals describe the noise within one "
            "process, not between processes or machines.",
        )
    reasons = energy_unavailable_reasons(meas)
    if reasons:
        lines.append(f"Energy was not measured: {'; '.join(reasons)}.")
    return lines
