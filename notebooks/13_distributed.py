# %% [markdown]
# # 13 · Distributed training: strategies, communication and weak scaling, proven in float64
#
# **Purpose.** For one framework and one strategy (PyTorch `ddp`, `fsdp` (FSDP2 `fully_shard`),
# `tp` (DTensor `parallelize_module`, ViT only); JAX `dp`, `dp_fused`, `fsdp`, `tp`), train the
# same model on 1..N worker processes and measure:
#
# - **step time** (each step between two barriers, so the slowest rank's), images/s and CPU time
#   per rank;
# - a **compute-only step** (DDP's `no_sync`, or each rank's share on an unsharded replica with no
#   collective), so that **communication overhead** = (synced − compute-only) / synced;
# - for data parallelism (PyTorch `ddp`, JAX `dp` and `dp_fused`), the **gradients' all-reduce
#   timed alone**, so that a synced step parts into compute, that all-reduce and the rest
#   (waiting, barriers, what the framework adds; negative where DDP overlaps the all-reduce with
#   the backward pass). `dp_fused` is JAX `dp` with one all-reduce of the flattened gradients
#   instead of one per array;
# - **weak-scaling efficiency** = throughput at N ÷ (N × throughput at 1), the batch per worker
#   fixed;
# - **peak memory per rank** (resident set) and the **state each rank holds** (parameters,
#   gradients, optimizer state: where FSDP and TP show their saving);
# - an **all-reduce sweep** (1 KB to `allreduce_max_bytes`): algorithm and bus bandwidth as
#   nccl-tests define them (busbw = algbw · 2(n−1)/n).
#
# **Correctness first**: in float64 the strategy at the largest world size, the one-process
# reference of this framework and the one-process reference of the other framework train
# `parity_steps` steps from the same weights on the same batches; every step's loss must agree
# to 1e-9 relative (`dist_fp64_loss_parity_max_rel`, `dist_fp64_cross_framework_max_rel`).
# Every strategy computes the "ghost batch" function: each worker's shard is normalised by its
# own BatchNorm statistics (what DDP does; the reference runs the shards one by one; JAX runs
# them shard by shard in `shard_map`), see `fwbench.families.distributed.job`.
#
# **Run it:** `fwbench run params/distributed.yaml` (both frameworks, every strategy, world sizes
# 1 and 2), or on a Slurm cluster `fwbench run params/distributed.yaml --executor slurm` with
# `launcher: srun`; `nodes: 2` there puts one rank on each of two nodes
# (`params/distributed_nodes.yaml`).
#
# **Runtime:** the defaults (MobileNetV3-S at 96 px, 4 images per worker, 10 steps, world sizes
# 1 and 2) take 1 to 3 minutes on a 2-core CPU, most of it starting processes and JAX compiling
# each world size's step; the ViT (`tp`) about 5 minutes.

# %% tags=["parameters"]
framework = "torch"  # one of: torch, jax
strategy = "ddp"  # one of: ddp, fsdp, tp, dp, dp_fused
model = "mobilenet_v3_small"
world_sizes = [1, 2]
image_size = 96
batch_per_worker = 4
steps = 10
warmup = 2
precision = "fp32"  # one of: fp32, fp64
launcher = "local"  # one of: local, srun
nodes = 1  # above 1: the ranks spread over that many nodes of the Slurm allocation (srun)
check_parity = True
parity_steps = 10
allreduce = True
allreduce_max_bytes = 67108864
lr = 0.01
seed = 0

# %% [markdown]
# `strategy` must be one of the framework's (`vocab.DISTRIBUTED_STRATEGIES`); `tp` only splits
# Linear layers, so it takes `vit_b_16` (at `image_size` 32, four patches). CNNs train at 96 px or
# more: smaller inputs leave 1x1 maps that training-mode BatchNorm makes chaotic, where no two
# implementations can agree. `launcher = "srun"` starts the workers as one `srun --overlap` step
# inside the cell's Slurm allocation (`fwbench run --executor slurm`); with `nodes` above 1 the
# cell's job asks for that many nodes and the ranks fill them in blocks (one per node at world
# size 2 on 2 nodes), meeting at a rendezvous on the first node's address, over the network.

# %%
import os
import tempfile
from pathlib import Path

import altair as alt
import pandas as pd

from fwbench import vocab
from fwbench.families.distributed import scaling
from fwbench.families.distributed.job import Job
from fwbench.families.distributed.launch import launch
from fwbench.measure import device as fw_device
from fwbench.report import charts
from fwbench.results.records import Recorder

