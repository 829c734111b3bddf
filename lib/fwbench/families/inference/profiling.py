"""Where inference time goes: one profiled run per framework, ops grouped into categories.

torch: ``torch.profiler`` self time per aten op (device time on GPU, CPU time on CPU).
JAX: ``jax.profiler`` with a Perfetto trace, parsed for XLA op events (fusions, convolutions, dots,
GPU kernels); runtime bookkeeping (names with ``::``, Python frames ``$...``) is left out.
Traces are saved next to the executed notebook so anyone can open them in Perfetto or TensorBoard.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fwbench import vocab
from fwbench.results.records import INTERACTIVE

# First match wins, so the order matters: "addmm" is a matmul before it is an "add", and
# "convert" (a dtype cast, XLA's convert_element_type) is data movement, not a convolution.
CATEGORIES = {
    "attention": r"attention|softmax|sdpa|flash|fmha",
    "matmul/conv": r"conv(?!ert)|gemm|matmul|\bmm\b|addmm|bmm|dot|linear|cutlass|sm\d+_xmma|ynn_fusion",
    "normalisation": r"norm|batch_norm|layer_norm|rsqrt",
    "data movement": r"convert|expand|copy|transpose|permute|cat|concat|contiguous|pad|slice|gather|reshape|to_copy|memcpy|broadcast",
    "elementwise": r"relu|add|mul|gelu|silu|swish|sigmoid|hardswish|hardsigmoid|clamp|div|sub|tanh|exp|fusion|elementwise|mean|reduce|pool",
}
_RUNTIME_NAME = re.compile(
    r"::|^\$|^PjitFunction|^end: |^Thread|^Wait|^Handle|^Parse|Allocate|Execute"
)


def categorize(op_name: str) -> str:
    name = op_name.lower()
    for category, pattern in CATEGORIES.items():
        if re.search(pattern, name):
            return category
    return "other"


@dataclass
class Breakdown:
    top_ops: pd.DataFrame  # op, category, time_us, share
    shares: dict  # category -> share of profiled op time
    trace_path: str | None

    def chart(self):
        import altair as alt

        frame = pd.DataFrame([{"category": k, "share": v} for k, v in sorted(self.shares.items())])
        return (
            alt.Chart(frame)
            .mark_bar()
            .encode(
                x=alt.X("share:Q", axis=alt.Axis(format="%"), title="share of op time"),
                y=alt.Y("category:N", sort="-x", title=None),
                tooltip=["category", alt.Tooltip("share:Q", format=".1%")],
            )
            .properties(title="Time by operation category", width=360, height=160)
        )


def _breakdown(times: dict[str, float], trace_path: str | None) -> Breakdown:
    total = sum(times.values()) or 1.0
    frame = pd.DataFrame(
        [
            {"op": k, "category": categorize(k), "time_us": v, "share": v / total}
            for k, v in times.items()
        ]
    ).sort_values("time_us", ascending=False, ignore_index=True)
    shares = frame.groupby("category").share.sum().to_dict() if len(frame) else {}
    return Breakdown(frame, shares, trace_path)


def _trace_dir() -> Path:
    folder = os.environ.get(vocab.ENV_EXECUTED_DIR)
    return Path(folder) if folder else Path(tempfile.mkdtemp(prefix="fwbench-trace-"))


def _trace_name(framework: str) -> str:
    return f"{os.environ.get(vocab.ENV_CELL, INTERACTIVE)}.{framework}-trace"


def profile_torch(side, x, calls: int = 3) -> Breakdown:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if side.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            side.sync(side(x))
    path = _trace_dir() / f"{_trace_name('torch')}.json"
    prof.export_chrome_trace(str(path))
    use_device = side.device == "cuda"
    times = defaultdict(float)
    for evt in prof.key_averages():
        t = evt.self_device_time_total if use_device else evt.self_cpu_time_total
        if evt.key.startswith("aten::") or (use_device and t > 0 and "::" not in evt.key):
            times[evt.key] += float(t)
    del torch
    return _breakdown(dict(times), str(path))


def profile_jax(side, x, calls: int = 3) -> Breakdown:
    import jax

    folder = _trace_dir() / _trace_name("jax")
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        for _ in range(calls):
            side.sync(side(x))
    files = sorted(glob.glob(str(folder / "**" / "perfetto_trace.json.gz"), recursive=True))
    times = defaultdict(float)
    if files:
        with gzip.open(files[-1]) as fh:
            trace = json.load(fh)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        for e in events:
            if e.get("ph") == "X" and not _RUNTIME_NAME.search(e.get("name", "")):
                # XLA numbers each instance (conv.74); group instances of one op kind
                times[re.sub(r"\.\d+$", "", e["name"])] += float(e.get("dur", 0.0))
    return _breakdown(dict(times), str(folder))


def profile_side(side, framework: str, batch_size: int, image_size: int, seed: int) -> Breakdown:
    from fwbench.data import synthetic_batch

    x = side.inputs([synthetic_batch(batch_size, image_size, seed)[0]])[0]
    if framework == "jax":
        if x.shape not in side.compiled:
            side.compiled[x.shape] = side.jitted.lower(side.state, x).compile()
        return profile_jax(side, x)
    return profile_torch(side, x)
