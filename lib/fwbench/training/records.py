"""Training results as tidy records (family ``training``).

Comparison rows (parity) carry ``framework="jax"`` with torch named as the reference in ``extra``;
the loss curves travel in ``extra`` so the analysis notebook (``fwbench.analysis.parity_curves``,
``convergence_curves``) can redraw them from records alone, as this family's notebook does.
"""

from __future__ import annotations

import numpy as np

from fwbench.training.convergence import Curve
from fwbench.training.parity import LOSS_TOLERANCE, PARAM_TOLERANCE, ParityResult
from fwbench.training.speed import SpeedResult


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


def add_parity(rec, result: ParityResult, batch_size: int, **columns) -> None:
    problems = result.failures()
    status = "failed" if problems else "ok"
    error = "; ".join(problems) or None
    # 9 digits: enough to recompute the reported 1e-7-level differences from the record alone
    curves = {"torch": _round(result.torch_losses, 9), "jax": _round(result.jax_losses, 9)}
    common = dict(
        status=status,
        error=error,
        framework="jax",
        mode="jit",
        precision="fp32",
        batch_size=batch_size,
        n=result.steps,
        **columns,
    )
    rec.add(
        "loss_parity_max_rel",
        result.loss_max_rel,
        "ratio",
        extra={
            "reference": "torch eager",
            "tolerance": LOSS_TOLERANCE,
            "losses": curves,
            "loss_rel": _round(result.loss_rel, 10),
            "optimizer": result.optimizer,
            "stochastic_layers_disabled": result.stochastic_layers_disabled,
            "residual_branches_zeroed": result.residual_branches_zeroed,
            "data": "seeded standard-normal noise batches",
            "settings": result.settings,
        },
        **common,
    )
    key, err = result.worst_param
    rec.add(
        "param_parity_max_rel",
        err,
        "ratio",
        extra={
            "reference": "torch eager",
            "tolerance": PARAM_TOLERANCE,
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
        extra={"reference": "torch eager", "tolerance": PARAM_TOLERANCE, "worst": key},
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
