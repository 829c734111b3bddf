"""Training (11_training): speed with every step synced, the float64 parity of the two frameworks'
steps and convergence on the same batches, a step's time over a forward's
(``training_inference``); and time to accuracy (15_time_to_accuracy, ``training_tta``).
"""

from __future__ import annotations

import pandas as pd

from fwbench.families.training import training_inference, training_tta
from fwbench.measure import verdicts
from fwbench.report import charts, sentences, tables
from fwbench.report.items import (
    Figure,
    Note,
    Section,
    Table,
    empty,
    nonempty,
    per_analysis,
    ratio_heatmap,
    records,
    throughput,
)
from fwbench.vocab import framework_label, model_label

_TRAINING_SPEED = [
    "step_time_p50_ms",
    "step_time_p95_ms",
    "throughput_img_s",
    "compile_s",
    "peak_mem_bytes",
    "energy_j_per_step",
]


# The float64 rows are the gate (their status is the check's); the fp32 rows are measurements of
# how rounding grows, with the step at which the fp32 losses first part by more than 1e-3.
_FP64_PARITY_METRICS = [
    "fp64_loss_parity_max_rel",
    "fp64_param_parity_max_rel",
    "fp64_bn_stats_parity_max_rel",
]


PARITY_METRICS = _FP64_PARITY_METRICS + [
    "loss_parity_max_rel",
    "param_parity_max_rel",
    "bn_stats_parity_max_rel",
    "fp32_loss_divergence_step",
]


CONVERGENCE_METRICS = ["val_top1", "val_top1_as_trained", "train_loss_final"]


