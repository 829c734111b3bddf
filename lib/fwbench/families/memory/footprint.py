"""Peak memory and iteration time of one training step, measured the same way for every method.

"Measured peak" means, on every method alike:

- GPU: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` around one step;
- CPU: the bytes held by the step's inputs (parameters, buffers, optimizer state, the batch)
  plus the highest running total of the CPU allocator's own events during the step, read from
  ``torch.profiler`` with ``profile_memory=True``. The allocator sees every tensor, including
  kernel workspaces and the buffers torch.compile's generated code allocates outside the
  dispatcher, so eager, checkpointed, compiled and traced steps are all measured alike. It is not
  the process RSS, which also counts the allocator's cached pages and the framework itself.

Methods: ``none`` (eager), ``graph`` (the traced step unmodified), ``mu_two@<fraction>`` (the
traced step rewritten by the planner), ``checkpoint_every_<k>`` (``torch.utils.checkpoint``
around every run of k blocks), ``checkpoint_sqrt_n`` (Chen et al.'s segments of sqrt(n) of the n
blocks), ``compile_budget_<b>`` (torch.compile with the partitioner's activation memory budget
``b``) and ``compiled_mu_two@<fraction>`` (the rewritten step, compiled). Eager baselines use ``torch.optim.Adam(foreach=False)``, the same
per-tensor update the traced step runs.
"""

from __future__ import annotations

import contextlib
import functools
import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

from fwbench.families.memory import torch_internals
from fwbench.families.memory.cases import ModelCase
from fwbench.families.memory.profiler import storage_bytes
from fwbench.measure import device as fw_device
from fwbench.measure.meters.contention import ContentionMeter
from fwbench.measure.timing import StopRule, measure_latency


@dataclass
class Measurement:
    method: str
    peak_bytes: int
    iter_ms: list[float]
    summary: dict
    source: str


def _sync(device: str) -> Callable[[object], None]:
    if device == "cuda":
        return lambda _: torch.cuda.synchronize()
    return lambda _: None


def measure_peak(step: Callable[[], object], persistent: list[torch.Tensor], device: str) -> int:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    return storage_bytes(persistent) + torch_internals.cpu_allocation_trace(prof).peak()


def peak_source(device: str) -> str:
    if device == "cuda":
        return "torch.cuda.max_memory_allocated"
    return "inputs + CPU allocator peak (torch.profiler profile_memory)"


def measure(
    method: str,
    step: Callable[[], object],
    persistent: Callable[[], list[torch.Tensor]],
    device: str,
    rule: StopRule,
    warmup: int = 1,
) -> Measurement:
    """Warm up (compiles, allocates optimizer state), time ``step``, then measure one step's peak."""
    sync = _sync(device)
    timing = measure_latency(lambda _: step(), [None], sync, rule, warmup=warmup, max_warmup=warmup)
    peak = measure_peak(step, persistent(), device)
    samples_ms = [float(s) for s in timing.samples_ms()]
    return Measurement(method, peak, samples_ms, timing.summary_ms(), peak_source(device))


def measure_graph(method: str, traced, graph_module, device: str, rule: StopRule) -> Measurement:
    """A traced (and possibly rewritten) step, run by fx's generated code, not the interpreter."""
    return measure(
        method, lambda: traced.run(traced.inputs, graph_module), lambda: traced.inputs, device, rule
    )


class EagerStep:
    """One eager training step with ``torch.optim.Adam(foreach=False)``."""

    def __init__(self, case: ModelCase, module: torch.nn.Module | None = None, lr: float = 1e-3):
        self.case = case
        self.module = case.model if module is None else module
        self.optimizer = torch.optim.Adam(case.model.parameters(), lr=lr, foreach=False)

    def __call__(self):
        loss = self.case.loss_fn(self.module(self.case.batch), self.case.targets)
        loss.backward()
        self.optimizer.step()
        # Gradients are dropped at the end, not the start, of a step: memory that existed before
        # the profiler started could not be seen being released.
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def persistent(self) -> list[torch.Tensor]:
        model = self.case.model
        state = [
            t
            for s in self.optimizer.state.values()
            for t in s.values()
            if isinstance(t, torch.Tensor)
        ]
        return [*model.parameters(), *model.buffers(), *state, self.case.batch, self.case.targets]


def sqrt_n_segment(n_blocks: int) -> int:
    """Blocks per segment in Chen et al.'s sqrt(n) checkpointing: sqrt(n) segments of sqrt(n)."""
    return max(1, round(math.sqrt(n_blocks)))


