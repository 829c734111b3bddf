"""What the analysis says about the run itself, whatever family it measured: whether its ratios
would come out the same again (trials, A/A, calibration, the regression detector on its noise),
the campaign's history, and the cells that failed, were retried or ran on a shared machine.
"""

from __future__ import annotations

import pandas as pd

from fwbench.measure.meters.contention import SHARED_FRACTION
from fwbench.report import sentences, tables
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
        Note(lambda a: sentences.regression_evaluation_sentence(*a.regression_evaluation)),
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
    "Failed cells and out-of-memory batch sizes",
    "",
    (
        Table(
            "failures",
            "Records that are not ok, with the last line of their error.",
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


SECTIONS = (TRUST, HISTORY, FAILURES, RETRIES, SHARED_MACHINE)
