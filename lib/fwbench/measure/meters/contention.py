"""How much of the machine was not ours while a cell ran.

CPU timings on a shared machine are not a measurement of the frameworks: on two cores shared with
another job, PyTorch's OpenMP threads wait on each other and a ResNet-50 training step took 4.4 s
instead of 0.33 s. The load average cannot tell: the benchmark's own threads make it rise. This
meter compares the CPU time the whole machine spent busy with the CPU time this process and the
children it waited for (the papermill kernel) spent, over the same interval, and reads the time the
hypervisor stole from the virtual CPUs. Both are fractions of all CPU time in the interval.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import psutil

# More than this share of the machine's CPU time going elsewhere marks a cell as run on a shared
# machine; its times are then not comparable with an idle run's.
SHARED_FRACTION = 0.10


@dataclass
class Contention:
    other_cpu_frac: float  # busy CPU time of other processes / all CPU time
    steal_frac: float  # time the hypervisor gave our virtual CPUs to someone else / all CPU time
    cpus: int

    @property
    def shared(self) -> bool:
        return is_shared(self.other_cpu_frac, self.steal_frac)

    def as_dict(self) -> dict:
        return {**asdict(self), "shared": self.shared}


def is_shared(other_cpu_frac: float | None, steal_frac: float | None) -> bool:
    """True when other processes and the hypervisor together took more than SHARED_FRACTION."""
    return (other_cpu_frac or 0.0) + (steal_frac or 0.0) > SHARED_FRACTION


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _busy_and_total(times) -> tuple[float, float, float]:
    idle = times.idle + getattr(times, "iowait", 0.0)
    steal = getattr(times, "steal", 0.0)
    # on Linux guest time is already inside user time, so it is not added again
    busy = sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
    return busy, steal, busy + idle + steal


class ContentionMeter:
    """``with ContentionMeter() as m: ...`` then ``m.result`` (None where psutil cannot tell).

    ``cpu``: read that one core instead of the machine, for a process pinned to it (a duet
    cell, whose partner on the other core is not a neighbour of this one)."""

    def __init__(self, cpu: int | None = None):
        self.result: Contention | None = None
        self.cpu = cpu

    def _times(self):
        if self.cpu is None:
            return psutil.cpu_times()
        return psutil.cpu_times(percpu=True)[self.cpu]

    def __enter__(self):
        self._own = _own_cpu_seconds()
        self._machine = self._times()
        return self

    def __exit__(self, *_exc):
        own = _own_cpu_seconds() - self._own
        busy1, steal1, total1 = _busy_and_total(self._times())
        busy0, steal0, total0 = _busy_and_total(self._machine)
        total = total1 - total0
        if total <= 0:
            return False
        self.result = Contention(
            other_cpu_frac=round(max(busy1 - busy0 - own, 0.0) / total, 4),
            steal_frac=round(max(steal1 - steal0, 0.0) / total, 4),
            cpus=1 if self.cpu is not None else psutil.cpu_count() or 1,
        )
        return False