@contextlib.contextmanager
def checkpoint_segments(blocks: list[torch.nn.Module], size: int):
    """Checkpoint every run of ``size`` consecutive blocks as one segment while the context is
    open (``torch.utils.checkpoint``, non-reentrant): only each segment's input is kept, and its
    inside is replayed in the backward pass.

    A segment's first block runs the whole segment, the others pass their input through. This
    needs each block to feed the next its output as first argument (a residual stage's
    bottlenecks, a transformer's layers); the blocks' other arguments (an attention mask) are the
    same for every block and are passed on.
    """
    if size < 1:
        raise ValueError(f"a checkpoint segment holds at least one block, not {size}")
    bound = [type(b).forward.__get__(b) for b in blocks]

    def segment(forwards):
        def run(x, *args, **kwargs):
            for forward in forwards:
                x = forward(x, *args, **kwargs)
            return x

        return run

    def passthrough(x, *args, **kwargs):
        return x

    for start in range(0, len(blocks), size):
        forwards = bound[start : start + size]
        blocks[start].forward = functools.partial(
            checkpoint, segment(forwards), use_reentrant=False
        )
        for block in blocks[start + 1 : start + size]:
            block.forward = passthrough
    try:
        yield
    finally:
        for block in blocks:
            del block.forward


def checkpoint_sizes(
    blocks: list[torch.nn.Module], checkpoint_every: list[int], sqrt_n: bool
) -> list[tuple[int, str]]:
    """The checkpointing baselines as (blocks per segment, method name): every k of
    ``checkpoint_every``, then Chen's sqrt(n) segments where ``sqrt_n``."""
    sizes = [(k, checkpoint_method(k)) for k in checkpoint_every]
    if sqrt_n:
        sizes.append((sqrt_n_segment(len(blocks)), checkpoint_method(None)))
    return sizes


def checkpoint_method(size: int | None) -> str:
    """``checkpoint_every_<k>`` for segments of k blocks, ``checkpoint_sqrt_n`` for Chen's."""
    return "checkpoint_sqrt_n" if size is None else f"checkpoint_every_{size}"


def compile_method(budget: float) -> str:
    return f"compile_budget_{budget:.1f}"


def rotated(items: list, rotation: int) -> list:
    """``items`` starting at position ``rotation`` (modulo their number), wrapping around: each
    trial measures the methods in another order."""
    if not items:
        return items
    k = rotation % len(items)
    return [*items[k:], *items[:k]]


def interleaved_rounds(
    steps: dict[str, Callable[[], object]],
    rounds: int,
    device: str,
    rotation: int = 0,
    faults: dict[str, list[int]] | None = None,
    contention: list[dict | None] | None = None,
) -> dict[str, list[float]]:
    """One step of every method per round, ``rounds`` rounds, each in another order; ms per
    round for each method. The methods must already be warm. ``faults``, when given, receives
    each step's minor page faults: the CPU allocator hands large buffers back to the system, so
    a step pays for touching fresh pages, and a plan that holds fewer bytes pays less.
    ``contention``, when given, receives each round's reading of the machine (``ContentionMeter``,
    None where it cannot tell): a burst of stolen time shorter than the trial is then seen in the
    round it fell on, where the trial's own reading averages it away.

    A slow stretch of the machine (the hypervisor's steal comes in bursts of seconds) falls on
    one round of every method instead of on all the steps of one, so ratios taken round by
    round cancel it, where the methods' own back-to-back timings do not."""
    if rounds < 1:
        raise ValueError(f"interleaved timing needs at least one round, not {rounds}")
    sync = _sync(device)
    names = list(steps)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        with ContentionMeter() as meter:
            for name in rotated(names, rotation + r):
                sync(None)
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                sync(steps[name]())
                out[name].append((time.perf_counter() - t0) * 1e3)
                if faults is not None:
                    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    faults.setdefault(name, []).append(int(after - before))
        if contention is not None:
            contention.append(meter.result.as_dict() if meter.result else None)
    return out


def measure_baselines(
    case: ModelCase,
    device: str,
    rule: StopRule,
    *,
    checkpoint_every: list[int] = (1,),
    sqrt_n: bool = False,
    compile_budgets: list[float] = (),
    compile_backend: str = "inductor",
    compile_locality: bool = True,
    rotation: int = 0,
) -> list[Measurement]:
    """The eager step (``none``), each checkpointing baseline and each compiled one, measured in
    that order started at position ``rotation`` (the order wraps around). ``compile_locality``:
    Inductor's ``reorder_for_locality`` pass on or off for the compiled ones."""
    sizes = checkpoint_sizes(case.blocks, checkpoint_every, sqrt_n)

    def plain():
        eager = EagerStep(case)
        return measure("none", eager, eager.persistent, device, rule)

    def checkpointed(size, method):
        with checkpoint_segments(case.blocks, size):
            eager = EagerStep(case)
            return measure(method, eager, eager.persistent, device, rule)

    def compiled_with(budget):
        torch.compiler.reset()
        with (
            torch_internals.activation_memory_budget(budget),
            torch_internals.inductor_locality(compile_locality),
        ):
            compiled = torch.compile(case.model, backend=compile_backend)
            eager = EagerStep(case, module=compiled)
            with fw_device.pages_released():
                eager()  # compiles: what the compiler frees leaves the process
            return measure(compile_method(budget), eager, eager.persistent, device, rule)

    methods = [
        plain,
        *(functools.partial(checkpointed, size, method) for size, method in sizes),
        *(functools.partial(compiled_with, budget) for budget in compile_budgets),
    ]
    results = [run() for run in rotated(methods, rotation)]
    torch.compiler.reset()
    return results
