"""Peak memory of a region of code, measured the way each platform allows.

- torch on CUDA: ``max_memory_allocated`` after ``reset_peak_memory_stats`` (the allocator's view).
- JAX on an accelerator: ``memory_stats()["peak_bytes_in_use"]``. XLA offers no reset, so the value is
  the process peak so far; each cell runs in a fresh kernel and batch sizes go up, so it is the peak of
  the largest batch so far. Needs ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` or the pool hides usage.
- CPU (either framework): peak resident set size of this process during the region. Linux keeps
  an exact high-water mark (VmHWM) that writing "5" to /proc/self/clear_refs resets; elsewhere a
  psutil sampling thread stands in (it can miss peaks while a C call holds the GIL).
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from dataclasses import dataclass

import psutil

RSS_SAMPLE_SECONDS = 0.002


@dataclass
class PeakMemory:
    bytes: int | None = None
    source: str = ""
    note: str = ""


class _RssSampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.process = psutil.Process(os.getpid())
        self.peak = self.process.memory_info().rss
        self._halt = threading.Event()

    def run(self):
        while not self._halt.wait(RSS_SAMPLE_SECONDS):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return max(self.peak, self.process.memory_info().rss)


def _reset_rss_high_water_mark() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _rss_high_water_mark() is not None
    except OSError:
        return False


def _rss_high_water_mark() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except OSError:
        pass
    return None


def lifetime_max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


@contextlib.contextmanager
def measure_peak_memory(framework: str, device: str, jax_device=None):
    """Context manager yielding a ``PeakMemory`` filled in when the block exits."""
    reading = PeakMemory()
    if framework == "torch" and device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield reading
        torch.cuda.synchronize()
        reading.bytes = int(torch.cuda.max_memory_allocated())
        reading.source = "torch.cuda.max_memory_allocated"
        return
    if framework == "jax" and device != "cpu":
        yield reading
        stats = jax_device.memory_stats() if jax_device is not None else None
        if stats and "peak_bytes_in_use" in stats:
            reading.bytes = int(stats["peak_bytes_in_use"])
            reading.source = "jax memory_stats peak_bytes_in_use"
            if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() != "false":
                reading.note = "XLA preallocation was on; peak includes the preallocated pool"
            else:
                reading.note = "process peak so far (XLA has no reset)"
        else:
            reading.source = "unavailable"
            reading.note = "this JAX backend reports no memory_stats"
        return
    sampler = _RssSampler()
    sampler.start()
    try:
        yield reading
    finally:
        reading.bytes = int(sampler.stop())
        reading.source = "peak RSS of the kernel process (psutil sampling)"
        reading.note = (
            f"includes the framework runtime; lifetime ru_maxrss {lifetime_max_rss_bytes()} B"
        )
