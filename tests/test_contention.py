"""The contention meter tells our own CPU work from other processes' work."""

import subprocess
import sys
import time

import psutil
import pytest

from fwbench.measure.meters.contention import (
    SHARED_FRACTION,
    Contention,
    ContentionMeter,
    is_shared,
)

SPIN = "import time\nend = time.perf_counter() + {seconds}\nwhile time.perf_counter() < end: pass"


def spinner(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)])


# it reads the whole machine: beside another test it would count that test's work as other
@pytest.mark.alone
def test_a_child_we_wait_for_is_our_own_work():
    with ContentionMeter() as meter:
        spinner(1.5).wait()
    got = meter.result
    # a host's own background may add a few percent; a core's worth (50% of two) would be ours
    assert got.other_cpu_frac < 0.2, got
    assert 0.0 <= got.steal_frac <= 1.0 and got.cpus >= 1


def test_processes_that_are_not_ours_are_counted_and_mark_the_machine_shared():
    # half the cores kept busy by processes started before the meter and still running after it
    busy = max(1, (psutil.cpu_count() or 2) // 2)
    neighbours = [spinner(30) for _ in range(busy)]
    try:
        time.sleep(0.3)
        with ContentionMeter() as meter:
            time.sleep(1.5)
    finally:
        for n in neighbours:
            n.kill()
            n.wait()
    got = meter.result
    # their share, less a margin for what the hypervisor stole from those cores (counted too)
    assert got.other_cpu_frac + got.steal_frac > 0.8 * busy / got.cpus, got
    assert got.shared and got.as_dict()["shared"] is True


def test_the_threshold_adds_other_processes_and_stolen_time():
    half = SHARED_FRACTION / 2
    assert not is_shared(half, half * 0.9)
    assert is_shared(half, half * 1.1)
    assert not is_shared(None, None)  # no reading is not a verdict
    assert Contention(0.0, SHARED_FRACTION * 1.5, 2).shared
