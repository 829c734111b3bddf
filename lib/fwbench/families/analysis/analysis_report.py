"""What the analysis says about the run itself, whatever family it measured: whether its ratios
would come out the same again (trials, A/A, calibration, the regression detector on its noise),
the campaign's history, and the cells that failed, were retried or ran on a shared machine.
"""

from __future__ import annotations

import pandas as pd

from fwbench.measure import verdicts
from fwbench.measure.meters.contention import SHARED_FRACTION
from fwbench.report import sentences, sequential, tables
from fwbench.report.items import (
    Each,
    Note,
    Section,
    Table,
    empty,
    literal,
    nonempty,
    own_paths,
    records,
)


def failures_table(meas: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Every record that is not ok (failed/timeout cells, out-of-memory batch sizes)."""
    bad = meas[~meas.status.isin(["ok", "skipped"])]
    rows = bad[
        [
            "notebook",
            "cell",
            "trial",
            "status",
            "model",
            "framework",
            "variant",
            "precision",
            "batch_size",
            "error",
        ]
    ].copy()
    rows["error"] = rows.error.map(tables.error_line)
    rows = rows.merge(
        cells[["notebook", "cell", "trial", "path"]], how="left", on=["notebook", "cell", "trial"]
    )
    return rows.sort_values(["notebook", "cell", "trial", "batch_size"], ignore_index=True)


def retries_table(cells: pd.DataFrame) -> pd.DataFrame:
    retried = cells[cells.retried.fillna(0).astype(bool)]
    rows = []
    for r in retried.itertuples():
        env = r.retry_env or {}
        rows.append(
            {
                "notebook": r.notebook,
                "cell": r.cell,
                "trial": r.trial,
                "changed": ", ".join(f"{k}={env[k]}" for k in sorted(env)) or "(nothing recorded)",
                "final_status": r.status,
                "path": r.path,
            }
        )
    return pd.DataFrame(
        rows, columns=["notebook", "cell", "trial", "changed", "final_status", "path"]
    )


def shared_machine_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells during which other processes or the hypervisor took more than
    ``fwbench.measure.meters.contention.SHARED_FRACTION`` of the CPU time: their timings are suspect."""
    columns = ["notebook", "cell", "trial", "other_cpu_frac", "steal_frac", "load_1m_before"]
    if "shared_machine" not in cells:
        return pd.DataFrame(columns=[*columns, "path"])
    shared = cells[tables.on_shared_machine(cells)]
    return shared[[*columns, "path"]].reset_index(drop=True)


def _no_trials_note(analysis) -> str:
    """Why the trust section is empty: one trial per cell, or trials of another family (their
    intervals are in that family's own section)."""
    trials = analysis.cells.trial if "trial" in analysis.cells else pd.Series(dtype=float)
    if trials.fillna(0).max() > 1:
        return (
            "This run's trials are not inference measurements, so there is no JAX-vs-PyTorch "
            "ratio to pair by round, no A/A control and no calibration check here; each family "
            "that ran trials judges them in its own section."
        )
    return (
        "This campaign ran one trial per cell, so there is nothing to pair by round, no A/A "
        "control and no calibration check: its ratios are within one run and call no winner. "
        "A campaign of interleaved trials repeated as runs, with duplicate arms, has them "
        "(params/headline.yaml)."
    )


TRUST = Section(
    "Trust: trials, A/A control and calibration",
    "Whether these ratios would come out the same again: the trials behind them, duplicate "
    "arms (the same configuration as two cells) judged by the verdicts' own estimator, and "
    "whether this run lands where the campaign's earlier runs predicted.",
    (
        Each(lambda a: [Note(literal(t)) for t in a.trust_lines]),
        Table(
            "trials",
            "Trials per arm: how many ran, attempts run again because the machine was shared "
            "(the campaign's rerun_shared), trials still shared after that, and trials used.",
            lambda a: a.trials,
            records("inference", ["throughput_img_s"]),
            drop=("device",),
        ),
        Table(
            "aa_control",
            "A/A control per duplicate arm and run: the copy ÷ the original, its 95% interval "
            "with the between-run term fitted on every pooled run's A/A rounds, and whether "
            "it wrongly calls a winner.",
            lambda a: a.aa,
            records("inference", ["throughput_img_s"]),
            drop=("device",),
            when=nonempty("aa"),
        ),
        Note(lambda a: sentences.stability_sentence(a.stability_summary, a.run_id)),
        Table(
            "calibration",
            "Each best-mode comparison: the 95% prediction interval the earlier pooled runs "
            "give a new run's ratio, this run's ratio, whether it lies inside, and the "
            "verdict before and after this run is pooled in.",
            lambda a: a.stability,
            records("inference", ["throughput_img_s"]),
            drop=("device",),
            when=nonempty("stability"),
        ),
        Note(
            lambda a: _equivalence_sentence(a.equivalence_reach),
            when=lambda a: bool(a.equivalence_reach),
        ),
        Note(lambda a: sentences.regression_evaluation_sentence(*a.regression_evaluation)),
        Note(
            lambda a: _paired_detector_sentence(a.paired_detector),
            when=lambda a: bool(a.paired_detector),
        ),
        Table(
            "regression_evaluation",
            "The regression detector and two baselines on seeded synthetic 10-run histories "
            "whose points are medians of this run's trials times a run effect at the "
            "campaign's between-run SD (200 per slowdown size and 200 unchanged): recall per "
            "size, false alerts per 100 unchanged histories, runs to detection, F1; "
            "`scenario` says whether a row is the current design, more trials or more runs "
            "per point, or the same without run noise.",
            lambda a: a.regression_evaluation[0],
            records("inference", ["throughput_img_s"]),
            when=lambda a: not a.regression_evaluation[0].empty,
        ),
    ),
    empty=empty("trials"),
    empty_note=_no_trials_note,
    name="trust",
)


def _round_noise_sentence(noise: pd.DataFrame, run_id: str) -> str:
    """This run's round noise beside the other runs of the same arms on this CPU model, by
    protocol (``trust.round_noise_on_this_cpu``)."""
    mine = noise[noise.run_id == run_id]
    if mine.empty:
        return "Round noise: this run has no arm with three or more rounds."
    row = mine.iloc[0]
    text = (
        f"Round noise ({row.protocol}): across this run's rounds the median arm's log "
        f"throughput has an SD of {row.jax_round_sd:.3f} for JAX and {row.torch_round_sd:.3f} "
        f"for PyTorch, the median comparison's log ratio {row.ratio_round_sd:.3f} and the "
        f"median A/A pair's log ratio {row.aa_round_sd:.3f}."
    )
    others = noise[(noise.run_id != run_id) | (noise.campaign != row.campaign)]
    for protocol, group in others.groupby("protocol", sort=True):
        text += (
            f" The same arms in {len(group)} {protocol} run{'s' if len(group) != 1 else ''} on "
            f"this CPU model ({', '.join(sorted(set(group.campaign)))}): medians "
            f"{group.jax_round_sd.median():.3f}, {group.torch_round_sd.median():.3f}, "
            f"{group.ratio_round_sd.median():.3f} and {group.aa_round_sd.median():.3f}."
        )
    return text


def _paired_detector_sentence(scores: dict) -> str:
    """The paired-ratio detector's scores on this CPU model's real run-to-run residuals."""
    goal = sequential.GOAL_RECALL
    verdict = (
        "It meets the goals."
        if scores["meets_goals"]
        else "It misses the goals: recall and detection within "
        f"{sequential.GOAL_DELAY_RUNS} runs are {max(0.0, goal - scores['recall_10pct']):.0%} "
        f"and {max(0.0, goal - scores['within_3']):.0%} short of {goal:.0%}."
    )
    return (
        "Regression detector on paired ratios (a run's JAX ÷ PyTorch log ratio, so the run "
        "effect both arms share cancels; a one-sided CUSUM after a "
        f"{sequential.BASELINE_RUNS}-run baseline, its threshold simulated for "
        f"{sequential.FALSE_ALERTS_PER_100:g} false alert per 100 histories): on "
        f"{sequential.POINTS}-run histories resampled from the {scores['residuals']} run-to-run "
        f"residuals of this CPU model's repeated series ({', '.join(scores['campaigns'])}; a "
        f"point's SD {scores['point_sd']:.3f} on the log scale), it raised "
        f"{scores['false_per_100']:.1f} false alerts per 100 unchanged histories (goal ≤ "
        f"{sequential.FALSE_ALERTS_PER_100:g}), caught {scores['recall_10pct']:.0%} of 10% "
        f"slowdowns (goal ≥ {goal:.0%}), {scores['within_3']:.0%} of them within "
        f"{sequential.GOAL_DELAY_RUNS} runs (goal ≥ {goal:.0%}). {verdict}"
    )


def _equivalence_sentence(reach: dict) -> str:
    """Whether this design can call a pair equivalent (``trust.equivalence_reach``)."""
    text = (
        f"Equivalence: at this campaign's design ({reach['design']}, the fitted variance "
        f"components, a round's log-ratio SD {reach['round_sd']:.3f}), a truly equal pair is "
        f"called {verdicts.EQUIVALENT_WORDS} in {reach['rate']:.0%} of simulations (goal ≥ 80%)"
    )
    if reach["rate"] >= 0.80:
        return text + "."
    if reach["rounds"] is None:
        return text + "; no design of up to 32 rounds a run reaches it at this noise."
    return text + f"; {reach['rounds']} rounds a run would reach it."


ROUND_NOISE = Section(
    "Round noise",
    "How much a run's rounds scatter, beside every other run of the same arms on this CPU "
    "model, by the protocol that timed them: the noise a verdict's interval has to carry.",
    (
        Note(
            lambda a: _round_noise_sentence(a.round_noise, a.run_id),
            when=lambda a: not a.round_noise.empty,
        ),
        Table(
            "round_noise",
            "Round noise per run of the arms this campaign measured, on this CPU model, in any "
            "campaign: the median over arms of the SD of an arm's log throughput across the "
            "run's rounds, per framework, and the median over best-mode comparisons of the SD "
            "of the log ratio across rounds, and the same for A/A pairs (copy ÷ original); "
            "`protocol` is relay where the arms took turns as "
            "live kernels (order relay), interleaved where each trial was a process of its own.",
            lambda a: a.round_noise,
            records("inference", ["throughput_img_s"]),
            when=lambda a: not a.round_noise.empty,
        ),
    ),
    when=lambda a: not a.round_noise.empty,
    name="round_noise",
)


HISTORY = Section(
    "History",
    lambda a: a.history_line,
    (
        Table(
            "history",
            "Level changes in this campaign's histories up to run {run_id}: the metric and "
            "configuration, the run where the new level starts, the change and its p-value.",
            lambda a: a.changes,
            lambda a, changes: a.sources(a.meas[a.meas.metric.isin(changes.metric)]),
            when=nonempty("changes"),
        ),
    ),
    empty=lambda a: not a.baseline_run_id,
    empty_note="No earlier run of this campaign.",
)


FAILURES = Section(
    "Failed and cut cells, out-of-memory batch sizes",
    "",
    (
        Table(
            "failures",
            "Records that are not ok, with the last line of their error; a cell whose status "
            "is cut never ran to the end (the run stopped before it: a time cap or a stopped "
            "runner), so it measured nothing.",
            lambda a: a.failures,
            own_paths,
            drop=("path",),
        ),
    ),
    empty=empty("failures"),
    empty_note="Nothing failed.",
    part="failures",
)


RETRIES = Section(
    "Retries",
    "Cells whose kernel died and that were run again with the campaign's retry environment.",
    (
        Table(
            "retries",
            "Retried cells, what changed, and the final status.",
            lambda a: a.retries,
            own_paths,
            drop=("path",),
        ),
    ),
    empty=empty("retries"),
    empty_note="No cell was retried.",
    part="failures",
)


SHARED_MACHINE = Section(
    "Cells run on a shared machine",
    literal(
        "Cells during which other processes and the hypervisor took more than "
        f"{SHARED_FRACTION:.0%} of the CPU time. On a shared CPU, PyTorch's OpenMP threads "
        "wait on each other, so such a cell's times say more about the neighbours than about "
        "the framework."
    ),
    (
        Note(lambda a: sentences.contention_sentence(a.cells)),
        Table(
            "shared_machine",
            "Cells run on a shared machine: share of all CPU time taken by other processes and "
            "stolen by the hypervisor, and the 1-minute load average before the cell.",
            lambda a: a.shared,
            own_paths,
            drop=("path",),
            when=nonempty("shared"),
        ),
    ),
    part="failures",
    name="shared_machine",
)


SECTIONS = (TRUST, ROUND_NOISE, HISTORY, FAILURES, RETRIES, SHARED_MACHINE)
