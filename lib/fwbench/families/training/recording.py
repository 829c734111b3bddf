"""Training results as tidy records (family ``training``).

Comparison rows (parity) carry ``framework="jax"`` with torch named as the reference in ``extra``;
the loss curves travel in ``extra`` so the analysis notebook (``fwbench.report.tables.parity_curves``,
``convergence_curves``) can redraw them from records alone, as this family's notebook does.

Parity comes as two sets of rows, told apart by metric name and ``precision``:

- the fp64 proof, gated (status ``failed`` when it fails): ``fp64_loss_parity_max_rel``
  (``extra.losses``, ``extra.loss_rel``), ``fp64_param_parity_max_rel`` and
  ``fp64_bn_stats_parity_max_rel`` (``extra.worst``, ``extra.per_tensor``, ``extra.skipped`` with
  ``extra.skip_rule``);
- the fp32 measurement, never gated: ``loss_parity_max_rel`` (the curves), ``param_parity_max_rel``,
  ``bn_stats_parity_max_rel`` and ``fp32_loss_divergence_step`` (null when the losses never
  differ by more than ``extra.threshold`` within ``extra.steps_compared`` steps).

Speed rows add ``flops_per_step`` (FLOP/step, ``extra.counter`` naming the counting method) and
``achieved_tflops`` (TFLOP/s, flops_per_step over the median step time). A timed epoch adds
``epoch_seconds`` (the median pass; ``extra.passes``, ``extra.images``, ``extra.steps``), the
measurement 21_prediction holds its training-time forecast against.
"""

from __future__ import annotations

import numpy as np

from fwbench.families.training.convergence import Curve
from fwbench.families.training.parity import (
    FP32_DIVERGENCE,
    LOSS_TOLERANCE,
    PARAM_TOLERANCE,
    SHIFT_THRESHOLD,
    ZERO_GRADIENT_RATIO,
    ParityResult,
)
from fwbench.families.training.speed import EpochTiming, SpeedResult

_SKIP_RULE = (
    f"skipped: fp64 gradient norm below {ZERO_GRADIENT_RATIO:g} of the step's largest at every "
    "step on both sides (an exact zero gradient; Adam turns its rounding into random steps)"
)
_STATISTICS_SKIP_RULE = (
    "skipped: running means whose BatchNorm input mean moves by more than "
    f"{SHIFT_THRESHOLD:g} std when the skipped parameters are moved by one"
)


def add_speed(rec, result: SpeedResult, **columns) -> None:
    bs = result.batch_size
    if result.status != "ok":
        rec.add(
            "cell_status",
            None,
            "",
            status=result.status,
            error=result.error,
            batch_size=bs,
            **columns,
        )
        return
    step = result.step_ms
    rec.add_summary(
        "step_time",
        step,
        "ms",
        samples=result.step_samples_ms,
        extra={"warmup_steps": result.warmup_steps},
        batch_size=bs,
        **columns,
    )
    low, high = result.throughput_ci
    rec.add(
        "throughput_img_s",
        result.throughput_img_s,
        "img/s",
        n=step["n"],
        ci_low=low,
        ci_high=high,
        batch_size=bs,
        extra={
            "from": "batch_size / median step time",
            # per-step images/s: what the analysis bootstraps a JAX / PyTorch ratio over
            "samples": [round(bs * 1e3 / ms, 4) for ms in result.step_samples_ms],
        },
        **columns,
    )
    rec.add_compile_and_memory(result, batch_size=bs, **columns)
    energy_extra = {
        "source" if result.energy_j_per_step is not None else "reason": result.energy_note
    }
    rec.add(
        "energy_j_per_step",
        result.energy_j_per_step,
        "J",
        batch_size=bs,
        extra=energy_extra,
        **columns,
    )
    if result.data_share is not None:
        rec.add(
            "data_share",
            result.data_share,
            "ratio",
            batch_size=bs,
            extra={"what": "fetching the batch and copying it to the device"},
            **columns,
        )
    rec.add("speed_final_loss", result.final_loss, "nats", batch_size=bs, **columns)
    if result.flop_counter:  # a count that could not run says why in its counter
        _add_flops(rec, result, **columns)


