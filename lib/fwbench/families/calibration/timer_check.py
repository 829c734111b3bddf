"""Our latency timer against torch's own ``torch.utils.benchmark`` on the same call.

DESIGN.md's timer (warm-up until stable, every call synced and timed alone, the median) should read
what ``Timer.blocked_autorange`` reads. Measuring that takes care on a shared host: a burst of
stolen CPU time lasts seconds and can make one timer's rounds read 50% slow while the other's do
not. So the two take turns in short rounds, in alternating order, so that such a burst lands on
both alike, and each side's median is over all its rounds. The contention reading over the whole
comparison says whether the machine was quiet enough for the verdict to mean anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from fwbench.measure.meters.contention import Contention, ContentionMeter
from fwbench.measure.timing import StopRule, measure_latency

# DESIGN.md's bound on the two timers' medians of the same call.
_AGREEMENT_TOLERANCE = 0.05


@dataclass
class TimerAgreement:
    ours_s: float  # median of our per-call times over all rounds
    theirs_s: float  # median of blocked_autorange's per-call times over all rounds
    ours_n: int
    theirs_n: int
    contention: Contention | None

    @property
    def ratio(self) -> float:
        return self.ours_s / self.theirs_s

    @property
    def agrees(self) -> bool:
        return abs(self.ratio - 1) < _AGREEMENT_TOLERANCE

    @property
    def quiet(self) -> bool:
        """False when the contention meter marks the comparison as run on a shared machine."""
        return self.contention is not None and not self.contention.shared

    def verdict(self) -> str:
        agreement = "agree" if self.agrees else "disagree"
        line = (
            f"our median {self.ours_s * 1e3:.2f} ms (n={self.ours_n}) vs blocked_autorange "
            f"{self.theirs_s * 1e3:.2f} ms (n={self.theirs_n}): ratio {self.ratio:.3f}, the timers "
            f"{agreement} within {_AGREEMENT_TOLERANCE:.0%}"
        )
        if self.contention is None:
            line += "; the machine's contention could not be read, so this may not count"
        elif self.contention.shared:
            line += (
                "; the machine was shared during the comparison, so this says nothing either way"
            )
        return line

    def as_dict(self) -> dict:
        out = asdict(self)
        out["contention"] = self.contention.as_dict() if self.contention else None
        return {**out, "ratio": self.ratio, "agrees": self.agrees, "quiet": self.quiet}


def compare_with_torch_benchmark(
    fn: Callable[[object], object],
    arg: object,
    sync: Callable[[object], None],
    *,
    rounds: int = 8,
    calls_per_round: int = 3,
    round_seconds: float = 1.0,
) -> TimerAgreement:
    """Medians of ``fn(arg)`` by our timer and by ``blocked_autorange``, in interleaved rounds.

    ``sync`` is our side's device sync; torch's Timer syncs CUDA itself. Each of our rounds warms up
    with one call (the first round's warm-up also covers the first call overall) and times
    ``calls_per_round``; each of theirs runs ``blocked_autorange(min_run_time=round_seconds)``.
    """
    import torch
    import torch.utils.benchmark as tb

    if rounds < 1 or calls_per_round < 1 or round_seconds <= 0:
        raise ValueError("rounds and calls_per_round must be >= 1 and round_seconds > 0")
    threads = torch.get_num_threads()  # blocked_autorange would otherwise run on one thread
    ours: list[float] = []
    theirs = []

    def our_round():
        rule = StopRule(calls_per_round, 0.0)
        ours.extend(measure_latency(fn, [arg], sync, rule, warmup=1, max_warmup=1).samples)

    def their_round():
        timer = tb.Timer("fn(arg)", globals={"fn": fn, "arg": arg}, num_threads=threads)
        theirs.append(timer.blocked_autorange(min_run_time=round_seconds))

    with ContentionMeter() as meter:
        for i in range(rounds):
            for side in (our_round, their_round) if i % 2 == 0 else (their_round, our_round):
                side()
    merged = tb.Measurement.merge(theirs)[0]
    return TimerAgreement(
        ours_s=float(np.median(ours)),
        theirs_s=float(merged.median),
        ours_n=len(ours),
        theirs_n=len(merged.times),
        contention=meter.result,
    )


def check_on_torch_model(
    model: str, device: str, batch_size: int, image_size: int, *, rounds: int = 8, seed: int = 0
) -> TimerAgreement:
    """``compare_with_torch_benchmark`` on the call 10_inference times for a registry model:
    PyTorch eager, fp32, NCHW, on ``device``, one seeded random batch."""
    import torch

    from fwbench.data import synthetic_batch
    from fwbench.families.inference.bench import TorchSide
    from fwbench.models.registry import get_spec

    torch.manual_seed(seed)
    net = get_spec(model).torch_model(image_size=image_size)
    side = TorchSide(net, device, "fp32", "eager", channels_last=False)
    (x,) = side.inputs([synthetic_batch(batch_size, image_size, seed)[0]])
    return compare_with_torch_benchmark(side, x, side.sync, rounds=rounds)
