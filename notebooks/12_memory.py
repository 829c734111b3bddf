# %% [markdown]
# # 12 · Memory: a whole-step graph profiler and μ-TWO activation checkpointing
#
# **Purpose.** Trace one complete PyTorch training step (forward, loss, backward, Adam update)
# into a single graph, profile every node's time and memory, and let the μ-TWO planner
# (Purandare et al., MLSys 2023) choose which activations to recompute so the peak fits a
# budget. Each rewritten graph is proven in float64 to train exactly like the original, then
# measured beside the baselines: no checkpointing, `torch.utils.checkpoint` on every k blocks and
# on Chen et al.'s sqrt(n) segments, and `torch.compile` with the partitioner's
# `activation_memory_budget` (against the μ-TWO plan's graph, compiled). Sweeping the budget draws
# a memory-time curve per method. With a copy bandwidth the planner also swaps activations to
# host memory: on a GPU the rewriter emits the copies on two side streams and the swap plan is
# measured like the others; on a CPU, which has no separate device memory, it is simulated only
# (and its rewrite proved in float64 with clones for copies). With `jax_planners`, JAX's planners
# run on the model's Flax twin beside them (`jax.checkpoint` on the same segments and with JAX's
# policies, memory as XLA plans it): `fwbench run params/memory_planners.yaml`.
#
# **Run it:** `fwbench run params/memory_seed.yaml` (ResNet-152 and BERT-base, the
# reference scale) or `fwbench run params/memory_cpu.yaml`; Run-All in JupyterLab runs the defaults below.
#
# **Runtime:** defaults about 15 s on a 2-core CPU. A seed-scale cell (params/memory_seed.yaml:
# ResNet-152 at 224 px or BERT-base at sequence 128, four budgets, three checkpointing
# baselines) took 3 to 4 min per trial for ResNet-152 at batch 4 and 8, 8 to 10 min for BERT-base
# at batch 8 with three compilations and 11 to 14 min at batch 16 on 2 cores. Compiling
# ResNet-152's whole traced step did not finish in 9 min.

# %% tags=["parameters"]
model = "bert"  # one of: resnet50, resnet152, vit_b_16, bert, bert_encoder, or a registry model
batch_sizes = [4]  # > 0
image_size = 32  # vision models only
seq_len = 32  # bert and bert_encoder only
encoder_size = "tiny"  # one of: tiny, small, base
num_classes = 10
budget_fractions = [0.1, 0.5, 0.9]  # > 0: share of the activation bytes left at the peak
checkpoint_every = [1, 2]  # torch.utils.checkpoint on segments of k blocks
sqrt_n = True  # also Chen et al.'s segments of sqrt(n) blocks
device = "cpu"  # one of: cpu, cuda
profile_iters = 3
timing_iters = 3
time_rounds = 3  # rounds of the graph and every plan, interleaved, for the time model's check
compile_budgets = []  # e.g. [0.1, 0.5, 1.0]; empty skips the torch.compile baselines
compile_fractions = []  # budget fractions whose rewritten graph is also compiled
compile_graph = False  # also compile the unplanned traced step, the compiled plans' reference
compile_backend = "inductor"
compile_locality = True  # Inductor's reorder_for_locality pass in every compilation (False: off)
swap_bandwidth_gbs = 12.0  # copy bandwidth the swap plans assume; 0 plans no swap
exact_check = True  # prove every rewritten graph in float64, gate every baseline
replay_random = True  # may recompute dropout masks (generator state restored); False: never
# JAX's planners on the model's Flax twin (ResNets, bert): jax.checkpoint on the same segments as
# the checkpointing baselines, and each of jax_policies on every block
jax_planners = False
jax_policies = ["dots_saveable", "dots_with_no_batch_dims_saveable", "nothing_saveable"]
jax_budgets = []  # 0 to 1: a policy that keeps this share of the twin's named activations (bert)
jax_compile_cache = False  # keep XLA's programs on disk so that later trials load them
seed = 0

# %%
import os

import altair as alt
import pandas as pd
import torch
from tqdm import tqdm

