"""Where inference time goes: a profiled run per configuration, ops in the categories of
``op_categories``, and the framework overhead around them.

torch: ``torch.profiler`` with shapes; each outermost aten op's interval, its category from its
name (and shapes); a container op (``CONTAINERS``) is opened into its aten children. On CUDA the categories are device time per aten op instead (self time).
JAX: ``jax.profiler`` with a Perfetto trace; each event named after an HLO instruction of the
compiled program (``fusion.12``), its category from the optimized HLO text. Runtime bookkeeping
events name no instruction and are left out. A fusion whose ops span several categories is
recorded under all of them joined ("convolution + normalisation", ``op_categories.FUSED_JOIN``),
so that the report can set it against the same ops on the other side; profiles recorded before
that name such a fusion by the category it goes to first alone, and the report reads them so.

Overhead is the wall time of the profiled calls minus the union of the op intervals (never their
sum: XLA runs ops on several threads at once). The profiler itself adds to the overhead of an eager
framework, which launches one recorded op per layer; the report says so.
Traces are saved next to the executed notebook so anyone can open them in Perfetto or TensorBoard.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fwbench import vocab
from fwbench.families.inference.op_categories import fused_parts, hlo_categories, torch_category
from fwbench.results.records import INTERACTIVE

_PROFILED_CALLS = 3
# aten ops that run a whole layer: PyTorch's fast path for nn.MultiheadAttention in inference runs
# the input and output projections (matmuls) and the attention core as one op. Opening it counts
# the projections as matmul/linear, as the JAX side's are, and only the core as attention.
CONTAINERS = {"aten::_native_multi_head_attention"}


def busy_time(intervals) -> float:
    """The length of the union of ``(start, end)`` intervals: time during which at least one op
    ran, however many ran at once."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


@dataclass
class OpProfile:
    """Per profiled call: time per op and per category (ms), the wall time and the busy time."""

    ops: pd.DataFrame  # op, category, time_ms, share (of the summed op time)
    category_ms: dict[str, float]
    wall_ms: float
    busy_ms: float  # the union of op intervals
    trace_path: str | None
    calls: int = _PROFILED_CALLS
    # whether a fusion's categories are all named (``op_categories.FUSED_JOIN``): true of every
    # XLA profile made since; worth recording, since a program that fused nothing across
    # categories looks the same in its rows as a profile made before
    fusions_recorded: bool = False

    @property
    def overhead_ms(self) -> float:
        return max(self.wall_ms - self.busy_ms, 0.0)

    def rows(self) -> list[tuple[str, float]]:
        """(category, ms) in the vocabulary's order, a fused category after the one it goes to
        first, the overhead last."""
        rank = {c: i for i, c in enumerate(vocab.OP_CATEGORIES)}

        def order(category: str):
            parts = fused_parts(category)
            return rank.get(parts[0], len(rank)), len(parts), category

        out = [(c, self.category_ms[c]) for c in sorted(self.category_ms, key=order)]
        return out + [(vocab.OVERHEAD, self.overhead_ms)]

    def chart(self):
        import altair as alt

        frame = pd.DataFrame(self.rows(), columns=["category", "ms"])
        return (
            alt.Chart(frame)
            .mark_bar()
            .encode(
                x=alt.X("ms:Q", title="ms per call"),
                y=alt.Y("category:N", sort=[c for c, _ in self.rows()], title=None),
                tooltip=["category", alt.Tooltip("ms:Q", format=".3f")],
            )
            .properties(title="Time by operation category", width=360, height=200)
        )


def _profile(
    times: dict[str, float],
    categories: dict[str, str],
    intervals: list,
    wall_s: float,
    calls: int,
    trace_path: str | None,
) -> OpProfile:
    """``times`` in µs summed over ``calls``, ``intervals`` in µs, ``wall_s`` in seconds."""
    per_call = {op: us / 1e3 / calls for op, us in times.items()}
    total = sum(per_call.values()) or 1.0
    ops = pd.DataFrame(
        [
            {"op": op, "category": categories[op], "time_ms": ms, "share": ms / total}
            for op, ms in per_call.items()
        ],
        columns=["op", "category", "time_ms", "share"],
    ).sort_values("time_ms", ascending=False, ignore_index=True)
    by_category = ops.groupby("category").time_ms.sum().to_dict() if len(ops) else {}
    return OpProfile(
        ops=ops,
        category_ms=by_category,
        wall_ms=wall_s * 1e3 / calls,
        busy_ms=busy_time(intervals) / 1e3 / calls,
        trace_path=trace_path,
        calls=calls,
    )


def _trace_dir() -> Path:
    folder = os.environ.get(vocab.ENV_EXECUTED_DIR)
    return Path(folder) if folder else Path(tempfile.mkdtemp(prefix="fwbench-trace-"))


