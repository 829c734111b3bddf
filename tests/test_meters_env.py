import os
import subprocess
import sys

import numpy as np
import pytest

from fwbench.measure import device
from fwbench.measure.meters import measure_energy, measure_peak_memory
from fwbench.pipeline import environment
from fwbench.pipeline.cell_checks import preload_found

HAS_CUDA = False
try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:
    pass
cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


def test_cpu_peak_rss_sees_a_large_temporary_allocation():
    with measure_peak_memory("torch", "cpu") as before:
        pass
    with measure_peak_memory("torch", "cpu") as reading:
        block = np.ones(400 * 2**20 // 8)  # 400 MiB, touched so it is resident
        block.sum()
        del block
    assert reading.bytes - before.bytes > 300 * 2**20
    assert "RSS" in reading.source


class _StatsDevice:
    """A JAX device's memory_stats as an accelerator reports them (a CPU device reports none):
    ``in_use`` is set by the test, the peak follows it and never falls, as XLA's does."""

    def __init__(self, peak: int):
        self.in_use, self.peak = 0, peak

    def set(self, in_use: int) -> None:
        self.in_use, self.peak = in_use, max(self.peak, in_use)

    def memory_stats(self) -> dict:
        return {"bytes_in_use": self.in_use, "peak_bytes_in_use": self.peak}


def test_a_jax_region_that_raises_the_process_peak_reads_it_exactly(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    dev = _StatsDevice(peak=500)
    with measure_peak_memory("jax", "cuda", dev) as reading:
        dev.set(800)
        dev.set(100)
    assert reading.bytes == 800 and reading.source.endswith("peak_bytes_in_use")


def test_a_jax_region_below_an_earlier_peak_is_sampled_not_given_that_peak(monkeypatch):
    # compilation set the process peak at 5000; the timed calls never pass 700
    import time

    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    dev = _StatsDevice(peak=5000)
    with measure_peak_memory("jax", "cuda", dev) as reading:
        dev.set(700)
        time.sleep(0.05)
        dev.set(200)
    assert reading.bytes == 700
    assert reading.source.endswith("sampled") and "5000 B" in reading.note


def test_energy_on_cpu_is_measured_or_says_why():
    with measure_energy("cpu") as reading:
        sum(range(10000))
    if reading.joules is None:
        assert reading.reason and reading.source == "unavailable"
    else:
        assert reading.joules >= 0 and reading.source.startswith("rapl")


def test_environment_records_what_a_reviewer_asks_for():
    env = environment.capture()
    for key in ("git_sha", "cpu_model", "packages", "pip_freeze_hash", "env_vars", "gpus"):
        assert key in env
    assert env["packages"]["torch"] and env["packages"]["jax"]
    assert env["torch"]["matmul_allow_tf32"] in (True, False)
    assert "jax_default_matmul_precision" in env["jax"]
    assert len(env["pip_freeze_hash"]) == 16


def test_the_heap_allocator_is_read_from_the_libraries_mapped(tmp_path):
    maps = tmp_path / "maps"
    line = "7f00-7f10 r-xp 00000000 08:01 42 {}\n"
    maps.write_text(line.format("/usr/lib/x86_64-linux-gnu/libc.so.6") + line.format("[heap]"))
    assert device.heap_allocator(maps) == "glibc"
    maps.write_text(maps.read_text() + line.format("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"))
    assert device.heap_allocator(maps) == "jemalloc"
    assert device.heap_allocator(tmp_path / "absent") == "unknown"


def test_a_preloaded_jemalloc_is_the_allocator_a_process_reports():
    if not preload_found("libjemalloc.so.2"):
        pytest.skip("jemalloc is not installed (make jemalloc)")
    code = "from fwbench.measure.device import heap_allocator; print(heap_allocator())"
    env = {**os.environ, "LD_PRELOAD": "libjemalloc.so.2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["jemalloc"], out.stderr
    env.pop("LD_PRELOAD")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["glibc"], out.stderr


PAGES_RELEASED = """
import numpy as np, psutil
from fwbench.measure import device
rss = lambda: psutil.Process().memory_info().rss >> 20
ctl = device._mallctl()
print(device._decay_ms(ctl))
np.ones(256 << 17).sum()  # 256 MiB of float64, freed at once
kept = rss()
with device.pages_released():
    inside = device._decay_ms(ctl)
    np.ones(128 << 17).sum()
print(inside, device._decay_ms(ctl), kept - rss())
"""


def test_jemalloc_keeps_freed_pages_but_hands_them_back_after_a_compilation():
    if not preload_found("libjemalloc.so.2"):
        pytest.skip("jemalloc is not installed (make jemalloc)")
    env = {
        **os.environ,
        "LD_PRELOAD": "libjemalloc.so.2",
        "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
    }
    out = subprocess.run(
        [sys.executable, "-c", PAGES_RELEASED], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "(-1, -1)"
    freed = int(lines[1].rsplit(" ", 1)[1])
    assert lines[1].startswith(f"({device.COMPILE_DECAY_MS}, {device.COMPILE_DECAY_MS}) (-1, -1) ")
    # the 256 MiB kept since before the context went back to the kernel on leaving it
    assert freed >= 200, lines
    # under glibc there is nothing to switch, and the context is open all the same
    with device.pages_released():
        pass


def test_device_detection_always_offers_the_cpu():
    assert "cpu" in {d.kind for d in device.torch_devices()}
    assert "cpu" in {d.kind for d in device.jax_devices()}
    assert device.resolve_device("jax", "auto") in {"cpu", "cuda", "tpu"}
    with pytest.raises(RuntimeError, match="sees no"):
        device.resolve_device("torch", "tpu")


@cuda
def test_cuda_peak_memory_counts_an_allocation():
    with measure_peak_memory("torch", "cuda") as reading:
        x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        del x
    assert reading.bytes >= 256 * 2**20


@cuda
def test_nvml_energy_is_positive_under_load():
    x = torch.randn(4096, 4096, device="cuda")
    with measure_energy("cuda") as reading:
        for _ in range(50):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize()
    assert reading.joules is not None and reading.joules > 0, reading.reason


@cuda
def test_cuda_sync_waits_for_queued_work():
    # torch.cuda._sleep queues a kernel that spins for a number of GPU cycles: enqueueing it
    # returns at once, so only a sync that really waits can account for the spin
    import time

    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    try:
        cycles = int(0.2 * torch.cuda.clock_rate() * 1e6)  # MHz, through NVML
    except Exception:  # no NVML binding: about 0.2 s at 1.5 GHz
        cycles = 300_000_000
    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    enqueue = time.perf_counter() - t0
    device.torch_sync("cuda")
    total = time.perf_counter() - t0
    assert enqueue < 0.05 and total >= 0.1, (enqueue, total)


@pytest.mark.parametrize(
    ("kind", "backend"), [("cuda", "cuda"), ("mps", "mps")], ids=["cuda", "mps"]
)
def test_the_timed_region_waits_for_the_device_sync(monkeypatch, kind, backend):
    """On any machine: a device whose synchronize takes 50 ms (work still queued) must show in
    every latency sample, so removing the sync from ``torch_sync`` or from the timer fails."""
    import time

    from fwbench.measure.timing import StopRule, measure_latency

    waits = []

    def slow_synchronize():
        time.sleep(0.05)
        waits.append(1)

    monkeypatch.setattr(getattr(torch, backend), "synchronize", slow_synchronize)
    timing = measure_latency(
        lambda x: x,
        [0, 1],
        device.sync_for("torch", kind),
        StopRule(min_iters=3, min_seconds=0.0),
        warmup=1,
        max_warmup=1,
    )
    assert len(waits) == 1 + len(timing.samples)  # warm-up call + every measured call
    assert timing.samples.min() >= 0.05  # a sleep never returns early; stolen time only adds