from fwbench.families.memory import (
    memory_breakdown,
    memory_charts,
    memory_curve,
    memory_records,
    study,
)
from fwbench.families.memory.footprint import peak_source
from fwbench.families.memory.memory_charts import MB
from fwbench.measure import device as fw_device
from fwbench.measure import precision as fw_precision
from fwbench.measure.timing import StopRule
from fwbench.results.records import Recorder
from fwbench.vocab import ENV_TRIAL, MEMORY_COMPILED_KINDS, MEMORY_OVERHEAD_GOAL_PCT

alt.data_transformers.disable_max_rows()
settings = fw_precision.configure("torch", "fp32")
device_name = fw_device.device_name("torch", device)
rule = StopRule(min_iters=timing_iters, min_seconds=0.0)
# the runner's trial number: each trial measures the methods in another order
trial = int(os.environ.get(ENV_TRIAL) or 1)
print(f"torch {torch.__version__} on {device_name}; trial {trial}")

# %% [markdown]
# ## Trace, profile, plan, rewrite and measure, per batch size
#
# For every batch size this runs one model through `fwbench.families.memory.study.run_batch`:
# the traced graph is profiled (node times are the median of `profile_iters` iterations after
# one warm-up), the planner is run once to exhaustion to draw the predicted Pareto curve, and
# once per budget fraction to produce a plan that is rewritten, checked and measured.
# A budget fraction *f* means: at the peak, only *f* of the activation bytes may stay resident,
# i.e. budget = unplanned peak − (1 − f) × activation bytes.

# %%
results = [
    study.run_batch(
        model,
        bs,
        fractions=budget_fractions,
        rule=rule,
        device=device,
        image_size=image_size,
        seq_len=seq_len,
        encoder_size=encoder_size,
        num_classes=num_classes,
        profile_iters=profile_iters,
        checkpoint_every=checkpoint_every,
        sqrt_n=sqrt_n,
        compile_budgets=compile_budgets,
        compile_fractions=compile_fractions,
        compile_graph=compile_graph,
        compile_backend=compile_backend,
        compile_locality=compile_locality,
        swap_bandwidth_gbs=swap_bandwidth_gbs or None,
        exact_check=exact_check,
        seed=seed,
        rotation=trial - 1,
        replay_random=replay_random,
        time_rounds=time_rounds,
    )
    for bs in tqdm(batch_sizes, desc=f"{model} batch sizes")
]
summary = memory_records.summary_frame(results)
last = results[-1]
masks = "replayed from the forward pass's generator state" if replay_random else "kept"
print(
    f"traced with torch {last.torch_version}; {len(last.analysis.nodes)} nodes, "
    f"{len(last.analysis.activations)} activations, "
    f"{sum(a.from_random_op for a in last.analysis.activations.values())} drawn by a random op "
    f"(dropout masks: {masks}), "
    f"{sum(not a.recomputable for a in last.analysis.activations.values())} never recomputed"
)
if last.profile.note:
    print(last.profile.note)

# %% [markdown]
# ## The rewritten graph trains exactly like the original, in float64
# Every plan is applied to the float64 trace of the same step (same graph, node for node) and
# one step of each graph runs from identical copies of parameters, buffers and optimizer state,
# with the same RNG seed: the loss, every gradient and every updated input must agree within
# 1e-10. A recomputed dropout mask is drawn again from the generator state its forward pass
# drew it with (as `torch.utils.checkpoint` does), so an equal step means equal masks. The swap
# plans are proved too: on a CPU their copies out and back are clones, so this proves the
# rewrite (the inserted copies and the views rebuilt on them), not the copy engines of a GPU.

# %%
checks = pd.DataFrame(
    [
        {"batch_size": r.batch_size, "method": method, "equal": eq.equal, **eq.max_abs_diff}
        for r in results
        for method, eq in r.exact.items()
    ]
)
display(checks)
assert checks.empty or checks.equal.all(), "a rewritten graph changed the training step"

# %% [markdown]
# ## Activations the planner weighs (μ-TWO Table B), largest batch
# `recompute_ratio` is bytes freed per ms of replay; times are this machine's, ms.

