"""Steady-state speed of one training step: time, images/s, compile time, memory, energy.

The step is timed like inference latency (DESIGN.md section 5): each step synced and timed alone,
after a warm-up that lasts until step times stop drifting, until both a minimum step count and a
minimum duration are met. A training step depends on the previous one through the weights, so
there is no pipelined "throughput" mode to add; images/s is the batch size over the step time.

Compile time is measured before the timed region: JAX's lowering and XLA compilation timed apart
(AOT), torch.compile's first step minus a steady step. By default the timed step starts from a
batch already on the device (several rotated); ``include_data`` makes every timed step also pull
its batch from the dataset and copy it to the device, and the data pipeline's share is reported.

An epoch is timed apart (``measure_epochs``): one full pass over the training split, batches
drawn, placed and stepped as a training loop does, synced once at its end, so that what a user
waits for per epoch, and the predictor's epoch forecast, is held against a stopwatch rather than
against the step time times the step count.

FLOPs of one whole step (forward, backward, optimizer) are counted the same way on both sides,
matmuls and convolutions only: torch's FlopCounterMode over an eager step, and the convolutions
and dot products of the jitted step's XLA program (``Trainer.step_flops``); divided by the
median step time they give the achieved FLOP/s from which the analysis computes training MFU.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from fwbench.measure.meters import measure_energy, measure_peak_memory
from fwbench.measure.timing import StopRule, measure_latency

N_ROTATING_BATCHES = 3


@dataclass
class SpeedResult:
    batch_size: int
    status: str = "ok"
    error: str | None = None
    step_ms: dict = field(default_factory=dict)  # fwbench.measure.stats.summarize, times in ms
    step_samples_ms: list[float] = field(default_factory=list)
    throughput_img_s: float | None = None
    throughput_ci: tuple[float | None, float | None] = (None, None)
    compile_s: float | None = None
    lower_s: float | None = None
    xla_compile_s: float | None = None
    peak_mem_bytes: int | None = None
    peak_mem_source: str = ""
    energy_j_per_step: float | None = None
    energy_note: str = ""
    data_share: float | None = None  # of step time spent fetching and placing the batch
    warmup_steps: int = 0
    final_loss: float | None = None
    flops_per_step: float | None = None
    flop_counter: str = ""
    achieved_tflops: float | None = None  # flops_per_step / median step time
    achieved_tflops_ci: tuple[float | None, float | None] = (None, None)


@dataclass
class EpochTiming:
    """Wall-clock seconds of each timed pass over the training split."""

    images: int  # per pass: full batches only, the incomplete last one dropped
    steps: int
    seconds: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return float(np.median(self.seconds))


def measure_epochs(trainer, data, batch_size: int, seed: int, passes: int) -> EpochTiming:
    """Time ``passes`` epochs of ``trainer`` over ``data``'s training split (a
    ``fwbench.data.batches.TrainingData``), each a fresh order, after its step is compiled and
    warm (``measure_training_speed`` runs first): fetching, placing and stepping every batch,
    one sync at the end of the pass, no validation."""
    from fwbench.families.training.convergence import steps_per_epoch

    steps = steps_per_epoch(data, batch_size)
    timing = EpochTiming(images=steps * batch_size, steps=steps)
    for epoch in range(passes):
        trainer.sync()
        start = time.perf_counter()
        for images, labels in itertools.islice(data.train_batches(batch_size, seed, epoch), steps):
            trainer.step(trainer.put(images, labels))
        trainer.sync()
        timing.seconds.append(time.perf_counter() - start)
    return timing


def _timed_data(next_batch: Callable[[], tuple], put, sync_input) -> tuple[Callable, list[float]]:
    """A batch source for ``include_data`` that also records how long each fetch took."""
    spent: list[float] = []

    def fetch():
        t0 = time.perf_counter()
        batch = put(*next_batch())
        sync_input(batch)
        spent.append(time.perf_counter() - t0)
        return batch

    return fetch, spent


def measure_training_speed(
    trainer,
    stream: Iterator[tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    rule: StopRule,
    *,
    warmup: int = 3,
    include_data: bool = False,
    energy_device_index: int = 0,
) -> SpeedResult:
    """Time ``trainer.step`` on batches drawn from ``stream``; out-of-memory becomes ``oom``."""
    from fwbench.families.inference.bench import is_oom

    result = SpeedResult(batch_size)
    framework = trainer.framework
    try:
        first = [trainer.put(*next(stream)) for _ in range(N_ROTATING_BATCHES)]
        if framework == "jax":
            result.lower_s, result.xla_compile_s = trainer.compile(first[0])
            result.compile_s = result.lower_s + result.xla_compile_s
        else:
            result.compile_s = trainer.warm_start(first[0])
        if include_data:
            sync_input = trainer.sync if framework == "torch" else _jax_ready
            fetch, fetch_s = _timed_data(lambda: next(stream), trainer.put, sync_input)

            def step(_unused):
                return trainer.step(fetch())

        else:
            fetch_s = []
            step = trainer.step
        with measure_peak_memory(
            framework, trainer.device, getattr(trainer, "jax_device", None)
        ) as mem:
            with measure_energy(trainer.device, energy_device_index) as energy:
                timing = measure_latency(step, first, trainer.sync, rule, warmup=warmup)
        # one step past the meters, to show the timed steps trained rather than diverged
        result.final_loss = trainer.loss_value(step(first[0]))
    except Exception as exc:
        if not is_oom(exc):
            raise
        result.status, result.error = "oom", f"{type(exc).__name__}: {str(exc)[:500]}"
        return result
    # after the timed steps: counting runs one more step (torch: on a copy), which must not
    # cost the timing its memory; a counting step that runs out of it leaves the count empty
    result.flop_counter = trainer.flop_counter
    try:
        result.flops_per_step = trainer.step_flops(first[0])
    except Exception as exc:
        if not is_oom(exc):
            raise
        result.flop_counter += f" (ran out of memory: {type(exc).__name__})"

    samples = timing.samples
    result.step_samples_ms = np.round(timing.samples_ms(), 5).tolist()
    result.step_ms = timing.summary_ms()
    result.warmup_steps = timing.warmup_iters
    result.throughput_img_s = batch_size / float(np.median(samples))
    # images/s falls as time rises, so the interval's ends swap
    lo, hi = timing.summary["median_ci_low"], timing.summary["median_ci_high"]
    result.throughput_ci = (batch_size / hi, batch_size / lo)
    if result.flops_per_step:
        result.achieved_tflops = result.flops_per_step / float(np.median(samples)) / 1e12
        result.achieved_tflops_ci = (
            result.flops_per_step / hi / 1e12,
            result.flops_per_step / lo / 1e12,
        )
    result.peak_mem_bytes, result.peak_mem_source = mem.bytes, mem.source
    steps_in_meter = timing.warmup_iters + len(samples)
    if energy.joules is not None:
        result.energy_j_per_step = energy.joules / steps_in_meter
        result.energy_note = energy.source
    else:
        result.energy_note = energy.reason
    if include_data:
        # the fetch times of the measured steps are the last len(samples) of all fetches
        measured = np.asarray(fetch_s[-len(samples) :])
        result.data_share = float(measured.sum() / samples.sum())
    return result


def _jax_ready(batch) -> None:
    import jax

    jax.block_until_ready(batch)
