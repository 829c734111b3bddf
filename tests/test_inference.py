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


def _small_cnn():
    """Convolution, BatchNorm (which freezing folds), a depthwise convolution and a head."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.BatchNorm2d(8),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    for bn in (net[1], net[4]):  # running statistics of their own, so folding them shows
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


@pytest.mark.parametrize(
    "mode, dynamic, graphs",
    # batch sizes 2, 3, 4: one static graph each; one graph for all three when dynamic (dynamo's
    # automatic switch, which a side never uses, would give 2: static for 2, dynamic from 3 on)
    [("compile-freeze", False, 3), ("compile", True, 1)],
)
def test_compiled_modes_compute_eagers_function_in_float64_with_the_graphs_they_declare(
    mode, dynamic, graphs
):
    import copy

    import torch
    from torch._dynamo.utils import counters

    eager = _small_cnn().double()
    side = bench.TorchSide(copy.deepcopy(eager), "cpu", "fp32", mode, False, dynamic=dynamic)
    side.model.double()  # the graph is traced at the first call, so it is traced in float64
    assert side.ran()["dynamic_shapes"] is dynamic
    counters.clear()
    for bs in (2, 3, 4):
        x = torch.randn(
            bs, 3, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(bs)
        )
        # freezing's rewrite (BatchNorm folded into the convolution) proven in float64; its
        # weight prepacking hands the convolution to oneDNN, which takes no float64, so it is off
        # here: a kernel choice, the same one eager PyTorch makes on this CPU
        freeze = {"freezing": mode == "compile-freeze", "cpp.weight_prepack": False}
        with torch._inductor.config.patch(freeze):
            got = side(x)
        with torch.no_grad():
            want = eager(x)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), (bs, (got - want).abs().max())
    assert counters["stats"]["unique_graphs"] == graphs
    assert not bench.TorchSide(_small_cnn(), "cpu", "fp32", "eager", False, dynamic=True).dynamic