# %%
table_b = pd.DataFrame(
    [
        {
            "activation": s.name,
            "memory_size": s.memory_size,
            "inactive_time": s.inactive_time,
            "recomp_srcs": len(s.recomp_srcs),
            "recomp_time": s.recomp_time,
            "recomp_memory": s.recomp_memory,
            "recompute_ratio": s.recompute_ratio if s.recomputable else None,
            "recomputable": s.recomputable,
            "swap_time": s.swap_time,
        }
        for s in last.stats.values()
    ]
).sort_values("memory_size", ascending=False)
table_b.head(15)

# %% [markdown]
# ## Measured results
#
# **What "measured peak" means.** On a GPU it is `torch.cuda.max_memory_allocated()` after
# `reset_peak_memory_stats()`. On a CPU there is no such counter, so for *every* method alike it
# is the bytes of the step's inputs (parameters, buffers, optimizer state, batch) plus the
# highest running total of the CPU allocator's events during one step, as recorded by
# `torch.profiler(profile_memory=True)`. It counts every tensor and kernel workspace, including
# buffers that torch.compile's generated code allocates; it is **not** the process RSS, which
# adds the allocator's cached pages, the framework's own code and data, and never goes down.
# The simulator predicts the same quantity from the static liveness of storages plus each node's
# profiled increment. Its time model predicts a plan's step as a multiple of the unplanned
# graph's: the profiled whole step plus the replayed nodes' profiled times, over the profiled
# whole step. `predicted_iter_ms` is that multiple of the unplanned graph as timed in
# `time_rounds` interleaved rounds (one step of the graph and of every plan per round), and
# `sim_time_error_pct` compares the multiple with the measured one, the median over rounds of
# the plan's step over the graph's. On the graph's row, `predicted_iter_ms` is the profile's own
# reading of the whole step; how far it sits from the rounds (`profile_drift_pct`) is the
# machine's drift between two windows of one process, not the model's error. The method is in the records' `mode` column
# (`none`, `graph`, `mu_two@0.5`, `checkpoint_every_2`, `checkpoint_sqrt_n`,
# `compile_budget_0.5`, `compiled_mu_two@0.5`, and `mu_two_swap@0.5` for the swap plans,
# measured on a GPU and simulated only on a CPU); savings and overheads are relative to `none`, the plain eager step. `graph` is the
# traced step run unmodified. `activation_saved_pct` is the saving as a share of the activation
# memory (the most activation bytes alive at once in the unplanned graph); when the optimizer
# update makes the peak (`activation_at_peak_bytes` is then 0), no method can lower it much.

# %%
shown = summary.assign(
    peak_MB=summary.peak_bytes / MB,
    predicted_MB=summary.predicted_peak_bytes / MB,
)[
    [
        "batch_size",
        "method",
        "peak_MB",
        "predicted_MB",
        "sim_peak_error_pct",
        "memory_saved_pct",
        "activation_saved_pct",
        "iter_time_ms",
        "predicted_iter_ms",
        "sim_time_error_pct",
        "profile_drift_pct",
        "overhead_pct",
    ]
]
shown.round(2)

# %%
rec = Recorder(
    "memory",
    extra={"settings": settings},
    model=model,
    framework="torch",
    device=device,
    device_name=device_name,
    precision="fp32",
)
memory_records.add_records(rec, summary, peak_source(device))
rec.emit()

# %% [markdown]
# ## JAX's planners on the Flax twin (`jax_planners`)
# The same model as a Flax module (weights ported from torch's), trained by the same step (Adam,
# softmax cross-entropy, BatchNorm in training mode; for `bert` the masked-LM loss with dropout
# active, `models/flax_bert.py`) under `jax.jit`: `jax_none` recomputes
# nothing; `jax_remat_every_<k>` and `jax_remat_sqrt_n` put `nnx.remat` (`jax.checkpoint`)
# around the checkpointing baselines' segments; `jax_policy_<name>` puts it around every block
# with one of JAX's standard policies; `jax_budget@<b>` around every block with the policy that
# saves the named values a knapsack keeps within share b of their bytes (the budget-matched
# counterpart of the μ-TWO plan). Peak and activation memory are XLA's accounting of the
# compiled step (`memory_analysis()`: arguments + outputs − donated + temporaries; the
# temporaries are the activations and working buffers), exact for what XLA allocates; savings
# and overheads are against `jax_none`. Every plan's gradients are checked against the plain
# step's in float64 at batch 2, like PyTorch's baselines above.