def check_table(meas: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Training checks (parity, convergence) one row per model and framework, failures kept."""
    rows = meas[(meas.family == "training") & meas.metric.isin(metrics)]
    if rows.empty:
        return pd.DataFrame()
    index = ["model", "framework", "device_name", "batch_size", "trial"]
    rows = rows.assign(batch_size=rows.batch_size.astype(float))
    table = rows.pivot_table(index=index, columns="metric", values="value", aggfunc="first")
    status = rows.groupby(index).status.agg(lambda s: "ok" if (s == "ok").all() else "failed")
    table = table.join(status).reset_index()
    table.columns.name = None
    return table[index + [m for m in metrics if m in table] + ["status"]].sort_values(
        index, ignore_index=True
    )


def parity_curves(meas: pd.DataFrame) -> pd.DataFrame:
    """Per-step losses of both frameworks from the loss-parity records (same weights, same batches).

    Failed checks are kept: a curve that drifts apart is the thing to look at.
    """
    rows = []
    parity = meas[(meas.family == "training") & (meas.metric == "loss_parity_max_rel")]
    for r in parity.itertuples():
        for framework, losses in sorted((r.extra.get("losses") or {}).items()):
            for step, loss in enumerate(losses):
                rows.append(
                    {
                        "model": r.model,
                        "device_name": r.device_name,
                        "batch_size": r.batch_size,
                        "trial": r.trial,
                        "status": r.status,
                        "max_rel": r.value,
                        "framework": framework,
                        "step": step,
                        "loss": float(loss),
                    }
                )
    return pd.DataFrame(rows)


def convergence_curves(meas: pd.DataFrame) -> pd.DataFrame:
    """Train loss per step and validation top-1 per epoch, both on an epoch axis, per framework."""
    rows = []
    training = meas[meas.family == "training"]
    common = ["model", "framework", "device_name", "batch_size", "trial", "status"]
    for r in training[training.metric == "train_loss_final"].itertuples():
        losses = r.extra.get("train_loss") or []
        per_epoch = r.n or len(losses) or 1
        for step, loss in enumerate(losses):
            rows.append(
                {
                    **{c: getattr(r, c) for c in common},
                    "curve": "train loss",
                    "epoch": (step + 1) / per_epoch,
                    "value": float(loss),
                }
            )
    for r in training[training.metric == "val_top1"].itertuples():
        by_epoch = r.extra.get("val_top1_by_epoch") or []
        points = [(float(e), float(v), "running statistics") for e, v in enumerate(by_epoch)]
        if r.extra.get("bn_recalibrated") and by_epoch:
            points.append((float(len(by_epoch) - 1), float(r.value), "BatchNorm recalibrated"))
        for epoch, top1, kind in points:
            rows.append(
                {
                    **{c: getattr(r, c) for c in common},
                    "curve": "val top-1 (%)",
                    "epoch": epoch,
                    "value": top1,
                    "statistics": kind,
                }
            )
    return pd.DataFrame(rows)


def _fp64_parity_sentences(parity: pd.DataFrame) -> list[str]:
    """The float64 proof per model, then what the same steps did in fp32 (a measurement)."""
    said = []
    proven = parity[parity.fp64_loss_parity_max_rel.notna()]
    ok = proven[proven.status == "ok"]
    if not ok.empty:
        models = ", ".join(model_label(m) for m in sorted(ok.model.unique()))
        worst_param = ok[["fp64_param_parity_max_rel", "fp64_bn_stats_parity_max_rel"]].max().max()
        said.append(
            f"Training parity is proven in float64 for {models} (same weights, same batches): "
            f"the per-step losses of JAX and PyTorch differ by at most "
            f"{ok.fp64_loss_parity_max_rel.max():.1e} relative "
            f"(gate 1e-9), parameters and BatchNorm statistics by at most {worst_param:.1e} "
            "(gate 1e-8)."
        )
    for r in proven[proven.status != "ok"].itertuples():
        said.append(
            f"Training parity in float64 FAILED for {model_label(r.model)} (largest per-step loss "
            f"difference {r.fp64_loss_parity_max_rel:.1e}): its training speed ratio is not a "
            "like-for-like comparison."
        )
    if "loss_parity_max_rel" in parity:
        parts = []
        for r in parity[parity.loss_parity_max_rel.notna()].itertuples():
            step = getattr(r, "fp32_loss_divergence_step", None)
            parted = (
                f", parting by more than 1e-3 at step {int(step)}"
                if step is not None and pd.notna(step)
                else ""
            )
            parts.append(f"{model_label(r.model)} {r.loss_parity_max_rel:.1e}{parted}")
        if parts:
            said.append(
                "The same steps in fp32, a measurement of how rounding grows on this CPU rather "
                "than a check: largest per-step loss difference " + "; ".join(parts) + "."
            )
    return said


def training_sentences(matrix: pd.DataFrame, parity: pd.DataFrame, convergence: pd.DataFrame):
    """Training speed ratios, then the two fairness checks, as sentences for the summary.

    ``matrix`` is the comparison matrix of training throughput; ``parity`` and ``convergence``
    are ``analysis.check_table`` frames.
    """
    said = [
        f"Training: {sentences.ratio_sentence(r)}"
        for r in sentences.headline_rows(matrix).itertuples()
    ]
    if not parity.empty and "fp64_loss_parity_max_rel" in parity:
        said += _fp64_parity_sentences(parity)
    elif not parity.empty:
        ok = parity[parity.status == "ok"]
        if not ok.empty:
            worst = ok.sort_values("loss_parity_max_rel").iloc[-1]
            models = ", ".join(model_label(m) for m in sorted(ok.model.unique()))
            said.append(
                f"Loss-curve parity (fp32, same weights, same batches) holds for {models}: the "
                f"per-step losses of JAX and PyTorch differ by at most "
                f"{worst.loss_parity_max_rel:.1e} relative ({model_label(worst.model)})."
            )
        for r in parity[parity.status != "ok"].itertuples():
            said.append(
                f"Loss-curve parity FAILED for {model_label(r.model)} "
                f"(largest per-step loss difference {r.loss_parity_max_rel:.1e}): its training "
                f"speed ratio is not a like-for-like comparison."
            )
    if not convergence.empty:
        parts = []
        for model, group in convergence.groupby("model", sort=True):
            tops = {r.framework: r.val_top1 for r in group.itertuples()}
            text = ", ".join(
                f"{framework_label(f)} {tops[f]:.1f}%" for f in ("torch", "jax") if f in tops
            )
            flag = "" if (group.status == "ok").all() else " (failed the convergence check)"
            parts.append(f"{model_label(model)} {text}{flag}")
        said.append(
            "Validation top-1 after training from the same start (BatchNorm statistics "
            "recomputed at the final weights): " + "; ".join(parts) + "."
        )
    return said


def summary_sentences(analysis) -> list[str]:
    """The executive summary's training lines: speed and the fairness checks, time to accuracy,
    and a step's time over a forward's."""
    said = training_sentences(
        matrix(analysis), _parity_checks(analysis), _convergence_checks(analysis)
    )
    said += training_tta.sentences(training_tta.pooled(analysis))
    steps = training_inference.step_forward(analysis)
    return said + ([training_inference.sentence(steps)] if len(steps) else [])


@per_analysis
def rows(analysis):
    return analysis.family("training")


@per_analysis
def samples(analysis):
    return tables.throughput_samples(analysis.meas, "training")


@per_analysis
def matrix(analysis):
    return tables.comparison_matrix(samples(analysis))


@per_analysis
def speed(analysis):
    return tables.metric_table(analysis.meas, _TRAINING_SPEED, "training")


@per_analysis
def memory(analysis):
    return tables.memory_table(analysis.meas, "training")


@per_analysis
def parity_steps(analysis):
    return parity_curves(analysis.meas)


@per_analysis
def _parity_checks(analysis):
    return check_table(analysis.meas, PARITY_METRICS)


@per_analysis
def _convergence_steps(analysis):
    return convergence_curves(analysis.meas)


@per_analysis
def _convergence_checks(analysis):
    return check_table(analysis.meas, CONVERGENCE_METRICS)


TRAINING = Section(
    "Training",
    "Training speed with every step synced (each framework at its default and best "
    "practice), then the proof that both frameworks train the same function: per-step loss "
    "parity from the same weights on the same batches, and convergence on real data.",
    (
        Note("No training records in this run.", when=empty(rows)),
        Figure(
            "training_ratio_matrix",
            "JAX ÷ PyTorch training throughput",
            "Median training images/s of JAX divided by PyTorch's (batch size over the synced "
            "step time), on {devices}; 95% bootstrap interval over steps (or trials, with "
            f"three or more); ≈ marks {verdicts.EQUIVALENT_WORDS}, ? inconclusive, (1 run) within "
            "one run.",
            ratio_heatmap(matrix),
            when=nonempty(matrix),
        ),
        Table(
            "training_ratio_matrix",
            "JAX ÷ PyTorch training throughput with 95% interval and the winner.",
            matrix,
            records("training", ["throughput_img_s"]),
            drop=("device",),
            when=nonempty(matrix),
        ),
        Figure(
            "training_throughput",
            "Training throughput vs batch size",
            "Median training images/s over synced steps with its 95% bootstrap interval, per "
            "framework and mode; both axes logarithmic.",
            throughput(samples),
            when=nonempty(speed),
        ),
        Figure(
            "training_memory",
            "Training peak memory vs batch size",
            "Peak memory over the timed training steps (torch allocator or XLA memory_stats "
            "on a GPU; process peak RSS on a CPU, which includes the runtime), GB = 10⁹ "
            "bytes.",
            lambda a: charts.by_batch(memory(a), "peak_mem_gb", "peak memory (GB)"),
            when=lambda a: not speed(a).empty and not memory(a).empty,
        ),
        Table(
            "training_speed",
            "Training step time (p50, p95), images/s, compile time, peak memory and energy "
            "per step (median over trials).",
            speed,
            records("training", _TRAINING_SPEED),
            drop=("device",),
            when=nonempty(speed),
        ),
        Figure(
            "training_parity",
            "Loss-curve parity",
            "Per-step training loss of PyTorch (eager) and JAX (jit) from the same ported "
            "weights on the same batches, fp32 with TF32 off, dropout off; the panel title "
            "gives the largest relative difference over the steps (the bar is 1e-3).",
            lambda a: charts.parity_chart(parity_steps(a)),
            when=nonempty(parity_steps),
        ),
        Table(
            "training_parity",
            "Largest relative difference, JAX against PyTorch: per-step loss, parameters and "
            "BatchNorm statistics after the last step.",
            _parity_checks,
            records("training", PARITY_METRICS),
            when=nonempty(parity_steps),
        ),
        Figure(
            "training_convergence",
            "Convergence",
            "Train loss per step and validation top-1 per epoch, both frameworks from the same "
            "weights, batches and learning-rate schedule (dropout on, each side its own "
            "masks).",
            lambda a: charts.convergence_chart(_convergence_steps(a)),
            when=nonempty(_convergence_steps),
        ),
        Table(
            "training_convergence",
            "Validation top-1 (%) after the last epoch and mean train loss over the last epoch.",
            _convergence_checks,
            records("training", CONVERGENCE_METRICS),
            when=nonempty(_convergence_steps),
        ),
        *training_inference.ITEMS,
    ),
)


TIME_TO_ACCURACY = training_tta.SECTION

SECTIONS = (TRAINING, TIME_TO_ACCURACY)
