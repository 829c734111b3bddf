"""Time to accuracy: how soon a framework's training reaches a validation accuracy, at the
learning rate and batch size that reach it soonest, every attempt from the same initial weights.

- **The clock** runs over training only: fetching and placing each batch and the step, with one
  sync at the end of every stretch between two evaluations (not after every step: a training
  loop does not block on each one). An evaluation stops the clock: the BatchNorm statistics are
  recomputed at the current weights as ``convergence`` does at its end (MobileNetV3's momentum
  of 0.01 leaves running statistics that describe an earlier network), then validation top-1.
  JAX compiles its step for the batch size before the clock starts, its seconds recorded apart;
  PyTorch eager has nothing to compile.
- **The search** is Optuna's TPE sampler over the learning rate (log-uniform) and the batch size
  (a choice), with the same seed and the same number of trials for each framework, so both try
  the same random configurations (the first third of the trials) before the sampler's own
  proposals begin. A trial's value is
  its seconds to the target; one that misses it within ``max_epochs`` scores its seconds doubled
  and more by its shortfall, worse than it would have been had it arrived.
- **Replicates** of the best configuration on other data orders (seeds) give the time to
  accuracy its spread: the rounds of the framework comparison.

Every attempt builds its trainer afresh from the model's seeded initial weights (``build_pair``
with one seed: torch's initialisation, ported to the Flax twin), so an attempt never starts where
the last one ended.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from fwbench.data.batches import TrainingData
from fwbench.families.training.convergence import (
    RECALIBRATION_BATCHES,
    steps_per_epoch,
    val_top1,
)
from fwbench.families.training.optim import OptimConfig

MISS_FACTOR = 2.0  # a missed target costs at least twice the seconds it spent


@dataclass
class Attempt:
    """One training run toward ``target`` (validation top-1, %) at one configuration."""

    framework: str
    lr: float
    batch_size: int
    seed: int  # the data order's
    target: float
    seconds: float | None = None  # training seconds to the first evaluation at the target
    steps: int = 0
    compile_s: float = 0.0
    evals: list[dict] = field(default_factory=list)  # step, epoch, seconds, val_top1
    losses: list[float] = field(default_factory=list)  # one per step

    @property
    def reached(self) -> bool:
        return self.seconds is not None

    @property
    def best_top1(self) -> float:
        return max((e["val_top1"] for e in self.evals), default=0.0)

    @property
    def spent_s(self) -> float:
        return self.evals[-1]["seconds"] if self.evals else 0.0

    def score(self) -> float:
        """The search's objective: seconds to the target; a miss, its seconds doubled and more
        by the share of the target it fell short."""
        if self.reached:
            return self.seconds
        shortfall = max(0.0, self.target - self.best_top1) / self.target
        return self.spent_s * (MISS_FACTOR + shortfall)

    def describe(self) -> dict:
        return {**asdict(self), "reached": self.reached, "best_top1": self.best_top1}


def evaluate(trainer, data: TrainingData, batch_size: int, seed: int, epoch: int) -> float:
    """Validation top-1 (%) at the current weights, BatchNorm statistics recomputed first."""
    batches = itertools.islice(data.train_batches(batch_size, seed, epoch), RECALIBRATION_BATCHES)
    trainer.recalibrate_bn(images for images, _ in batches)
    return val_top1(trainer, data, batch_size)


def run_attempt(
    trainer_for: Callable[[OptimConfig], object],
    data: TrainingData,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    target: float,
    max_epochs: int,
    evals_per_epoch: int = 2,
    optimizer: str = "sgd",
    schedule: str = "cosine",
) -> Attempt:
    """Train a fresh trainer (``trainer_for(config)``) until an evaluation reaches ``target`` or
    ``max_epochs`` have passed; the cosine schedule spans ``max_epochs``."""
    if not 0 < target <= 100:
        raise ValueError(f"the target is a validation top-1 in %, got {target}")
    per_epoch = steps_per_epoch(data, batch_size)
    total = per_epoch * max_epochs
    config = OptimConfig(optimizer, lr=lr, schedule=schedule, total_steps=total)
    trainer = trainer_for(config)
    attempt = Attempt(trainer.framework, lr, batch_size, seed, target)
    # where in an epoch to evaluate: evenly spaced, the last at the epoch's end
    marks = {round(j * per_epoch / max(1, evals_per_epoch)) for j in range(1, evals_per_epoch + 1)}
    if hasattr(trainer, "compile"):  # JAX: the step's program for this batch shape, off the clock
        images, labels = next(data.train_batches(batch_size, seed, 0))
        attempt.compile_s = sum(trainer.compile(trainer.put(images, labels)))
    clock, pending = 0.0, []
    for epoch in range(max_epochs):
        start = time.perf_counter()
        batches = itertools.islice(data.train_batches(batch_size, seed, epoch), per_epoch)
        for k, (images, labels) in enumerate(batches, start=1):
            pending.append(trainer.step(trainer.put(images, labels)))
            attempt.steps += 1
            if k not in marks:
                continue
            trainer.sync()
            clock += time.perf_counter() - start
            attempt.losses += [trainer.loss_value(loss) for loss in pending]
            pending = []
            top1 = evaluate(trainer, data, batch_size, seed, epoch)
            attempt.evals.append(
                {"step": attempt.steps, "epoch": attempt.steps / per_epoch, "seconds": clock,
                 "val_top1": top1}
            )  # fmt: skip
            if top1 >= target:
                attempt.seconds = clock
                return attempt
            start = time.perf_counter()
    return attempt


def resolve_mode(framework: str, mode: str) -> str:
    """The training step's mode (``default``: torch eager, JAX jit); torch.compile is not
    offered here, since every attempt would compile afresh inside the clock."""
    from fwbench.families.training.steps import resolve_training_mode

    mode = resolve_training_mode(framework, mode)
    if mode == "compile":
        raise ValueError("time to accuracy runs torch eager: each attempt would compile anew")
    return mode


def trainer_factory(
    model: str,
    framework: str,
    data: TrainingData,
    *,
    seed: int,
    device: str = "cpu",
    mode: str = "default",
) -> Callable[[OptimConfig], object]:
    """``config -> trainer``: each call builds ``model`` afresh from the same seeded initial
    weights (torch's initialisation; the Flax twin ported from it), stochastic layers off as in
    ``convergence``, fp32; ``mode`` the step's (JAX ``jit-expert``: the twin's expert form)."""
    from fwbench.families.training.steps import (
        JaxTrainer,
        TorchTrainer,
        configure_precision,
        disable_stochastic_layers,
    )
    from fwbench.models import build_pair

    if framework not in ("torch", "jax"):
        raise ValueError(f"framework must be torch or jax, got {framework!r}")
    configure_precision(framework, "fp32")

    def make(config: OptimConfig):
        torch_model, flax_model = build_pair(
            model, seed=seed, num_classes=data.num_classes, image_size=data.image_size
        )
        disable_stochastic_layers(torch_model, flax_model)
        if framework == "torch":
            return TorchTrainer(torch_model, config, device=device)
        return JaxTrainer(flax_model, config, device=device, mode=resolve_mode("jax", mode))

    return make


@dataclass
class _Search:
    best: dict  # lr, batch_size
    attempts: list[Attempt]
    trials: int
    seed: int


def search(
    attempt_at: Callable[[float, int], Attempt],
    *,
    trials: int,
    seed: int,
    lr_range: tuple[float, float],
    batch_sizes: Sequence[int],
    progress: bool = False,
) -> _Search:
    """Optuna's TPE sampler (seeded) over the learning rate and batch size for ``trials``
    attempts, each ``attempt_at(lr, batch_size)``; the best is the lowest score."""
    import optuna

    low, high = lr_range
    if not 0 < low < high:
        raise ValueError(f"the learning-rate range must be 0 < low < high, got {lr_range}")
    if trials < 1 or not batch_sizes:
        raise ValueError("a search needs at least one trial and one batch size")
    attempts: list[Attempt] = []

    def objective(trial) -> float:
        lr = trial.suggest_float("lr", low, high, log=True)
        batch_size = trial.suggest_categorical("batch_size", [int(b) for b in batch_sizes])
        attempt = attempt_at(lr, batch_size)
        attempts.append(attempt)
        trial.set_user_attr("reached", attempt.reached)
        return attempt.score()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # a third of the budget drawn at random (the same draws for every framework), the rest TPE's
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(1, trials // 3))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.optimize(objective, n_trials=trials, show_progress_bar=progress)
    return _Search(dict(study.best_params), attempts, trials, seed)
