# %% [markdown]
# # Stand-in notebook for the runner's tests
# Purpose: a tiny notebook whose behaviour the tests choose (succeed, raise, abort the kernel, sleep,
# or abort or sleep unless an environment variable is set), so the runner's failure handling can be checked
# without heavy work. Run by `pytest tests/test_runner.py`; takes about a second per cell.

# %% tags=["parameters"]
x = 1
behaviour = "ok"  # one of: ok, raise, abort, sleep, abort_unless_env, sleep_unless_env, time
seconds = 0.0
label = "a"
nodes = 1  # how many Slurm nodes the cell's job asks for (fwbench run --executor slurm)

# %%
import os
import socket
import time

from fwbench.results.records import Recorder

if behaviour == "raise":
    raise RuntimeError(f"stand-in asked to fail with x={x}")
if behaviour == "abort" or (behaviour == "abort_unless_env" and not os.environ.get("STANDIN_OK")):
    os.abort()
if behaviour == "sleep" or (behaviour == "sleep_unless_env" and not os.environ.get("STANDIN_OK")):
    time.sleep(seconds)
calls = []  # (start, end) of each timed call, on the wall clock, for a relay's tests
if behaviour == "time":
    from fwbench.measure import relay
    from fwbench.measure.timing import StopRule, measure_latency

    def busy(_):
        start = time.time()
        while time.time() - start < 0.005:
            pass
        calls.append((start, time.time()))

    measure_latency(busy, [None], lambda _: None, StopRule(min_iters=5, min_seconds=seconds))

# %%
rec = Recorder("setup", model=None, framework="none", device="cpu", batch_size=max(1, int(x)))
rec.add(
    "double_x",
    2 * x,
    "1",
    extra={
        "label": label,
        "host": socket.gethostname(),
        "retry_env": os.environ.get("STANDIN_OK"),
        # what a duet cell must see: one core, one thread
        "affinity": sorted(os.sched_getaffinity(0)),
        "omp_threads": os.environ.get("OMP_NUM_THREADS"),
        "calls": calls,
        "relay": relay.reading() if behaviour == "time" else None,
    },
)
rec.emit()
