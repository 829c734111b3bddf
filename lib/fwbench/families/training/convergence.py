"""Convergence: a few epochs on a labelled dataset, both frameworks from the same start.

Both sides start from the same ported weights, see the same batches in the same order (one
seeded sampler, augmentation off) and follow the same learning-rate schedule. Dropout and
stochastic depth are off by default (``stochastic_layers=False``): the two frameworks cannot draw
the same masks, and with them on, EfficientNet-B0's 3-epoch runs on digits ended 25 points apart
at SGD 0.005 and 7 points apart at AdamW 1e-3 (torch 79.9%, JAX 87.2%); with them off, 89.4%
and 88.6%. The curves are still compared as curves (final accuracy within a few points), not
step by step: over hundreds of steps rounding differences grow. Validation top-1 is measured in eval mode (running BatchNorm statistics) before
training and after every epoch.

At the end, both sides recompute their BatchNorm running statistics at the final weights (one
more pass over the training split, a plain average as ``torch.optim.swa_utils.update_bn`` does)
and validate again; that figure is the one reported and checked. Why: MobileNetV3 keeps running
statistics with momentum 0.01, so after a few hundred steps of fast-moving weights they describe
an earlier network. Measured on digits at 32 px: 8.4% validation top-1 with the running statistics
as trained, on both frameworks alike, and 93% after recalibration.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from fwbench.data.batches import SYNTHETIC_BATCHES_PER_EPOCH, TrainingData
from fwbench.families.training.optim import OptimConfig
from fwbench.families.training.steps import JaxTrainer, TorchTrainer, configure_precision

# enough batches for stable statistics; on digits this is the whole training split
RECALIBRATION_BATCHES = 200
_CHANCE_MARGIN = 3.0  # "well above chance": at least this many times the chance accuracy
_MAX_GAP_POINTS = 5.0  # the two frameworks' final val top-1, in percentage points


@dataclass
class Curve:
    framework: str
    train_loss: list[float] = field(default_factory=list)  # one per step
    val_top1: list[float] = field(default_factory=list)  # % before training, then per epoch
    steps_per_epoch: int = 0
    seconds: float = 0.0
    recalibrated_top1: float | None = None  # after recomputing BatchNorm statistics
    recalibrated_norms: int = 0
    stochastic_layers_disabled: int = 0  # dropout / stochastic-depth modules set to rate 0

    @property
    def final_val_top1(self) -> float:
        """The reported accuracy: after BatchNorm recalibration where the model has BatchNorm."""
        return self.val_top1[-1] if self.recalibrated_top1 is None else self.recalibrated_top1

    @property
    def final_train_loss(self) -> float:
        """Mean loss over the last epoch's steps: a single step's loss is too noisy to report."""
        last = self.train_loss[-self.steps_per_epoch :] if self.steps_per_epoch else []
        return float(np.mean(last)) if last else float("nan")


def steps_per_epoch(data: TrainingData, batch_size: int, limit: int = 0) -> int:
    """Full batches in one pass over the training split, capped at ``limit`` when positive."""
    source = data.train_source
    if source is None:  # synthetic noise: its "epoch" is a fixed number of batches
        full = SYNTHETIC_BATCHES_PER_EPOCH
        return min(full, limit) if limit > 0 else full
    n = len(source[1]) if isinstance(source, tuple) else len(source)
    full = n // batch_size
    if full == 0:
        raise ValueError(f"batch size {batch_size} exceeds the {n} training images of {data.name}")
    return min(full, limit) if limit > 0 else full


def val_top1(trainer, data: TrainingData, batch_size: int) -> float:
    correct = total = 0
    for images, labels in data.val_batches(batch_size):
        correct += int((trainer.predict(images) == labels).sum())
        total += len(labels)
    return 100.0 * correct / total


def train_curve(
    trainer,
    data: TrainingData,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    max_steps: int = 0,
    recalibrate: bool = True,
) -> Curve:
    curve = Curve(trainer.framework, steps_per_epoch=steps_per_epoch(data, batch_size, max_steps))
    start = time.perf_counter()
    curve.val_top1.append(val_top1(trainer, data, batch_size))
    for epoch in range(epochs):
        batches = data.train_batches(batch_size, seed, epoch)
        for images, labels in itertools.islice(batches, curve.steps_per_epoch):
            curve.train_loss.append(trainer.loss_value(trainer.step(trainer.put(images, labels))))
        curve.val_top1.append(val_top1(trainer, data, batch_size))
    if recalibrate:
        batches = data.train_batches(batch_size, seed, epochs)
        passes = (images for images, _ in itertools.islice(batches, RECALIBRATION_BATCHES))
        curve.recalibrated_norms = trainer.recalibrate_bn(passes)
        if curve.recalibrated_norms:
            curve.recalibrated_top1 = val_top1(trainer, data, batch_size)
    trainer.sync()
    curve.seconds = time.perf_counter() - start
    return curve


def run_convergence(
    model: str,
    data: TrainingData,
    config: OptimConfig,
    *,
    epochs: int,
    batch_size: int,
    seed: int = 0,
    max_steps_per_epoch: int = 0,
    precision: str = "fp32",
    devices: dict[str, str] | None = None,
    stochastic_layers: bool = False,
) -> dict[str, Curve]:
    """Train torch (eager) and JAX (jit) side by side; ``config.total_steps`` should span the run."""
    from fwbench.families.training.steps import disable_stochastic_layers
    from fwbench.models import build_pair

    if not data.has_labels:
        raise ValueError("convergence needs a labelled dataset: digits or imagenet100")
    devices = devices or {"torch": "cpu", "jax": "cpu"}
    for framework in ("torch", "jax"):
        configure_precision(framework, precision)
    torch_model, flax_model = build_pair(
        model, seed=seed, num_classes=data.num_classes, image_size=data.image_size
    )
    disabled = 0 if stochastic_layers else disable_stochastic_layers(torch_model, flax_model)
    trainers = [
        TorchTrainer(torch_model, config, device=devices["torch"], precision=precision),
        JaxTrainer(flax_model, config, device=devices["jax"], precision=precision),
    ]
    curves = {
        t.framework: train_curve(
            t, data, epochs=epochs, batch_size=batch_size, seed=seed, max_steps=max_steps_per_epoch
        )
        for t in trainers
    }
    for curve in curves.values():
        curve.stochastic_layers_disabled = disabled
    return curves


def verdict(curves: dict[str, Curve], num_classes: int) -> list[str]:
    """Why the run does not count as converged on both sides; empty when it does."""
    chance = 100.0 / num_classes
    problems = []
    for name, curve in curves.items():
        if curve.final_val_top1 < _CHANCE_MARGIN * chance:
            problems.append(
                f"{name} reached {curve.final_val_top1:.1f}% val top-1, "
                f"not {_CHANCE_MARGIN:g}x chance ({chance:.1f}%)"
            )
    finals = [c.final_val_top1 for c in curves.values()]
    if max(finals) - min(finals) > _MAX_GAP_POINTS:
        problems.append(
            f"final val top-1 differs by {max(finals) - min(finals):.1f} points "
            f"(> {_MAX_GAP_POINTS:g})"
        )
    return problems