# %%
if jax_planners:
    from fwbench.families.memory import jax_remat
    from fwbench.vocab import MEMORY_EXACT_TOLERANCE

    if jax_compile_cache:
        print(f"XLA's compiled programs kept in {jax_remat.use_compile_cache()}")
    jax_summary = pd.concat(
        [
            jax_remat.run_batch(
                model,
                bs,
                inputs=jax_remat.Inputs(image_size, num_classes, seq_len, encoder_size),
                rule=rule,
                checkpoint_every=checkpoint_every,
                sqrt_n=sqrt_n,
                policies=jax_policies,
                budgets=jax_budgets,
                exact_check=exact_check,
                tolerance=MEMORY_EXACT_TOLERANCE,
                rotation=trial - 1,
                seed=seed,
            )  # fmt: skip
            for bs in tqdm(batch_sizes, desc=f"{model} JAX planners")
        ],
        ignore_index=True,
    )
    jax_rec = Recorder(
        "memory", extra={"settings": {"jax_policies": jax_policies, "jax_budgets": jax_budgets}},
        model=model, framework="jax", device=device, device_name=device_name, precision="fp32",
    )  # fmt: skip
    memory_records.add_records(jax_rec, jax_summary, jax_remat.PEAK_SOURCE)
    jax_rec.emit()
    both = pd.concat(
        [summary[summary.measured].assign(framework="PyTorch"), jax_summary.assign(framework="JAX")]
    ).assign(peak_MB=lambda d: d.peak_bytes / MB)
    display(both[["framework", "batch_size", "method", "peak_MB", "iter_time_ms", "overhead_pct",
                  "memory_saved_pct", "exact_max_abs_diff"]].round(3))  # fmt: skip
    failed = jax_summary[jax_summary.exact_max_abs_diff > MEMORY_EXACT_TOLERANCE]
    assert failed.empty, f"a JAX plan changed the gradients: {failed.method.tolist()}"
    display(
        alt.Chart(both, title="Peak memory against step time, both frameworks")
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("iter_time_ms:Q", title="step time (ms, median)"),
            y=alt.Y("peak_MB:Q", title="peak memory (MB)"),
            color="framework:N",
            shape=alt.Shape("batch_size:N", title="batch"),
            tooltip=["framework", "method", "batch_size", "peak_MB", "iter_time_ms"],
        )
    )

# %% [markdown]
# ## Memory along the step
# Simulated live memory per category at every execution rank for the largest batch, without and
# with the plan for the first budget fraction; dashed lines mark where the forward pass ends,
# the backward pass starts and the optimizer starts; the red line is the budget.

# %%
first_fraction = budget_fractions[0] if budget_fractions else None
frames = [memory_charts.timeline_frame(last.baseline, "no plan")]
budget = None
if first_fraction is not None:
    plan = last.plans[first_fraction]
    frames.append(memory_charts.timeline_frame(plan.simulation, study.plan_method(first_fraction)))
    budget = plan.budget_bytes
memory_charts.memory_timeline_chart(pd.concat(frames), last.analysis, budget)

# %% [markdown]
# ## What the peak is made of, against batch size

# %%
breakdown = []
for r in results:
    sims = [("no plan", "graph", r.baseline)]
    sims += [(study.plan_method(f), study.plan_method(f), p.simulation) for f, p in r.plans.items()]
    for plan, method, sim in sims:
        for part, nbytes in sim.parts_at_peak().items():
            breakdown.append(
                {
                    "label": model,
                    "batch_size": r.batch_size,
                    "plan": plan,
                    "method": method,
                    "part": part,
                    "MiB": nbytes / 2**20,
                }
            )
memory_breakdown.parts_chart(pd.DataFrame(breakdown))

# %% [markdown]
# ## Peak memory and iteration time against batch size, with and without the plan

