"""How much of the machine was not ours while a cell ran.

CPU timings on a shared machine are not a measurement of the frameworks: on two cores shared with
another job, PyTorch's OpenMP threads wait on each other and a ResNet-50 training step took 4.4 s
instead of 0.33 s. The load average cannot tell: the benchmark's own threads make it rise. This
meter compares the CPU time the whole machine spent busy with the CPU time this process and the
children it waited for (the papermill kernel) spent, over the same interval, and reads the time the
hypervisor stole from the virtual CPUs. Both are fractions of all CPU time in the interval.

The children it waited for miss a process that dies unreaped by this tree: a browser's renderer,
killed with its process group when the driver closes the browser, is reaped by init, and its CPU
time never reaches ``os.times``. So the meter also samples its process tree while it runs
(``TreeSampler``: each descendant's CPU time at its last sighting) and takes the larger of the two
readings of its own work; both are lower bounds, the sample short by at most one interval of a
process's life.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass

import psutil

# More than this share of the machine's CPU time going elsewhere marks a cell as run on a shared
# machine; its times are then not comparable with an idle run's.
SHARED_FRACTION = 0.10
# How often the process tree is sampled: at most this much of a process's last CPU time is missed;
# each sample reads /proc for the tree, a millisecond or two, so rarely enough to cost nothing
_SAMPLE_INTERVAL_S = 0.5


@dataclass
class Contention:
    other_cpu_frac: float  # busy CPU time of other processes / all CPU time
    steal_frac: float  # time the hypervisor gave our virtual CPUs to someone else / all CPU time
    cpus: int
    # CPU seconds this process and its tree spent in the interval: what the meter left out of the
    # other processes' share, kept so that a reader can check it counted the cell's own kernels
    own_cpu_s: float | None = None

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


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


class TreeSampler:
    """The CPU seconds this process and the descendants it started since ``start()`` spent, each
    descendant counted to its last sighting, whether or not anyone of this tree reaps it. A child
    that was already running at ``start()`` is not this interval's work, as with ``os.times``."""

    def __init__(self, interval_s: float = _SAMPLE_INTERVAL_S):
        self.interval_s = interval_s
        self._seen: dict[tuple[int, float], float] = {}
        self._base: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="fwbench-tree", daemon=True)

    def _sample(self) -> dict[tuple[int, float], float]:
        me = psutil.Process()
        found = {}
        for proc in [me, *me.children(recursive=True)]:
            try:
                with proc.oneshot():
                    found[(proc.pid, proc.create_time())] = _cpu(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def _loop(self):
        while not self._stop.wait(self.interval_s):
            found = self._sample()
            with self._lock:
                self._seen.update(found)

    def start(self) -> TreeSampler:
        self._base = self._sample()
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._seen.update(self._sample())
            me = next(key for key in self._base if key[0] == os.getpid())
            born = sum(cpu for key, cpu in self._seen.items() if key not in self._base)
            return born + self._seen.get(me, self._base[me]) - self._base[me]


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
        # a process pinned to one core is read from that core; its tree may run on others
        self._tree = TreeSampler().start() if self.cpu is None else None
        return self

    def __exit__(self, *_exc):
        own = _own_cpu_seconds() - self._own
        if self._tree is not None:
            own = max(own, self._tree.stop())
        busy1, steal1, total1 = _busy_and_total(self._times())
        busy0, steal0, total0 = _busy_and_total(self._machine)
        total = total1 - total0
        if total <= 0:
            return False
        self.result = Contention(
            other_cpu_frac=round(max(busy1 - busy0 - own, 0.0) / total, 4),
            steal_frac=round(max(steal1 - steal0, 0.0) / total, 4),
            cpus=1 if self.cpu is not None else psutil.cpu_count() or 1,
            own_cpu_s=round(own, 3),
        )
        return False
