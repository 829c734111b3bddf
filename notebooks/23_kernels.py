# %% [markdown]
# # 23 · Kernels: what one kernel costs on this device, in each framework
#
# **Purpose.** A model is the kernels its framework launches: PyTorch eager's aten ops, or the
# fusions and library calls XLA compiled the Flax twin to (`fwbench.families.prediction.kernels`).
# This notebook times single kernels alone on this CPU (`kernel_bench`): dense and depthwise
# convolutions over the output sizes and widths of CNN stages, matmuls from a classifier head to
# a ViT's MLP and attention, and memory-bound kernels (elementwise chains) from 4 KiB to 256 MiB,
# plus the kernels of `models` themselves at `batch_sizes`. A JAX kernel's time has the cost of
# an empty call taken off (a jitted model pays it once); a PyTorch op keeps it (eager pays it per
# op). The table is what
# `kernel_prices` prices any model's kernels from: a measured shape at its measurement, another
# from its nearest measured neighbours of the same kind. How well that works on a shape the
# sweep did not measure is checked here, each kernel priced with its own measurement left out.
# Records: family `prediction`, metric `kernel_s` (kind and shape in `extra`) and
# `empty_call_s`.
#
# **Run it:** `fwbench run params/kernels_cpu.yaml` (PyTorch eager and JAX jit, this CPU).
#
# **Runtime:** about a second per kernel (JAX compiles each one), some 300 kernels per framework
# with the default grid; a few seconds with `max_kernels` small.

# %% tags=["parameters"]
framework = "torch"  # one of: torch, jax
threads = 0  # cores (and intra-op threads) to run on, as in 10_inference; 0: all the machine gives
batch_sizes = [1, 8]  # the grid's batch sizes, and the models' below
models = []  # registry models whose own kernels join the grid (their shapes measured exactly)
image_size = 0  # 0: each model's native size
min_iters = 5
min_seconds = 0.2
max_kernels = 0  # 0: every kernel; a small number for a quick look
seed = 0

# %%
import altair as alt
import pandas as pd
from tqdm import tqdm

from fwbench.families.prediction import kernel_bench, kernel_prices, kernels
from fwbench.measure import device as fw_device
from fwbench.measure import precision as fw_precision
from fwbench.measure.timing import StopRule
from fwbench.results.records import Recorder

# first: XLA sizes its thread pool from the cores the process may use when its backend starts
threads = fw_device.limit_threads(threads)
fw_precision.configure(framework, "fp32")
name = fw_device.device_name(framework, "cpu")
todo = kernel_bench.grid(framework, tuple(batch_sizes))
for model in tqdm(models, desc="models' kernels"):
    for batch in batch_sizes:
        todo += kernels.model_kernels(model, framework, batch, image_size or None)
# one measurement per shape; a model's kernel keeps no name here, the table is by shape
todo = list(dict.fromkeys(kernels.Kernel(k.kind, k.shape) for k in todo))
todo = todo[:max_kernels] if max_kernels else todo
print(f"{framework} on {name}, {threads} threads: {len(todo)} kernels")

# %%
rule = StopRule(min_iters, min_seconds)
empty_s = kernel_bench.empty_call_seconds(framework, rule, seed)
rows = []
for kernel in tqdm(todo, desc=f"{framework} kernels"):
    seconds = kernel_bench.measure_kernel(
        framework, kernel, rule, seed, empty_s=kernel_bench.call_cost(framework, empty_s)
    )
    rows.append({"framework": framework, "kind": kernel.kind, "shape": kernel.shape,
                 "seconds": seconds, "reference_s": kernel_prices.reference_seconds(kernel),
                 "flops": kernel.flops, "bytes": kernel.bytes})  # fmt: skip
table = pd.DataFrame(rows)
print(f"an empty call: {empty_s * 1e6:.1f} µs")
table.groupby("kind").seconds.describe()

# %% [markdown]
# ## Time against work, per kind
# Each point is one kernel: its measured time against its reference time (FLOPs and bytes at
# nominal rates). Kernels of one kind that line up are easy to price from their neighbours; a
# kind spread over decades (XLA:CPU's convolutions with small outputs) is why the price is looked
# up by shape, not by FLOPs alone.

# %%
alt.Chart(table.assign(shape=table["shape"].map(str))).mark_point().encode(
    x=alt.X("reference_s:Q", scale=alt.Scale(type="log"), title="reference time (s)"),
    y=alt.Y("seconds:Q", scale=alt.Scale(type="log"), title="measured (s)"),
    color="kind:N",
    tooltip=["kind", "shape", "seconds", "flops", "bytes"],
).properties(title=f"{framework} kernels on {name}", width=460, height=300)

# %% [markdown]
# ## A shape the sweep did not measure
# Each kernel priced from the others of its kind, its own measurement left out: the signed error
# of that price, per kind. This is the price's error on a new shape inside the grid, not on a new
# model (the frozen test of the prediction family scores that).

# %%
held_out = kernel_prices.leave_one_out(table)
errors = (
    held_out.assign(abs_pct=held_out.error_pct.abs())
    .groupby("kind")
    .agg(
        kernels=("abs_pct", "size"),
        median_abs_pct=("abs_pct", "median"),
        within_20pct=("abs_pct", lambda e: 100.0 * (e <= 20).mean()),
    )  # fmt: skip
    .reset_index()
    if len(held_out)
    else pd.DataFrame(columns=["kind", "kernels", "median_abs_pct", "within_20pct"])
)
errors

# %%
rec = Recorder("prediction", framework=framework, mode="jit" if framework == "jax" else "eager",
               device="cpu", device_name=name, precision="fp32")  # fmt: skip
rec.add("empty_call_s", empty_s, "s")
for row in table.itertuples():
    rec.add("kernel_s", row.seconds, "s",
            extra={"kind": row.kind, "shape": list(row.shape), "flops": row.flops,
                   "bytes": row.bytes})  # fmt: skip
for row in errors.itertuples():
    rec.add("kernel_loo_median_error_pct", row.median_abs_pct, "%", n=int(row.kernels),
            extra={"kind": row.kind, "within_20pct": row.within_20pct})  # fmt: skip
rec.emit()