# %%
by_batch = summary.assign(peak_MB=summary.peak_bytes / MB)
keep = by_batch.measured & by_batch.kind.isin(["none", "graph", "mu_two", "checkpoint"])
memory_charts.batch_chart(by_batch[keep][["batch_size", "method", "peak_MB", "iter_time_ms"]])

# %% [markdown]
# ## The predicted Pareto curve beside every method's measured point (largest batch)
# The curve is the planner's prediction after each greedy choice (peak from the simulator,
# added time from the profiled replay times relative to the traced step's profiled time).
# The points are measured: peak as defined above, time overhead relative to `none`.

# %%
reference_ms = last.profile.iteration_ms
predicted = pd.DataFrame(last.pareto).assign(
    peak_MB=lambda d: d.predicted_peak_bytes / MB,
    added_pct=lambda d: 100 * d.added_ms / reference_ms,
)
measured = summary[summary.batch_size == last.batch_size].assign(
    peak_MB=lambda d: d.peak_bytes / MB, added_pct=lambda d: d.overhead_pct
)[["method", "peak_MB", "added_pct"]]
memory_charts.pareto_chart(predicted, measured)

# %% [markdown]
# ## The memory-time curve
# Measured peak against measured iteration time for every method, one line per kind: eager
# methods (the μ-TWO plan, `torch.utils.checkpoint`, sqrt(n)) in one panel, compiled ones
# (`activation_memory_budget` against the μ-TWO plan's graph, compiled) in the other, because
# compilation also fuses kernels. The same chart as the report's (`families/memory/memory_curve.py`), but
# this notebook is one trial: the bar on each time is the interval of its median within this
# process; the report's is the interval from the spread between trials.

# %%
curve = summary.rename(
    columns={
        "peak_bytes": "peak_mem_bytes",
        "iter_ci_low_ms": "time_low",
        "iter_ci_high_ms": "time_high",
    }
).assign(
    device_name=device_name,
    mode_group=lambda d: d.kind.map(
        lambda k: "compiled" if k in MEMORY_COMPILED_KINDS else "eager"
    ),
)
memory_curve.curve_chart(curve)

# %% [markdown]
# ## What the planner decided, per activation (largest batch)
# Each bar is one activation at the rank that creates it, as tall as its bytes: kept,
# recomputed or (in the swap plans) swapped. Swap plans assume the copy bandwidth set above
# (on a GPU, 02_calibrate's `h2d_bandwidth_gbs` and `d2h_bandwidth_gbs` say what it is).

# %%
decided = {study.plan_method(f): p for f, p in last.plans.items()}
decided |= {study.swap_plan_method(f): p for f, p in last.swap_plans.items()}
memory_charts.decisions_chart(memory_charts.decisions_frame(last.analysis, decided))

# %% [markdown]
# ## Reading the result
# The sentence below is computed from the table above.

# %%
for r in results:
    rows = summary[summary.batch_size == r.batch_size].set_index("method")
    print(
        f"batch {r.batch_size}: activation memory {r.activation_peak_bytes / MB:.1f} MB at its "
        f"highest, {r.activation_at_peak_bytes / MB:.1f} MB of it alive at the unplanned peak of "
        f"{r.baseline.peak_bytes / MB:.1f} MB"
    )
    for f in r.plans:
        m = rows.loc[study.plan_method(f)]
        print(
            f"  budget fraction {f:g}: peak {m.peak_bytes / MB:.1f} MB vs "
            f"{rows.loc['none'].peak_bytes / MB:.1f} MB eager ({m.activation_saved_pct:.1f}% of "
            f"the activations saved) at {m.overhead_pct:+.1f}% iteration time; simulator error "
            f"{m.sim_peak_error_pct:+.2f}% on the peak, {m.sim_time_error_pct:+.2f}% on the time"
        )
    best = memory_curve.best_within(rows.reset_index(), MEMORY_OVERHEAD_GOAL_PCT)
    for kind, row in best.items():
        print(
            f"  most activation memory saved at <= +{MEMORY_OVERHEAD_GOAL_PCT:g}% time, {kind}: "
            + (
                f"{row.activation_saved_pct:.1f}% ({row.method}, {row.overhead_pct:+.1f}%)"
                if row is not None
                else "no method of this kind stays within it"
            )
        )