def _trace_name(framework: str, batch_size: int | None = None) -> str:
    suffix = f".bs{batch_size}" if batch_size is not None else ""
    return f"{os.environ.get(vocab.ENV_CELL, INTERACTIVE)}.{framework}{suffix}-trace"


def _aten_ancestors(event) -> list[str]:
    names, parent = [], event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            names.append(parent.name)
        parent = parent.cpu_parent
    return names


def _categorised_events(events):
    """(event, counts its interval toward busy time, the µs its category gets, ran inside a
    container) for the ops whose
    time is categorised: the outermost aten ops, except that a container op (``CONTAINERS``) is
    opened: its aten children are categorised one by one, and only what runs outside them stays
    with the container."""
    for evt in events:
        if not evt.name.startswith("aten::"):
            continue
        ancestors = _aten_ancestors(evt)
        duration = float(evt.time_range.end - evt.time_range.start)
        if not ancestors and evt.name in CONTAINERS:
            inside = sum(
                float(c.time_range.end - c.time_range.start)
                for c in evt.cpu_children
                if c.name.startswith("aten::")
            )
            yield evt, True, max(duration - inside, 0.0), False
        elif not ancestors:
            yield evt, True, duration, False
        elif all(a in CONTAINERS for a in ancestors) and len(ancestors) == 1:
            yield evt, False, duration, True


def profile_torch(side, x, calls: int = _PROFILED_CALLS, batch_size: int | None = None):
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_gpu = side.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities, record_shapes=True) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            side.sync(side(x))
        wall = time.perf_counter() - start
    # gzipped: a raw trace is evidence nobody re-reads (the records hold the per-op times) and
    # compresses about 9:1
    path = _trace_dir() / f"{_trace_name('torch', batch_size)}.json.gz"
    prof.export_chrome_trace(str(path))
    times, categories, intervals = defaultdict(float), {}, []
    if on_gpu:
        # device time per aten op: the host-side intervals say nothing about the GPU's work
        for evt in prof.key_averages(group_by_input_shape=True):
            if evt.self_device_time_total > 0 and evt.key.startswith("aten::"):
                key = f"{evt.key} {evt.input_shapes}"
                times[key] += float(evt.self_device_time_total)
                categories[key] = torch_category(evt.key, evt.input_shapes)
        intervals = [(0.0, sum(times.values()))]
    else:
        for evt, busy, us, inside in _categorised_events(prof.events()):
            category = torch_category(evt.name, evt.input_shapes, in_attention=inside)
            key = f"{evt.name} [{category}]"
            times[key] += us
            categories[key] = category
            if busy:
                intervals.append((float(evt.time_range.start), float(evt.time_range.end)))
    del torch
    return _profile(dict(times), categories, intervals, wall, calls, str(path))


def _trace_events(folder: Path) -> list[dict]:
    """The complete events of the newest Perfetto trace under ``folder``."""
    files = sorted(glob.glob(str(folder / "**" / "perfetto_trace.json.gz"), recursive=True))
    if not files:
        return []
    with gzip.open(files[-1]) as fh:
        trace = json.load(fh)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X"]


def profile_jax(side, x, calls: int = _PROFILED_CALLS, batch_size: int | None = None):
    import jax

    categories = hlo_categories(side.compiled[x.shape].as_text())
    folder = _trace_dir() / _trace_name("jax", batch_size)
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        start = time.perf_counter()
        for _ in range(calls):
            side.sync(side(x))
        wall = time.perf_counter() - start
    times, intervals = defaultdict(float), []
    for e in _trace_events(folder):
        name = e.get("name", "")
        if name in categories:
            ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
            times[name] += dur
            intervals.append((ts, ts + dur))
    _compress_xplanes(folder)
    found = _profile(dict(times), categories, intervals, wall, calls, str(folder))
    found.fusions_recorded = True
    return found


def _compress_xplanes(folder: Path) -> None:
    """Gzip the XLA profiler's raw ``*.xplane.pb`` files under ``folder`` once read (about 5:1);
    ``gunzip`` one to open it in TensorBoard's profiler."""
    for raw in Path(folder).rglob("*.xplane.pb"):
        with open(raw, "rb") as fin, gzip.open(f"{raw}.gz", "wb") as fout:
            fout.writelines(fin)
        raw.unlink()


def profile_side(
    side, framework: str, batch_size: int, size: int, seed: int, inputs: str = "image"
) -> OpProfile:
    from fwbench.data import synthetic_input

    x = side.inputs([synthetic_input(inputs, batch_size, size, seed)])[0]
    if framework == "jax":
        if x.shape not in side.compiled:
            side.compiled[x.shape] = side.jitted.lower(side.state, x).compile()
        return profile_jax(side, x, batch_size=batch_size)
    return profile_torch(side, x, batch_size=batch_size)
