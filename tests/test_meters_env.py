import numpy as np
import pytest

from fwbench import device, environment
from fwbench.meters import measure_energy, measure_peak_memory

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
    import time

    x = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        y = x @ x
    enqueue = time.perf_counter() - t0
    device.torch_sync("cuda")
    total = time.perf_counter() - t0
    assert total > enqueue and y.shape == x.shape
