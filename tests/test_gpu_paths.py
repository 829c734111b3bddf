"""Paths a GPU node runs first, checked on a CPU with stand-ins: NVML failing at any call gives a
reading that says why (never a failed cell), and JAX's CPU stays reachable when its default
backend is a GPU."""

import sys
import types

import pytest

from fwbench.measure import device
from fwbench.measure.meters import energy
from fwbench.pipeline import environment


class NVMLError(Exception):
    pass


def fake_nvml(monkeypatch, fail=(), energy_reads=None):
    """A pynvml whose calls named in ``fail`` raise; ``energy_reads`` are the counter's values,
    one per read (a read past them raises)."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM = 0, 1
    counter = iter(energy_reads or [])

    def call(name, value):
        def read(*_args):
            if name in fail:
                raise NVMLError(f"{name}: Unknown Error")
            return value() if callable(value) else value

        return read

    def next_energy():
        try:
            return next(counter)
        except StopIteration:
            raise NVMLError("energy: GPU is lost") from None

    nvml.nvmlInit = call("init", None)
    nvml.nvmlDeviceGetHandleByIndex = call("handle", "h0")
    nvml.nvmlDeviceGetTotalEnergyConsumption = call("energy", next_energy)
    nvml.nvmlDeviceGetPowerUsage = call("power", 300_000)
    nvml.nvmlSystemGetDriverVersion = call("driver", "580.65")
    nvml.nvmlDeviceGetCount = call("count", 1)
    nvml.nvmlDeviceGetName = call("name", "Stand-in GPU")
    nvml.nvmlDeviceGetClockInfo = call("clock", 1980)
    nvml.nvmlDeviceGetMaxClockInfo = call("clock", 1980)
    nvml.nvmlDeviceGetPowerManagementLimit = call("power_limit", 700_000)
    nvml.nvmlDeviceGetMemoryInfo = call("memory", types.SimpleNamespace(total=80 * 2**30))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_power_sampling_that_fails_says_why_instead_of_failing_the_cell(monkeypatch):
    fake_nvml(monkeypatch, fail={"energy", "power"})
    with energy.measure_energy("cuda") as reading:
        pass
    assert reading.joules is None and reading.source == "unavailable"
    assert reading.reason.startswith("NVML power sampling failed: power: Unknown Error")


def test_an_energy_counter_lost_during_the_block_says_why(monkeypatch):
    fake_nvml(monkeypatch, energy_reads=[1000])  # read before the block, gone after it
    with energy.measure_energy("cuda") as reading:
        pass
    assert reading.joules is None
    assert "unreadable after the block" in reading.reason and "GPU is lost" in reading.reason


def test_a_working_counter_still_measures(monkeypatch):
    fake_nvml(monkeypatch, energy_reads=[1000, 4500])
    with energy.measure_energy("cuda") as reading:
        pass
    assert reading.joules == pytest.approx(3.5) and reading.source == "nvml total energy counter"


def test_the_machine_capture_survives_nvml_failing_at_the_driver_or_the_count(monkeypatch):
    fake_nvml(monkeypatch, fail={"driver"})
    (gpu,) = environment.gpu_info()
    assert gpu["driver"] is None and gpu["name"] == "Stand-in GPU"
    fake_nvml(monkeypatch, fail={"count"})
    (gpu,) = environment.gpu_info()
    assert gpu["unavailable"].startswith("NVML device count") and gpu["driver"] == "580.65"
    fake_nvml(monkeypatch, fail={"handle"})
    (gpu,) = environment.gpu_info()
    assert gpu["index"] == 0 and "unavailable" in gpu


def test_jax_on_a_gpu_node_still_offers_its_cpu(monkeypatch):
    jax = pytest.importorskip("jax")
    gpu = types.SimpleNamespace(platform="gpu", id=0, device_kind="Stand-in GPU")
    cpu = types.SimpleNamespace(platform="cpu", id=0, device_kind="cpu")

    def devices(backend=None):
        return [cpu] if backend == "cpu" else [gpu]

    monkeypatch.setattr(jax, "devices", devices)
    kinds = [d.kind for d in device.jax_devices()]
    assert kinds == ["cuda", "cpu"]
    assert device.resolve_device("jax", "cpu") == "cpu"
    assert device.device_name("jax", "cpu") == device.cpu_device_name()
