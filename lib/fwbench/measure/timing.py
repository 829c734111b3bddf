"""Timers that follow DESIGN.md section 5.

Warm-up runs until compilation/autotuning is over and times are stable. Measurement then continues
until BOTH a minimum number of calls and a minimum duration are reached (MLPerf's rule), so a fast
call is not measured for a blink and a slow one not for three samples.

- Latency: every call synced and timed alone.
- Throughput: calls enqueued back to back, one sync per block, so the device pipeline stays full.
Inputs rotate over several pre-placed batches so caches never see the same tensor twice in a row.

In a relay group (``fwbench.measure.relay``) the arms of a comparison take turns: a timer passes
its turn at the start of each measurement and every quarter second between calls, and counts
only its own time against the stop rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fwbench.measure import relay
from fwbench.measure.stats import summarize

# A kernel in a relay group joins it here, holding the machine before any model is built.
relay.current()

# Warm-up is over when the median of the last _STABLE_WINDOW calls is within _STABLE_TOLERANCE of the
# window before it; a first XLA compile or cudnn.benchmark autotune makes the early calls far slower.
_STABLE_WINDOW = 5
_STABLE_TOLERANCE = 0.10
# On a noisy machine times may never settle; past this much warm-up, measure anyway and say so.
MAX_WARMUP_SECONDS = 30.0


@dataclass
class StopRule:
    min_iters: int = 20
    min_seconds: float = 1.0
    max_seconds: float | None = None  # a safety cap; None = no cap

    def done(self, iters: int, elapsed: float) -> bool:
        if self.max_seconds is not None and elapsed >= self.max_seconds and iters >= 1:
            return True
        return iters >= self.min_iters and elapsed >= self.min_seconds


# the entries of ``fwbench.measure.stats.summarize`` that are times (the others are counts and ratios)
_TIME_KEYS = ("p50", "p90", "p95", "p99", "mean", "std", "min", "median_ci_low", "median_ci_high")


@dataclass
class Timing:
    samples: np.ndarray  # seconds per call (latency) or per block (throughput)
    warmup_iters: int
    warmup_seconds: float
    summary: dict = field(default_factory=dict)
    warmup_stable: bool = True
    # per sample, the process's CPU seconds over its wall seconds: a slow block with full CPU use
    # was slowed below the operating system (the hypervisor, a neighbour on the core); one with
    # less was waiting inside it
    cpu_per_wall: np.ndarray | None = None
    # the share of the machine's CPU time the hypervisor stole while the samples were timed
    steal_frac: float | None = None

    def samples_ms(self) -> np.ndarray:
        return self.samples * 1e3

    def summary_ms(self) -> dict:
        """``summary`` with its times in milliseconds."""
        return {k: (v * 1e3 if k in _TIME_KEYS else v) for k, v in self.summary.items()}


def _steal_ticks() -> tuple[int, int] | None:
    """(stolen, all) CPU ticks since boot from /proc/stat's first line; None where absent."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def _steal_between(before, after) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def first_call_overhead(call: Callable[[], object], sync: Callable[[object], None]) -> float:
    """Seconds the first call costs beyond a steady one (the median of the next three).

    That excess is what a lazy compiler (torch.compile) spends on its first call.
    """
    t0 = time.perf_counter()
    sync(call())
    first = time.perf_counter() - t0
    steady = []
    for _ in range(3):
        t0 = time.perf_counter()
        sync(call())
        steady.append(time.perf_counter() - t0)
    return max(first - float(np.median(steady)), 0.0)


def _warm_up(
    call: Callable[[int], object],
    sync: Callable[[object], None],
    min_warmup: int,
    max_warmup: int,
    max_seconds: float | None = None,
) -> tuple[int, float, bool]:
    """Run ``call`` at least ``min_warmup`` times and until call times stop drifting.

    Returns (calls, seconds, stable); stable is False when the call or time cap ended it.
    """
    max_seconds = MAX_WARMUP_SECONDS if max_seconds is None else max_seconds
    times: list[float] = []
    relay.pass_turn()  # a relay's arms start each measurement together
    start = time.perf_counter()
    waited = 0.0
    i = 0
    while i < max(min_warmup, 1) or (
        i < max_warmup and not _stable(times) and time.perf_counter() - start - waited < max_seconds
    ):
        waited += relay.tick()
        t0 = time.perf_counter()
        sync(call(i))
        times.append(time.perf_counter() - t0)
        i += 1
    return i, time.perf_counter() - start - waited, bool(_stable(times) or i <= max(min_warmup, 1))


def _stable(times: Sequence[float]) -> bool:
    if len(times) < 2 * _STABLE_WINDOW:
        return False
    recent = np.median(times[-_STABLE_WINDOW:])
    before = np.median(times[-2 * _STABLE_WINDOW : -_STABLE_WINDOW])
    return abs(recent - before) <= _STABLE_TOLERANCE * before


def measure_latency(
    fn: Callable[[object], object],
    inputs: Sequence[object],
    sync: Callable[[object], None],
    rule: StopRule,
    *,
    warmup: int = 5,
    max_warmup: int = 50,
) -> Timing:
    """Seconds per call, each call synced and timed alone."""

    def call(i: int):
        return fn(inputs[i % len(inputs)])

    warm_iters, warm_s, stable = _warm_up(call, sync, warmup, max_warmup)
    samples, cpu = [], []
    start = time.perf_counter()
    ticks = _steal_ticks()
    waited = 0.0
    i = 0
    while not rule.done(i, time.perf_counter() - start - waited):
        waited += relay.tick()
        c0, t0 = time.process_time(), time.perf_counter()
        # go on from where warm-up stopped so the rotation never repeats a batch at the seam
        sync(call(warm_iters + i))
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        i += 1
    data = np.asarray(samples)
    return Timing(
        data, warm_iters, warm_s, summarize(data), stable,
        np.asarray(cpu) / data, _steal_between(ticks, _steal_ticks()),
    )  # fmt: skip


def measure_throughput(
    fn: Callable[[object], object],
    inputs: Sequence[object],
    sync: Callable[[object], None],
    rule: StopRule,
    *,
    block_size: int = 10,
    warmup: int = 5,
    max_warmup: int = 50,
) -> Timing:
    """Seconds per block of ``block_size`` enqueued calls with one sync at the end of the block.

    ``rule.min_iters`` counts calls, not blocks. Divide items per call x block_size by a block's
    time for items/s; ``summary`` is over block times.
    """

    def call(i: int):
        return fn(inputs[i % len(inputs)])

    warm_iters, warm_s, stable = _warm_up(call, sync, warmup, max_warmup)
    samples, cpu = [], []
    start = time.perf_counter()
    ticks = _steal_ticks()
    waited = 0.0
    calls = 0
    while not rule.done(calls, time.perf_counter() - start - waited) or len(samples) < 2:
        waited += relay.tick()
        c0, t0 = time.process_time(), time.perf_counter()
        out = None
        for j in range(block_size):
            out = call(warm_iters + calls + j)
        sync(out)
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        calls += block_size
    data = np.asarray(samples)
    return Timing(
        data, warm_iters, warm_s, summarize(data), stable,
        np.asarray(cpu) / data, _steal_between(ticks, _steal_ticks()),
    )  # fmt: skip
