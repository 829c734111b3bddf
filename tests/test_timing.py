import numpy as np
import pytest

import fwbench.measure.timing
from fwbench.measure.timing import (
    StopRule,
    first_call_overhead,
    measure_latency,
    measure_throughput,
)


class FakeClock:
    """Stands in for the ``time`` module inside fwbench.measure.timing.

    These tests check the timers' logic (what span they time, when they stop, when warm-up ends).
    On a host whose hypervisor steals CPU time a 4 ms sleep has read 7 ms and a 5 ms one failed to
    settle, so real sleeps tested the host. Here a call takes exactly what it says, and every clock
    read advances 1 us so that a loop over empty calls still ends. The timer against a real clock
    and torch's own Timer: tests/test_inference.py.
    """

    def __init__(self):
        self.now = 0.0
        self.idle = 0.0  # wall time the process spent waiting, not on a CPU

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now

    def process_time(self) -> float:
        return self.now - self.idle


CLOCK = FakeClock()


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch):
    CLOCK.now = CLOCK.idle = 0.0
    monkeypatch.setattr(fwbench.measure.timing, "time", CLOCK)


def busy_wait(seconds: float):
    CLOCK.now += seconds


def no_sync(_):
    pass


def test_latency_recovers_a_known_duration():
    timing = measure_latency(
        lambda _x: busy_wait(0.004), [0], no_sync, StopRule(min_iters=30, min_seconds=0.1)
    )
    assert 0.004 <= timing.summary["p50"] <= 0.004 * 1.15
    assert len(timing.samples) >= 30


def test_stop_rule_needs_both_iterations_and_seconds():
    fast = measure_latency(lambda _x: None, [0], no_sync, StopRule(min_iters=5, min_seconds=0.2))
    assert fast.samples.sum() < 0.2 and len(fast.samples) > 5  # seconds kept it going
    slow = measure_latency(
        lambda _x: busy_wait(0.01), [0], no_sync, StopRule(min_iters=25, min_seconds=0.01)
    )
    assert len(slow.samples) == 25  # iterations kept it going


def test_warmup_continues_until_times_settle():
    calls = {"n": 0}

    def first_calls_slow(_x):
        calls["n"] += 1
        busy_wait(0.02 if calls["n"] <= 3 else 0.001)  # a compile and two autotuning calls

    timing = measure_latency(first_calls_slow, [0], no_sync, StopRule(5, 0.0), warmup=2)
    # the three slow calls were all spent in warm-up, so none can be among the measured ones
    assert timing.warmup_iters > 3
    assert calls["n"] == timing.warmup_iters + len(timing.samples)
    assert timing.summary["p50"] < 0.005


def test_inputs_rotate_across_the_warmup_seam():
    # every warm-up length mod 3 (max_warmup pins it), so the seam falls after each input
    for warmup in range(1, 5):
        seen = []
        timing = measure_latency(
            seen.append,
            ["a", "b", "c"],
            no_sync,
            StopRule(9, 0.0),
            warmup=warmup,
            max_warmup=warmup,
        )
        assert timing.warmup_iters == warmup
        assert set(seen) == {"a", "b", "c"}
        assert all(x != y for x, y in zip(seen, seen[1:], strict=False)), (warmup, seen)

        seen = []
        measure_throughput(
            seen.append,
            ["a", "b", "c"],
            no_sync,
            StopRule(9, 0.0),
            block_size=2,
            warmup=warmup,
            max_warmup=warmup,
        )
        assert all(x != y for x, y in zip(seen, seen[1:], strict=False)), (warmup, seen)


def test_throughput_syncs_once_per_block():
    syncs = []
    timing = measure_throughput(
        lambda _x: busy_wait(0.005), [0], syncs.append, StopRule(40, 0.0), block_size=10, warmup=1
    )
    per_call = timing.samples / 10
    assert 0.005 <= np.median(per_call) <= 0.005 * 1.3
    measured_blocks = len(timing.samples)
    assert len(syncs) - timing.warmup_iters == measured_blocks  # one sync per block, not per call


def test_warmup_gives_up_on_a_machine_that_never_settles_and_says_so(monkeypatch):
    timing = fwbench.measure.timing
    monkeypatch.setattr(timing, "MAX_WARMUP_SECONDS", 0.2)
    calls = {"n": 0}

    def alternating(_x):  # every other call 30x slower: the windows never agree
        calls["n"] += 1
        busy_wait(0.001 if calls["n"] % 2 else 0.03)

    t = timing.measure_latency(
        alternating, [0], no_sync, StopRule(4, 0.0), warmup=1, max_warmup=1000
    )
    assert t.warmup_stable is False and t.warmup_seconds < 1.0
    settled = timing.measure_latency(
        lambda _x: busy_wait(0.005), [0], no_sync, StopRule(4, 0.0), warmup=1
    )
    assert settled.warmup_stable is True


def test_first_call_overhead_is_the_excess_of_the_first_call():
    calls = {"n": 0}

    def lazily_compiled():
        calls["n"] += 1
        busy_wait(0.05 if calls["n"] == 1 else 0.002)

    overhead = first_call_overhead(lazily_compiled, no_sync)
    assert calls["n"] == 4  # the first call and three steady ones
    assert 0.04 < overhead < 0.08


def test_summary_in_milliseconds_converts_times_and_only_times():
    timing = measure_latency(lambda _x: busy_wait(0.003), [0], no_sync, StopRule(10, 0.0))
    ms = timing.summary_ms()
    assert ms["p50"] == timing.summary["p50"] * 1e3
    assert ms["median_ci_high"] == timing.summary["median_ci_high"] * 1e3
    assert ms["n"] == timing.summary["n"] and ms["noisy"] == timing.summary["noisy"]
    assert np.array_equal(timing.samples_ms(), timing.samples * 1e3)


def test_each_block_says_how_much_of_its_wall_time_the_process_was_on_a_cpu():
    def half_waiting(_x):
        busy_wait(0.002)
        CLOCK.now += 0.002  # as long again waiting: a sleep, or a core taken away
        CLOCK.idle += 0.002

    timing = measure_throughput(
        half_waiting, [0], no_sync, StopRule(min_iters=20, min_seconds=0.05), block_size=2
    )
    assert len(timing.cpu_per_wall) == len(timing.samples)
    assert np.allclose(timing.cpu_per_wall, 0.5, atol=0.01)
    busy = measure_latency(lambda _x: busy_wait(0.003), [0], no_sync, StopRule(10, 0.02))
    assert np.allclose(busy.cpu_per_wall, 1.0, atol=0.01)
