"""The worker every launcher starts, one process per rank, for either framework:

    python -m fwbench.families.distributed.worker --job JOB.json --out DIR
        [--rank R --world-size N --coordinator HOST:PORT]

It finds its place from the flags, torchrun's variables or Slurm's (``job.place_from``), pins
itself to one core, runs the job's phase, and writes ``DIR/rank<R>.json``: each step's loss (the
global batch's), each timed step's wall and CPU seconds between barriers, the compute-only steps,
this rank's peak resident memory and the state it holds, the gradients' all-reduce alone (data
parallelism), or the all-reduce timings, and the host it ran on. A failure writes the error there instead and exits 1, so the launcher can say
which rank failed and why.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from fwbench.families.distributed.job import Job, pin_to_core, place_from

# the all-reduce sweep's stopping rule per message size: both a count and a duration
_ALLREDUCE_MIN_ITERS = 5
_ALLREDUCE_MIN_SECONDS = 0.2


def _make_worker(job: Job, place):
    if job.framework == "torch":
        from fwbench.families.distributed.torch_side import TorchWorker

        return TorchWorker(job, place)
    from fwbench.families.distributed.jax_side import JaxWorker

    return JaxWorker(job, place)


def _timed_steps(worker, first: int, count: int, fn) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``count`` calls of ``fn(step)``, each between two barriers, so a
    step's time is the slowest rank's."""
    wall, cpu = [], []
    for step in range(first, first + count):
        worker.barrier()
        start, cpu_start = time.perf_counter(), time.process_time()
        fn(step)
        worker.barrier()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return wall, cpu


def _run_train(job: Job, worker) -> dict:
    from fwbench.measure.meters.peak_memory import lifetime_max_rss_bytes

    losses = [worker.step(step) for step in range(job.warmup)]
    step_s, cpu_s = _timed_steps(
        worker, job.warmup, job.steps, lambda step: losses.append(worker.step(step))
    )
    result = {
        "losses": worker.mean_over_ranks(losses),
        "step_s": step_s,
        "cpu_s": cpu_s,
        "state_bytes": worker.state_bytes(),
    }
    if worker.has_compute_only:
        first = job.warmup + job.steps
        worker.compute_only_step(first)  # compiles the replica's step (JAX), outside the timing
        result["compute_only_step_s"], result["compute_only_cpu_s"] = _timed_steps(
            worker, first + 1, job.steps, worker.compute_only_step
        )
    if worker.has_compute_only and worker.has_grad_allreduce:
        op, result["grad_arrays"], result["grad_bytes"] = worker.grad_allreduce_op()
        result["grad_allreduce_s"] = collective_seconds(
            worker, op, _ALLREDUCE_MIN_ITERS, _ALLREDUCE_MIN_SECONDS
        )
    result["peak_rss_bytes"] = lifetime_max_rss_bytes()
    return result


def collective_seconds(worker, op, min_iters: int, min_seconds: float) -> float:
    """Median seconds of ``op()``, each call between barriers. Every rank must make the same
    number of calls, or one rank's next collective meets another's last and the job hangs or
    fails, so the duration rule reads the slowest rank's total, agreed by a collective."""
    samples: list[float] = []
    while len(samples) < min_iters or worker.max_over_ranks(sum(samples)) < min_seconds:
        worker.barrier()
        start = time.perf_counter()
        op()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def _run_allreduce(job: Job, worker) -> dict:
    return {
        "allreduce": [
            {
                "bytes": nbytes,
                "seconds": collective_seconds(
                    worker,
                    worker.allreduce_op(nbytes),
                    _ALLREDUCE_MIN_ITERS,
                    _ALLREDUCE_MIN_SECONDS,
                ),
            }
            for nbytes in job.allreduce_bytes
        ]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fwbench.families.distributed.worker",
        description="One rank of a distributed fwbench job (started by a launcher).",
    )
    parser.add_argument("--job", type=Path, required=True, help="the job's JSON file")
    parser.add_argument("--out", type=Path, required=True, help="folder for rank<R>.json")
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--coordinator", default=None, help="host:port of the rendezvous")
    args = parser.parse_args(argv)
    place = place_from(args.rank, args.world_size, args.coordinator)
    out = args.out / f"rank{place.rank}.json"
    record = {"rank": place.rank, "world_size": place.world_size, "host": socket.gethostname()}
    status = 0
    try:
        job = Job.load(args.job)
        if place.world_size != job.world_size:
            raise ValueError(
                f"the launcher started {place.world_size} processes for a world of {job.world_size}"
            )
        record["core"] = pin_to_core(place.rank)
        worker = _make_worker(job, place)
        try:
            record.update(
                _run_train(job, worker) if job.phase == "train" else _run_allreduce(job, worker)
            )
        finally:
            worker.close()
    except Exception as exc:  # reported by the launcher, with this rank's traceback
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc()[-4000:]
        status = 1
    out.write_text(json.dumps(record))
    return status


if __name__ == "__main__":
    sys.exit(main())