charts.use_theme()
world_sizes = sorted({int(n) for n in world_sizes})
largest = world_sizes[-1]
base = dict(
    framework=framework,
    model=model,
    image_size=image_size,
    batch_per_worker=batch_per_worker,
    lr=lr,
    seed=seed,
)
for n in world_sizes:  # bad input stops here, before any process starts
    Job(
        strategy=strategy, world_size=n, steps=steps, warmup=warmup, precision=precision, **base
    ).check()
if nodes < 1 or (nodes > 1 and launcher != "srun"):
    raise ValueError(f"nodes {nodes}: spreading ranks over nodes needs launcher srun")
cores = len(os.sched_getaffinity(0))
if largest > cores and launcher == "local":
    print(f"note: {largest} workers share {cores} cores; their step times include waiting")
name = fw_device.cpu_device_name()
rec = Recorder(
    "distributed",
    extra={
        "strategy": strategy,
        "launcher": launcher,
        "image_size": image_size,
        **({"nodes": nodes} if nodes > 1 else {}),
    },
    model=model,
    framework=framework,
    mode=vocab.DEFAULT_MODE[framework],
    device="cpu",
    device_name=name,
    precision=precision,
    batch_size=batch_per_worker,
    threads=1,  # each rank's: one core, one intra-op thread
)
# the workers' files live beside the executed notebook while it runs (a shared folder, which
# the tasks of a multi-node allocation can all reach), and go when it ends
work = tempfile.TemporaryDirectory(
    prefix=".13_distributed-", dir=os.environ.get(vocab.ENV_EXECUTED_DIR) or None
)
work_dir = Path(work.name)
print(f"{model} · {framework} {strategy} · {precision} · world sizes {world_sizes} · {name}")

# %% [markdown]
# ## Correctness: the float64 losses of every way to train
# The strategy at the largest world size against the one-process reference of each framework
# (`micro_batches` = that world size, shard by shard), over `parity_steps` steps.

# %%
parity = None
if check_parity and largest > 1:
    other = "jax" if framework == "torch" else "torch"
    fp64 = dict(base, steps=parity_steps, warmup=0, precision="fp64", compute_only=False)
    runs = {
        f"{framework} {strategy} x{largest}": Job(strategy=strategy, world_size=largest, **fp64),
        f"{framework} one process": Job(
            strategy="none", world_size=1, micro_batches=largest, **fp64
        ),
        f"{other} one process": Job(
            strategy="none", world_size=1, micro_batches=largest, **{**fp64, "framework": other}
        ),
    }
    losses = {
        label: launch(job, work_dir / f"parity-{i}", launcher, nodes=nodes)[0]["losses"]
        for i, (label, job) in enumerate(runs.items())
    }
    labels = list(losses)
    own = scaling.loss_parity_max_rel(losses[labels[0]], losses[labels[1]])
    cross = scaling.loss_parity_max_rel(losses[labels[0]], losses[labels[2]])
    tolerance = 1e-9
    parity = {"own": own, "cross": cross, "ok": own <= tolerance and cross <= tolerance}
    for metric, value, against in (
        ("dist_fp64_loss_parity_max_rel", own, labels[1]),
        ("dist_fp64_cross_framework_max_rel", cross, labels[2]),
    ):
        rec.add(
            metric,
            value,
            "ratio",
            n=parity_steps,
            status="ok" if value <= tolerance else "failed",
            precision="fp64",
            extra={
                "world_size": largest,
                "against": against,
                "tolerance": tolerance,
                "losses": losses,
            },
        )
    display(pd.DataFrame(losses).rename_axis("step"))
    print(
        f"largest relative loss difference: {own:.2e} against {labels[1]}, "
        f"{cross:.2e} against {labels[2]} (gate {tolerance:g})"
    )
elif check_parity:
    print("parity needs a world size above 1; skipped")

# %% [markdown]
# ## Step time, communication and weak scaling
# Each world size: `warmup` untimed steps, `steps` synced steps, then `steps` compute-only steps.

# %%
summaries, hosts = {}, {}
for n in world_sizes:
    job = Job(
        strategy=strategy, world_size=n, steps=steps, warmup=warmup, precision=precision, **base
    )
    results = launch(job, work_dir / f"train-{n}", launcher, nodes=nodes)
    hosts[n] = [r.get("host") for r in results]
    summaries[n] = scaling.summarize(job, results)
    print(f"world size {n}: ranks on {', '.join(map(str, hosts[n]))}")
