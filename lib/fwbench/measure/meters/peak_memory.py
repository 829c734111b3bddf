"""Peak memory of a region of code, measured the way each platform allows.

- torch on CUDA: ``max_memory_allocated`` after ``reset_peak_memory_stats`` (the allocator's view).
- JAX on an accelerator: XLA offers no reset of ``memory_stats()["peak_bytes_in_use"]``. Where the
  region raises it, the new value is the region's own peak, exactly; where an earlier peak (often
  compilation's autotuning) stands above the region's, ``bytes_in_use`` sampled through the region
  stands in, and the note says so. Needs ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` or the pool hides
  usage.
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


class _Sampler(threading.Thread):
    """The largest value ``read()`` returned from start to stop, read every RSS_SAMPLE_SECONDS."""

    def __init__(self, read):
        super().__init__(daemon=True)
        self.read = read
        self.peak = read()
        self._halt = threading.Event()

    def run(self):
        while not self._halt.wait(RSS_SAMPLE_SECONDS):
            self.peak = max(self.peak, self.read())

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return max(self.peak, self.read())


def _rss_sampler() -> _Sampler:
    process = psutil.Process(os.getpid())
    return _Sampler(lambda: process.memory_info().rss)


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
        stats = jax_device.memory_stats() if jax_device is not None else None
        if not stats or "peak_bytes_in_use" not in stats:
            yield reading
            reading.source = "unavailable"
            reading.note = "this JAX backend reports no memory_stats"
            return
        before = int(stats["peak_bytes_in_use"])
        sampler = _Sampler(lambda: int(jax_device.memory_stats()["bytes_in_use"]))
        sampler.start()
        try:
            yield reading
        finally:
            sampled = sampler.stop()
        after = int(jax_device.memory_stats()["peak_bytes_in_use"])
        if after > before:
            reading.bytes, reading.source = after, "jax memory_stats peak_bytes_in_use"
            reading.note = "the region raised the process peak: its own peak, exactly"
        else:
            reading.bytes, reading.source = sampled, "jax memory_stats bytes_in_use, sampled"
            reading.note = (
                f"sampled every {RSS_SAMPLE_SECONDS * 1e3:g} ms in the region: the process peak "
                f"({after} B) was set before it, e.g. by compilation, and XLA has no reset"
            )
        if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() != "false":
            reading.note = "XLA preallocation was on; peak includes the preallocated pool"
        return
    sampler = _rss_sampler()
    sampler.start()
    try:
        yield reading
    finally:
        reading.bytes = int(sampler.stop())
        reading.source = "peak RSS of the kernel process (psutil sampling)"
        reading.note = (
            f"includes the framework runtime; lifetime ru_maxrss {lifetime_max_rss_bytes()} B"
        )
