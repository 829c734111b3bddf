"""``threads``: a cell pinned to n cores, every thread of the process included, with PyTorch's pool
of that size and the records saying so."""

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, sys
from fwbench.measure.device import limit_threads
import torch
n = limit_threads(int(sys.argv[1]))
import jax.numpy as jnp
(jnp.ones((256, 256)) @ jnp.ones((256, 256))).block_until_ready()  # XLA starts its pool now
from fwbench.results.records import intra_op_threads
masks = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
print(json.dumps({"n": n, "masks": masks, "torch": torch.get_num_threads(),
                  "recorded": intra_op_threads()}))
"""


def probe(threads: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(threads)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_one_thread_pins_every_thread_of_the_process_to_one_core():
    got = probe(1)
    assert got["n"] == 1 and got["torch"] == 1 and got["recorded"] == 1
    # XLA's pool, started after the call, inherits the pinning like every other thread
    assert len(got["masks"]) > 3 and all(len(m) == 1 for m in got["masks"])
    assert len({tuple(m) for m in got["masks"]}) == 1


def test_zero_keeps_the_machine_and_too_many_is_refused():
    cores = len(os.sched_getaffinity(0))
    got = probe(0)
    assert got["n"] == cores and got["recorded"] == min(got["torch"], cores)
    assert any(len(m) == cores for m in got["masks"])
    from fwbench.measure.device import limit_threads

    with pytest.raises(ValueError, match="may use"):
        limit_threads(cores + 1)
