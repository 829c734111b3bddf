"""From the ranks' results to the family's numbers: step time, communication overhead, weak
scaling, all-reduce bandwidth and the float64 loss parity.

- A step's time is the slowest rank's (each step is timed between barriers); the reported
  ``step_ms`` is the median over the timed steps.
- ``comm_overhead_frac`` = (synced step - compute-only step) / synced step: the share of a step
  spent communicating or waiting for it.
- ``scaling_efficiency`` (weak scaling: the batch per worker fixed) = throughput at N divided by
  N times the throughput at 1.
- The parts of a data-parallel step (``parts``): the compute-only step, the gradients'
  all-reduce timed alone (the slowest rank's median), and the rest: synced step minus both, the
  waiting, the barriers and whatever the framework adds around its collectives; negative where
  the all-reduce overlaps the backward pass (PyTorch's DDP does).
- Loss parity: the largest relative difference between two runs' per-step losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fwbench.families.distributed.job import Job, bus_bandwidth


@dataclass(frozen=True)
class _StepSummary:
    world_size: int
    global_batch: int
    step_s: float  # median over steps of the slowest rank's step
    step_samples_s: list[float]
    compute_only_step_s: float | None
    cpu_s_per_rank: float  # median CPU seconds per step, averaged over the ranks
    peak_rss_bytes: int  # the largest rank's
    state_bytes: int  # the largest rank's parameters, gradients and optimizer state
    losses: list[float]
    # the gradients' all-reduce timed alone (data parallelism only): seconds, arrays, bytes
    grad_allreduce_s: float | None = None
    grad_arrays: int | None = None
    grad_bytes: int | None = None

    @property
    def img_s(self) -> float:
        return self.global_batch / self.step_s

    @property
    def comm_overhead_frac(self) -> float | None:
        if self.compute_only_step_s is None:
            return None
        return max(self.step_s - self.compute_only_step_s, 0.0) / self.step_s

    def parts(self) -> dict[str, float] | None:
        """Seconds of the synced step in compute, the gradients' all-reduce and the rest, which
        add up to ``step_s``; None without a compute-only step or the all-reduce's timing."""
        if self.compute_only_step_s is None or self.grad_allreduce_s is None:
            return None
        rest = self.step_s - self.compute_only_step_s - self.grad_allreduce_s
        return {
            "compute": self.compute_only_step_s,
            "grad_allreduce": self.grad_allreduce_s,
            "rest": rest,
        }


def _slowest_rank(results: list[dict], key: str) -> list[float] | None:
    """Per step, the largest of the ranks' ``key`` samples; None when no rank has them."""
    series = [r[key] for r in results if r.get(key)]
    if not series:
        return None
    return np.max(np.asarray(series, dtype=float), axis=0).tolist()


def summarize(job: Job, results: list[dict]) -> _StepSummary:
    steps = _slowest_rank(results, "step_s")
    compute_only = _slowest_rank(results, "compute_only_step_s")
    return _StepSummary(
        world_size=job.world_size,
        global_batch=job.global_batch,
        step_s=float(np.median(steps)),
        step_samples_s=steps,
        compute_only_step_s=None if compute_only is None else float(np.median(compute_only)),
        cpu_s_per_rank=float(np.mean([np.median(r["cpu_s"]) for r in results])),
        peak_rss_bytes=int(max(r["peak_rss_bytes"] for r in results)),
        state_bytes=int(max(r["state_bytes"] for r in results)),
        losses=list(results[0]["losses"]),
        grad_allreduce_s=_slowest(results, "grad_allreduce_s"),
        grad_arrays=results[0].get("grad_arrays"),
        grad_bytes=results[0].get("grad_bytes"),
    )


def _slowest(results: list[dict], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return float(max(values)) if values else None


def scaling_efficiency(at_n: _StepSummary, at_1: _StepSummary) -> float:
    return at_n.img_s / (at_n.world_size * at_1.img_s)


def loss_parity_max_rel(losses: list[float], reference: list[float]) -> float:
    """max over steps of |loss - reference| / |reference|."""
    a, b = np.asarray(losses, float), np.asarray(reference, float)
    if a.shape != b.shape:
        raise ValueError(f"{len(a)} losses against {len(b)} reference losses")
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), np.finfo(float).tiny)))


def allreduce_table(results: list[dict], world_size: int) -> list[dict]:
    """One row per message size: the slowest rank's median time, algbw and busbw in GB/s."""
    rows = []
    for i, entry in enumerate(results[0]["allreduce"]):
        seconds = max(r["allreduce"][i]["seconds"] for r in results)
        algbw, busbw = bus_bandwidth(entry["bytes"], seconds, world_size)
        rows.append(
            {
                "message_bytes": entry["bytes"],
                "seconds": seconds,
                "algbw_gbs": algbw / 1e9,
                "busbw_gbs": busbw / 1e9,
            }
        )
    return rows


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """1 KB, 4 KB, ... up to ``max_bytes``: the sweep's message sizes."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ValueError("message sizes need 4 <= min_bytes <= max_bytes and a factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes
