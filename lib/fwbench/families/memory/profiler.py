"""Runtime profile of a traced training step, node by node (the μ-TWO graph profiler).

An ``fx.Interpreter`` runs the graph on real tensors and frees every value after its last use,
exactly like the compiled graph. After warm-up it records, per node and as the median over the
profiled iterations:

- run time: CUDA events on GPU, ``perf_counter`` on CPU (the CPU executes ops synchronously);
- memory: bytes allocated when the node starts (active) and the highest point while it runs
  (peak), so kernel workspaces the graph never names are seen too. On GPU these are the caching
  allocator's counters; on CPU there are no allocator counters, so one iteration runs under
  ``torch.profiler`` with every node in its own ``record_function`` range and the CPU allocator's
  events are read back per range;
- swap time per activation (GPU only): a copy to pinned host memory and back;
- the whole step's time run by fx's generated code, which the time model starts from: the
  per-node timer adds its own overhead to every node.

From the profile and the static analysis come the per-activation statistics of μ-TWO's
Table B, which the planner consumes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import fx
from torch.profiler import ProfilerActivity, profile, record_function

from fwbench.families.memory import torch_internals
from fwbench.families.memory.liveness import GraphAnalysis, recompute_closure

_NODE_LABEL = "fwbench_node:"


@dataclass
class Profile:
    device: str
    iters: int
    node_ms: dict[str, float]
    node_active_bytes: dict[str, int]  # allocated when the node starts, graph inputs included
    node_peak_bytes: dict[str, int]  # highest allocated while the node runs, graph inputs included
    persistent_bytes: int  # graph inputs: parameters, buffers, optimizer state, the batch
    swap_out_ms: dict[str, float] = field(default_factory=dict)
    swap_in_ms: dict[str, float] = field(default_factory=dict)
    note: str = ""
    step_ms: float = 0.0  # the whole step run by fx's generated code (median), no per-node timer

    @property
    def iteration_ms(self) -> float:
        return float(sum(self.node_ms.values()))

    @property
    def peak_bytes(self) -> int:
        return max(self.node_peak_bytes.values())


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views are counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class _NodeTimer(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, device: str):
        super().__init__(gm, garbage_collect_values=True)
        self.device = device
        self.times: dict[str, float] = {}
        self._events: list[tuple[str, object, object]] = []

    def run_node(self, n):
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = super().run_node(n)
            end.record()
            self._events.append((n.name, start, end))
            return out
        t0 = time.perf_counter()
        out = super().run_node(n)
        self.times[n.name] = (time.perf_counter() - t0) * 1e3
        return out

    def collect(self) -> dict[str, float]:
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.times = {name: s.elapsed_time(e) for name, s, e in self._events}
        return self.times


class _LabelledRun(fx.Interpreter):
    """Wraps every node in a profiler range, so allocator events can be attributed to nodes."""

    def run_node(self, n):
        with record_function(_NODE_LABEL + n.name):
            return super().run_node(n)


class _CudaMemoryRun(fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=True)
        self.active: dict[str, int] = {}
        self.peak: dict[str, int] = {}

    def run_node(self, n):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.active[n.name] = torch.cuda.memory_allocated()
        out = super().run_node(n)
        torch.cuda.synchronize()
        self.peak[n.name] = torch.cuda.max_memory_allocated()
        return out


class _SwapTimer(fx.Interpreter):
    """Copies each activation to pinned host memory and back the moment it is created."""

    def __init__(self, gm, activations: set[str]):
        super().__init__(gm, garbage_collect_values=True)
        self.activations = activations
        self.out_ms: dict[str, float] = {}
        self.in_ms: dict[str, float] = {}

    def run_node(self, n):
        out = super().run_node(n)
        if n.name in self.activations and isinstance(out, torch.Tensor):
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            events[0].record()
            host.copy_(out, non_blocking=True)
            events[1].record()
            back = torch.empty_like(out)
            back.copy_(host, non_blocking=True)
            events[2].record()
            torch.cuda.synchronize()
            self.out_ms[n.name] = events[0].elapsed_time(events[1])
            self.in_ms[n.name] = events[1].elapsed_time(events[2])
        return out


def profile_graph(
    gm: fx.GraphModule,
    inputs: list[torch.Tensor],
    analysis: GraphAnalysis,
    *,
    warmup: int = 1,
    iters: int = 3,
) -> Profile:
    """Profile ``gm`` on ``inputs`` (which it mutates: each run is a real training step)."""
    device = inputs[0].device.type
    persistent = storage_bytes(inputs)
    with torch.no_grad():
        for _ in range(warmup):
            _NodeTimer(gm, device).run(*inputs)
        per_iter = []
        for _ in range(max(iters, 1)):
            timer = _NodeTimer(gm, device)
            timer.run(*inputs)
            per_iter.append(timer.collect())
        node_ms = {name: float(np.median([t[name] for t in per_iter])) for name in per_iter[0]}
        # fx's generated code runs once untimed first, as every other timing here warms up (one
        # trial of ResNet-152 at batch 4 profiled a 9.9 s step that then measured 1.9 s; why
        # was not established, and a warm-up is the cheap half of the answer)
        _whole_step_ms(gm, inputs, device)
        step_ms = float(np.median([_whole_step_ms(gm, inputs, device) for _ in range(iters)]))
        if device == "cuda":
            active, peak = _cuda_memory(gm, inputs, iters)
            swap = _SwapTimer(gm, set(analysis.activations))
            swap.run(*inputs)
            swap_out, swap_in, note = swap.out_ms, swap.in_ms, ""
        else:
            active, peak = _cpu_memory(gm, inputs, persistent)
            swap_out, swap_in = {}, {}
            note = "swap not profiled: the CPU has no separate device memory to swap from"
    return Profile(
        device, iters, node_ms, active, peak, persistent, swap_out, swap_in, note, step_ms
    )


def _whole_step_ms(gm, inputs, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    gm(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _cuda_memory(gm, inputs, iters):
    runs = []
    for _ in range(max(iters, 1)):
        run = _CudaMemoryRun(gm)
        run.run(*inputs)
        runs.append(run)
    names = runs[0].active
    active = {n: int(np.median([r.active[n] for r in runs])) for n in names}
    peak = {n: int(np.median([r.peak[n] for r in runs])) for n in names}
    return active, peak


def _cpu_memory(gm, inputs, persistent):
    # Allocation is deterministic on CPU, so one profiled iteration gives the same numbers as the
    # median of several; the profiler would only slow the rest down.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _LabelledRun(gm, garbage_collect_values=True).run(*inputs)
    trace = torch_internals.cpu_allocation_trace(prof)
    ranges = torch_internals.labelled_ranges(prof, _NODE_LABEL)
    active, peak = {}, {}
    for name, spans in ranges.items():
        start, end = spans[0]
        active[name] = persistent + trace.total_before(start)
        peak[name] = persistent + trace.peak_between(start, end)
    return active, peak


@dataclass
class ActivationStats:
    """One row of μ-TWO's Table B; the planner updates the recomputation fields as it goes."""

    name: str
    memory_size: int
    inactive_time: float  # ms between the last forward use and the first backward use
    recomp_srcs: set[str]
    recomp_time: float  # ms to replay the recomputation once
    recomp_memory: int  # bytes of the temporaries the replay creates
    recomp_cnt: int = 1
    total_recomp_time: float = 0.0
    swap_time: float | None = None  # ms out + in, GPU only
    recomputable: bool = True
    from_random_op: bool = False

    @property
    def recompute_ratio(self) -> float:
        return self.memory_size / max(self.total_recomp_time, 1e-6)


def activation_stats(analysis: GraphAnalysis, prof: Profile) -> dict[str, ActivationStats]:
    ranks = [n.name for n in analysis.nodes]
    ms = np.array([prof.node_ms.get(name, 0.0) for name in ranks])
    retained = set(analysis.activations)
    table = {}
    for name, act in analysis.activations.items():
        closure = recompute_closure(analysis, name, retained)
        recomp_time = float(sum(prof.node_ms.get(n.name, 0.0) for n in closure.nodes))
        temporaries = {analysis.info[n.name].owner for n in closure.nodes} - {name, None}
        swap = None
        if name in prof.swap_out_ms:
            swap = prof.swap_out_ms[name] + prof.swap_in_ms[name]
        table[name] = ActivationStats(
            name=name,
            memory_size=act.nbytes,
            inactive_time=float(ms[act.last_forward_use + 1 : act.first_backward_use].sum()),
            recomp_srcs=set(closure.sources),
            recomp_time=recomp_time,
            recomp_memory=sum(analysis.storages[t].nbytes for t in temporaries),
            total_recomp_time=recomp_time,
            swap_time=swap,
            recomputable=act.recomputable,
            from_random_op=act.from_random_op,
        )
    return table