def _add_flops(rec, result: SpeedResult, **columns) -> None:
    """The step's counted FLOPs and the TFLOP/s they make at the median step time."""
    bs = result.batch_size
    counted = {
        "counter": result.flop_counter,
        "counts": "matmuls and convolutions of forward, backward and optimizer, 2 per MAC",
    }
    rec.add(
        "flops_per_step", result.flops_per_step, "FLOP/step", batch_size=bs, extra=counted,
        **columns,
    )  # fmt: skip
    low, high = result.achieved_tflops_ci
    rec.add(
        "achieved_tflops",
        result.achieved_tflops,
        "TFLOP/s",
        n=result.step_ms["n"],
        ci_low=low,
        ci_high=high,
        batch_size=bs,
        extra={
            **counted,
            "flops_per_step": result.flops_per_step,
            "from": "flops_per_step / median step time",
        },
        **columns,
    )


def add_epochs(rec, timing: EpochTiming, batch_size: int, **columns) -> None:
    rec.add(
        "epoch_seconds",
        timing.median_s,
        "s",
        n=len(timing.seconds),
        batch_size=batch_size,
        extra={
            "passes": [round(s, 4) for s in timing.seconds],
            "images": timing.images,
            "steps": timing.steps,
            "what": "one pass over the training split: fetch, place and step every full batch, "
            "one sync at its end, no validation",
        },
        **columns,
    )


def add_parity(rec, result: ParityResult, batch_size: int, **columns) -> None:
    """The fp64 proof as ``fp64_*`` rows, gated; an fp32 run as the measurement rows.

    fp32 keeps the metric names the analysis reads its curves from (``loss_parity_max_rel`` with
    ``extra.losses``), with status ``ok`` whatever the values: it has no gate.
    """
    if result.gated:
        _add_fp64_parity(rec, result, batch_size, **columns)
    else:
        _add_fp32_parity(rec, result, batch_size, **columns)


def _common(result: ParityResult, batch_size: int, status: str, error, columns) -> dict:
    return dict(
        status=status,
        error=error,
        framework="jax",
        mode="jit",
        precision=result.precision,
        batch_size=batch_size,
        n=result.steps,
        **columns,
    )


def _run_extra(result: ParityResult) -> dict:
    return {
        "reference": "torch eager",
        "optimizer": result.optimizer,
        "stochastic_layers_disabled": result.stochastic_layers_disabled,
        "residual_branches_zeroed": result.residual_branches_zeroed,
        "image_size": result.image_size,
        "settings": result.settings,
    }


def _add_fp64_parity(rec, result: ParityResult, batch_size: int, **columns) -> None:
    problems = result.failures()
    common = _common(
        result, batch_size, "failed" if problems else "ok", "; ".join(problems) or None, columns
    )
    # 17 digits: a float64 written so that it reads back exactly
    curves = {"torch": _round(result.torch_losses, 17), "jax": _round(result.jax_losses, 17)}
    rec.add(
        "fp64_loss_parity_max_rel",
        result.loss_max_rel,
        "ratio",
        extra={
            **_run_extra(result),
            "tolerance": LOSS_TOLERANCE,
            "losses": curves,
            "loss_rel": _round(result.loss_rel, 4),
        },
        **common,
    )
    key, err = result.worst_param
    rec.add(
        "fp64_param_parity_max_rel",
        err,
        "ratio",
        extra={
            "reference": "torch eager",
            "tolerance": PARAM_TOLERANCE,
            "worst": key,
            "per_tensor": {k: float(f"{v:.3e}") for k, v in result.param_errors.items()},
            "skipped": {
                name: {**ratios, "error": float(f"{result.param_errors[name]:.3e}")}
                for name, ratios in result.skipped_params.items()
            },
            "skip_rule": _SKIP_RULE,
        },
        **common,
    )
    key, err = result.worst_buffer
    rec.add(
        "fp64_bn_stats_parity_max_rel",
        err,
        "ratio",
        extra={
            "reference": "torch eager",
            "tolerance": PARAM_TOLERANCE,
            "worst": key,
            "per_tensor": {k: float(f"{v:.3e}") for k, v in result.buffer_errors.items()},
            "skipped": {
                name: float(f"{result.buffer_errors[name]:.3e}")
                for name in result.skipped_statistics
            },
            "skip_rule": _STATISTICS_SKIP_RULE,
        },
        **common,
    )


def _add_fp32_parity(rec, result: ParityResult, batch_size: int, **columns) -> None:
    common = _common(result, batch_size, "ok", None, columns)
    measured = {
        "gate": None,
        "why": "fp32 agreement measures the CPU's rounding; fp64 is the proof",
    }
    # 9 digits: enough to recompute the reported 1e-7-level differences from the record alone
    curves = {"torch": _round(result.torch_losses, 9), "jax": _round(result.jax_losses, 9)}
    rec.add(
        "loss_parity_max_rel",
        result.loss_max_rel,
        "ratio",
        extra={
            **_run_extra(result),
            **measured,
            "losses": curves,
            "loss_rel": _round(result.loss_rel, 4),
        },
        **common,
    )
    step = result.divergence_step(FP32_DIVERGENCE)
    rec.add(
        "fp32_loss_divergence_step",
        step,
        "step",
        extra={
            "threshold": FP32_DIVERGENCE,
            "diverged": step is not None,
            "steps_compared": result.steps,
            "meaning": "first step (0-based) whose fp32 losses differ by more than the "
            "threshold, relative; null when none of the steps_compared does",
        },
        **common,
    )
    key, err = result.worst_param
    rec.add(
        "param_parity_max_rel",
        err,
        "ratio",
        extra={
            **measured,
            "reference": "torch eager",
            "worst": key,
            "per_tensor": {k: float(f"{v:.3e}") for k, v in result.param_errors.items()},
        },
        **common,
    )
    key, err = result.worst_buffer
    rec.add(
        "bn_stats_parity_max_rel",
        err,
        "ratio",
        extra={**measured, "reference": "torch eager", "worst": key},
        **common,
    )


def add_convergence(
    rec, curves: dict[str, Curve], batch_size: int, problems: list[str], **columns
) -> None:
    status = "failed" if problems else "ok"
    error = "; ".join(problems) or None
    mode = {"torch": "eager", "jax": "jit"}
    for name, curve in curves.items():
        common = dict(
            status=status,
            error=error,
            framework=name,
            mode=mode[name],
            batch_size=batch_size,
            **columns,
        )
        extra = {
            "val_top1_by_epoch": _round(curve.val_top1, 4),
            "val_top1_as_trained": round(curve.val_top1[-1], 4),
            "bn_recalibrated": curve.recalibrated_norms,
            "stochastic_layers_disabled": curve.stochastic_layers_disabled,
            "epochs": len(curve.val_top1) - 1,
            "steps_per_epoch": curve.steps_per_epoch,
            "seconds": round(curve.seconds, 2),
        }
        rec.add("val_top1", curve.final_val_top1, "%", extra=extra, **common)
        rec.add("val_top1_as_trained", curve.val_top1[-1], "%", **common)
        rec.add(
            "train_loss_final",
            curve.final_train_loss,
            "nats",
            n=curve.steps_per_epoch,
            extra={"train_loss": _round(curve.train_loss)},
            **common,
        )


def _round(values, digits: int = 6) -> list[float]:
    return [float(f"{v:.{digits}g}") for v in np.asarray(values, dtype=float)]