rows = []
for n, s in summaries.items():
    columns = {"extra": {"world_size": n, "global_batch": s.global_batch, "hosts": hosts[n]}}
    rec.add(
        "step_ms",
        s.step_s * 1e3,
        "ms",
        n=len(s.step_samples_s),
        extra={**columns["extra"], "samples": [x * 1e3 for x in s.step_samples_s]},
    )
    rec.add("throughput_img_s", s.img_s, "img/s", **columns)
    rec.add("cpu_ms_per_rank", s.cpu_s_per_rank * 1e3, "ms", **columns)
    rec.add(
        "peak_mem_bytes",
        s.peak_rss_bytes,
        "bytes",
        extra={
            **columns["extra"],
            "source": "peak RSS of the largest rank",
            "state_bytes": s.state_bytes,
        },
    )
    rec.add("state_bytes_per_rank", s.state_bytes, "bytes", **columns)
    if s.compute_only_step_s is not None:
        rec.add("compute_only_step_ms", s.compute_only_step_s * 1e3, "ms", **columns)
        rec.add("comm_overhead_frac", s.comm_overhead_frac, "ratio", **columns)
    if s.grad_allreduce_s is not None:
        rec.add(
            "grad_allreduce_ms",
            s.grad_allreduce_s * 1e3,
            "ms",
            extra={
                **columns["extra"],
                "grad_arrays": s.grad_arrays,
                "grad_bytes": s.grad_bytes,
            },
        )
    efficiency = None
    if n > 1 and 1 in summaries:
        efficiency = scaling.scaling_efficiency(s, summaries[1])
        rec.add("scaling_efficiency", efficiency, "ratio", **columns)
    rows.append(
        {
            "world size": n,
            "step ms": s.step_s * 1e3,
            "img/s": s.img_s,
            "compute-only ms": None
            if s.compute_only_step_s is None
            else s.compute_only_step_s * 1e3,
            "comm share": s.comm_overhead_frac,
            "grad all-reduce ms": None if s.grad_allreduce_s is None else s.grad_allreduce_s * 1e3,
            "gradient arrays": s.grad_arrays,
            "scaling efficiency": efficiency,
            "state MB/rank": s.state_bytes / 1e6,
            "peak RSS MB": s.peak_rss_bytes / 1e6,
        }
    )
steps_table = pd.DataFrame(rows).set_index("world size")
steps_table

# %%
bars = (
    steps_table.reset_index()
    .melt(
        id_vars="world size",
        value_vars=["step ms", "compute-only ms", "grad all-reduce ms"],
        var_name="step",
        value_name="ms",
    )
    .dropna()
)
alt.Chart(
    bars, title=f"{framework} {strategy}: synced step, compute only, gradients' all-reduce"
).mark_bar().encode(
    x=alt.X("world size:O"),
    xOffset="step:N",
    y=alt.Y("ms:Q", title="ms per step"),
    color="step:N",
)

# %% [markdown]
# ## All-reduce bandwidth
# One fp32 all-reduce (PyTorch `all_reduce` over gloo; JAX `psum` in `shard_map`) per message
# size at the largest world size, each timed between barriers, the median of at least 5 calls
# and 0.2 s.

# %%
sweep = None
if allreduce and largest > 1:
    sizes = scaling.message_sizes(1024, allreduce_max_bytes)
    job = Job(
        strategy=strategy, world_size=largest, phase="allreduce", allreduce_bytes=sizes, **base
    )
    ranks = launch(job, work_dir / "allreduce", launcher, nodes=nodes)
    sweep = pd.DataFrame(scaling.allreduce_table(ranks, largest))
    for row in sweep.itertuples():
        rec.add(
            "allreduce_busbw_gbs",
            row.busbw_gbs,
            "GB/s",
            extra={
                "message_bytes": int(row.message_bytes),
                "algbw_gbs": row.algbw_gbs,
                "seconds": row.seconds,
                "world_size": largest,
            },
        )
    display(sweep)
    display(
        alt.Chart(sweep, title=f"{framework} all-reduce, {largest} processes")
        .mark_line(point=True)
        .encode(
            x=alt.X("message_bytes:Q", scale=alt.Scale(type="log"), title="message (bytes)"),
            y=alt.Y("busbw_gbs:Q", title="bus bandwidth (GB/s)"),
        )
    )

# %%
rec.emit()
work.cleanup()
if parity is not None and not parity["ok"]:
    raise AssertionError(
        f"float64 losses disagree: {parity['own']:.2e} against the one-process reference, "
        f"{parity['cross']:.2e} against the other framework (gate 1e-9)"
    )
