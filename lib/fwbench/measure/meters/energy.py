"""Energy of a region of code: NVML's energy counter, NVML power sampling, RAPL, or a stated reason.

NVML's total-energy counter (mJ since the driver loaded) is exact on Volta and newer; where it is not
supported the meter integrates sampled board power instead. On CPU, Linux RAPL (package domain) is
used when the powercap files are readable, which they often are not without root.
"""

from __future__ import annotations

import contextlib
import glob
import threading
import time
from dataclasses import dataclass

import numpy as np

POWER_SAMPLE_SECONDS = 0.01
_RAPL_GLOB = "/sys/class/powercap/intel-rapl:[0-9]*"


@dataclass
class EnergyReading:
    joules: float | None = None
    source: str = "unavailable"
    reason: str = ""
    seconds: float = 0.0


def _nvml_handle(index: int):
    import pynvml

    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)


class _PowerSampler(threading.Thread):
    """Board power every ``POWER_SAMPLE_SECONDS``; a read that fails ends the sampling and is kept
    as ``error``, so the meter reports why it has no energy instead of failing the cell."""

    def __init__(self, read_watts):
        super().__init__(daemon=True)
        self.read_watts = read_watts
        self.samples: list[tuple[float, float]] = []
        self.error: Exception | None = None
        self._halt = threading.Event()

    def _sample(self) -> bool:
        try:
            self.samples.append((time.perf_counter(), self.read_watts()))
            return True
        except Exception as exc:  # NVML's errors, whatever their class
            self.error = self.error or exc
            return False

    def run(self):
        while self._sample():
            if self._halt.wait(POWER_SAMPLE_SECONDS):
                break

    def stop(self) -> float | None:
        """The joules the samples integrate to; None when a read failed or too few were taken."""
        self._halt.set()
        self.join()
        if self.error is None:
            self._sample()
        if self.error is not None or len(self.samples) < 2:
            return None
        t, w = np.array(self.samples).T
        return float(np.trapezoid(w, t))


def _rapl_domains() -> list[str]:
    """Package-level RAPL domains whose counters this process can read."""
    readable = []
    for path in sorted(glob.glob(_RAPL_GLOB)):
        try:
            with open(f"{path}/energy_uj") as fh:
                int(fh.read())
            readable.append(path)
        except (OSError, ValueError):
            continue
    return readable


def _read_uj(path: str, name: str = "energy_uj") -> int:
    with open(f"{path}/{name}") as fh:
        return int(fh.read())


@contextlib.contextmanager
def measure_energy(device: str, index: int = 0):
    """Context manager yielding an ``EnergyReading`` filled in when the block exits."""
    reading = EnergyReading()
    start = time.perf_counter()
    if device == "cuda":
        try:
            pynvml, handle = _nvml_handle(index)
        except Exception as exc:  # no driver, no library: say so instead of guessing
            reading.reason = f"NVML unavailable: {exc}"
            yield reading
            reading.seconds = time.perf_counter() - start
            return
        try:
            before = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception:  # no counter on this GPU: integrate sampled power instead
            before = None
        if before is not None:
            yield reading
            try:
                after = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
                reading.joules = (after - before) / 1000.0
                reading.source = "nvml total energy counter"
            except Exception as exc:
                reading.reason = f"NVML energy counter unreadable after the block: {exc}"
        else:
            sampler = _PowerSampler(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            sampler.start()
            try:
                yield reading
            finally:
                joules = sampler.stop()
                if joules is None:
                    why = sampler.error or "fewer than 2 samples"
                    reading.reason = f"NVML power sampling failed: {why}"
                else:
                    reading.joules, reading.source = joules, "nvml power sampling"
        reading.seconds = time.perf_counter() - start
        return
    if device == "cpu":
        domains = _rapl_domains()
        if domains:
            before = [_read_uj(d) for d in domains]
            yield reading
            total = 0
            for d, b in zip(domains, before, strict=True):
                delta = _read_uj(d) - b
                if delta < 0:  # the counter wrapped
                    delta += _read_uj(d, "max_energy_range_uj")
                total += delta
            reading.joules = total / 1e6
            reading.source = "rapl package energy"
        else:
            reading.reason = "no readable RAPL counter (powercap absent or not permitted)"
            yield reading
        reading.seconds = time.perf_counter() - start
        return
    reading.reason = f"no energy counter implemented for device {device!r}"
    yield reading
    reading.seconds = time.perf_counter() - start
