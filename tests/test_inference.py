"""The inference family: timer agreement and the OOM path.

The inference and calibration notebooks run through the runner, with the report and its MFU, in
tests/test_campaign_report.py.
"""

import pytest

from fwbench import vocab
from fwbench.families.calibration.timer_check import TimerAgreement, compare_with_torch_benchmark
from fwbench.families.inference import bench
from fwbench.measure.meters.contention import Contention
from fwbench.measure.timing import StopRule


def test_our_median_agrees_with_torch_utils_benchmark_on_a_call_of_known_length():
    """DESIGN.md's timer vs torch's own blocked_autorange, within 5%, on a call that spins until
    50 ms of wall-clock time have passed. Stolen CPU time moves a ResNet-50 forward on this host by
    more than the bound, and even a sleep wakes up late (02_calibrate runs the ResNet-50 comparison
    with its contention reading); a wall-clock spin keeps its length, so a timer that counted
    warm-up, lost a unit or timed the wrong span fails here every time."""
    import time

    def call(_x):
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass

    result = compare_with_torch_benchmark(
        call, None, lambda _o: None, rounds=4, calls_per_round=5, round_seconds=0.1
    )
    assert result.ours_n == 20 and result.theirs_n >= 4
    assert 0.05 <= result.ours_s < 0.055 and 0.05 <= result.theirs_s < 0.055
    assert result.agrees, result.verdict()


def test_the_timer_verdict_says_when_the_machine_was_shared():
    quiet = Contention(other_cpu_frac=0.01, steal_frac=0.0, cpus=2)
    shared = Contention(other_cpu_frac=0.0, steal_frac=0.3, cpus=2)
    off = TimerAgreement(0.110, 0.100, 9, 9, quiet)
    assert not off.agrees and off.quiet and "disagree" in off.verdict()
    assert "says nothing" not in off.verdict()
    noisy = TimerAgreement(0.100, 0.101, 9, 9, shared)
    assert noisy.agrees and not noisy.quiet and "says nothing" in noisy.verdict()
    assert noisy.as_dict()["contention"]["shared"] is True
    unread = TimerAgreement(0.100, 0.100, 9, 9, None)
    assert not unread.quiet and "could not be read" in unread.verdict()
    assert unread.as_dict()["contention"] is None
    with pytest.raises(ValueError):
        compare_with_torch_benchmark(lambda _x: None, None, lambda _o: None, rounds=0)


def test_a_batch_that_cannot_fit_is_recorded_as_oom_and_the_loop_goes_on():
    import torch
    import torchvision

    model = torchvision.models.mobilenet_v3_small().eval()
    side = bench.TorchSide(model, "cpu", "fp32", "eager", channels_last=False)
    rule = StopRule(2, 0.0)
    # 10^7 images of 32x32: ~120 GB of input on a machine with far less memory
    huge = bench.run_batch_size(side, 10**7, 32, rule, warmup=1, block_size=1, seed=0)
    small = bench.run_batch_size(side, 2, 32, rule, warmup=1, block_size=1, seed=0)
    assert huge.status == "oom" and ("Memory" in huge.error or "alloc" in huge.error)
    assert small.status == "ok" and small.throughput["p50"] > 0
    del torch


def test_non_memory_errors_are_not_mistaken_for_oom():
    assert bench.is_oom(MemoryError())
    assert bench.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert bench.is_oom(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert not bench.is_oom(RuntimeError("shape mismatch"))
    with pytest.raises(ValueError, match="not a jax mode"):
        vocab.resolve_mode("jax", "compile")
    assert vocab.resolve_mode("jax", "default") == "jit"
    assert vocab.resolve_mode("torch", "default") == "eager"
