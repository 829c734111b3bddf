# %% [markdown]
# # 20 · Analysis: how JAX and PyTorch compare, and why
#
# **Purpose.** Turn one run of a campaign into the study's answer. Reading only the DuckDB index
# (tables `runs`, `cells`, `measurements`), it builds the JAX ÷ PyTorch throughput matrix with 95%
# intervals (best modes and defaults), throughput scaling, latency percentiles, memory, compile
# time and its break-even, energy, the roofline with measured ceilings, CNN vs Transformer, the
# training / memory / validation families when present, the comparison with the previous run, and
# the failures. It saves figures under `figures/<campaign>/`, tables under
# `report/<campaign>/tables/` and a `content.json` from which `fwbench report` writes report.md and
# report.html. It computes MFU here, from the run's calibration (else the latest of the same device
# in the index), and emits it as records of its own (metric `mfu`, with the measured row's family
# and columns), which the index takes in with this notebook. The computations live in
# `fwbench.report.tables`, `fwbench.report.roofline` and `fwbench.report.sentences`; this notebook only strings them
# together and shows them.
#
# **Run it:** `fwbench report smoke` (runs this notebook as a cell of the latest smoke run).
#
# **Runtime:** 20 to 40 s on a 2-core CPU for the smoke campaign (figure export dominates); about
# 1 to 2 min for a full GPU campaign (more bootstrap intervals and figures).

# %% tags=["parameters"]
campaign = "smoke"
run_id = ""  # empty: the campaign's latest run
baseline_run_id = ""  # empty: the run before run_id
db_path = ""  # empty: $FWBENCH_DB, else executed/fwbench.duckdb
figures_dir = ""  # empty: figures/<campaign>
report_dir = ""  # empty: report/<campaign>

# %%
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

from fwbench.measure.meters.contention import SHARED_FRACTION
from fwbench.models.registry import MODELS
from fwbench.pipeline.campaign import find_repo_root
from fwbench.report import charts, roofline, sentences, tables
from fwbench.report.sections import ReportContent
from fwbench.results import db as fw_db
from fwbench.results.records import Recorder

root = find_repo_root(Path.cwd())
db_file = Path(db_path) if db_path else fw_db.default_db_path()
db_file = db_file if db_file.is_absolute() else root / db_file
con = fw_db.connect(db_file, read_only=True)
run_id, baseline_run_id = tables.resolve_runs(con, campaign, run_id, baseline_run_id)
meas = tables.load_measurements(con, campaign, run_id)
cells = tables.load_cells(con, campaign, run_id)
run = tables.load_run(con, campaign, run_id)
index_calibration = tables.load_calibration(con)  # MFU's fallback when this run did not calibrate
if baseline_run_id:
    baseline = tables.load_measurements(con, campaign, baseline_run_id)
else:
    baseline = meas.iloc[0:0]
con.close()

content = ReportContent(
    campaign,
    run_id,
    baseline_run_id,
    figures_dir=Path(figures_dir) if figures_dir else root / "figures" / campaign,
    report_dir=Path(report_dir) if report_dir else root / "report" / campaign,
)
charts.use_theme()
kinds = {name: spec.kind for name, spec in MODELS.items()}
inference = meas[meas.family == "inference"]
devices = ", ".join(sorted({d for d in inference.device_name if d})) or "no device"
print(f"{campaign} run {run_id} (baseline: {baseline_run_id or 'none'}): {len(meas)} records")
meas.groupby(["family", "status"]).size().rename("records").to_frame()


def sources(rows):
    return tables.source_paths(rows, cells)


# %% [markdown]
# ## Comparison matrix
# JAX ÷ PyTorch throughput per configuration. *Best* takes each side's fastest variant; *defaults*
# is PyTorch eager against JAX jit. An interval that contains 1 is a tie.

# %%
samples = tables.throughput_samples(meas)
matrix = tables.comparison_matrix(samples)
content.section(
    "Comparison matrix",
    "JAX ÷ PyTorch median throughput (images/s) for every model, device, precision and batch "
    "size, with a 95% bootstrap interval; > 1 means JAX is faster.",
)
if matrix.empty:
    content.note("No configuration was measured with both frameworks in this run.")
else:
    display(
        content.figure(
            charts.ratio_heatmap(matrix),
            "ratio_matrix",
            "JAX ÷ PyTorch throughput",
            f"Median images/s of JAX divided by PyTorch's, on {devices}; best modes (each framework's "
            "fastest variant) and defaults (PyTorch eager vs JAX jit). Colour is log₂ of the ratio; "
            "'tie' marks a 95% bootstrap interval that contains 1.",
        )
    )
    display(
        content.table(
            matrix.drop(columns=["device"]),
            "ratio_matrix",
            "JAX ÷ PyTorch throughput ratio with 95% interval and the winner (tie when the interval "
            "contains 1).",
            sources(inference[inference.metric == "throughput_img_s"]),
        )
    )

# %% [markdown]
# ## Throughput scaling with batch size

# %%
content.section(
    "Throughput scaling",
    "How many images per second each variant sustains as the "
    "batch grows (median over blocks of enqueued calls, one sync per block).",
)
if samples.empty:
    content.note("No throughput was measured in this run.")
else:
    display(
        content.figure(
            charts.by_batch(samples, "median", "images/s (median)", ci=("ci_low", "ci_high")),
            "throughput_scaling",
            "Throughput vs batch size",
            f"Median images/s over timed blocks of pipelined calls with its 95% bootstrap interval, "
            f"per framework and mode, on {devices}; both axes logarithmic.",
        )
    )

# %% [markdown]
# ## Latency at batch 1

# %%
latency = tables.latency_at_smallest_batch(meas)
content.section(
    "Latency at batch 1",
    "Per-call latency, every call synced and timed alone, at "
    "the smallest batch size measured (1 unless the campaign left it out).",
)
if latency.empty:
    content.note("No latency was measured in this run.")
else:
    display(
        content.figure(
            charts.latency_chart(latency),
            "latency_batch1",
            "Latency percentiles at the smallest batch",
            f"p50, p95 and p99 of per-call latency (each call synchronised and timed alone) on "
            f"{devices}, at batch size {', '.join(map(str, sorted(latency.batch_size.unique())))}.",
        )
    )
    display(
        content.table(
            latency.drop(columns=["device"]),
            "latency_batch1",
            "Latency percentiles (ms) at the smallest batch size.",
            sources(inference[inference.metric.str.startswith("latency_")]),
        )
    )

# %% [markdown]
# ## Memory

# %%
memory = tables.memory_table(meas)
content.section(
    "Memory",
    "Peak device memory per batch size (torch max_memory_allocated, JAX "
    "peak_bytes_in_use, CPU peak RSS) and images/s per GB of that peak.",
)
if memory.empty:
    content.note("No peak memory was recorded in this run.")
else:
    display(
        content.figure(
            charts.by_batch(memory, "peak_mem_gb", "peak memory (GB)"),
            "memory_scaling",
            "Peak memory vs batch size",
            f"Peak memory during the timed calls, per framework and mode, on {devices}; GB = 10⁹ "
            "bytes; both axes logarithmic.",
        )
    )
    display(
        content.figure(
            charts.by_batch(memory, "img_s_per_gb", "images/s per GB"),
            "memory_efficiency",
            "Memory efficiency",
            f"Median throughput divided by peak memory (images/s per GB), on {devices}.",
        )
    )
    display(
        content.table(
            memory.drop(columns=["device"]),
            "memory",
            "Peak memory and memory efficiency per configuration.",
            sources(inference[inference.metric == "peak_mem_bytes"]),
        )
    )

# %% [markdown]
# ## Compile time and its break-even

# %%
compile_table = tables.metric_table(meas, ["compile_s", "lower_s", "xla_compile_s"])
compile_table = compile_table.dropna(subset=["compile_s"])
content.section(
    "Compile time and break-even",
    "JAX: AOT lowering plus XLA compilation; torch.compile: first call minus a steady call; "
    "eager: 0. Break-even is the number of images after which the faster side's extra compile "
    "time is paid back: (compile_faster − compile_other) ÷ (s/img other − s/img faster).",
)
if compile_table.empty:
    content.note("No compile time was recorded in this run.")
else:
    compiled = compile_table[compile_table.compile_s > 0]
    if compiled.empty:
        content.note("Only eager modes ran, so nothing was compiled.")
    else:
        display(
            content.figure(
                charts.by_batch(compiled, "compile_s", "compile time (s)"),
                "compile_time",
                "Compile time vs batch size",
                f"Seconds spent compiling before the first measured call, per compiled mode, on "
                f"{devices} (eager modes compile nothing and are left out).",
            )
        )
    display(
        content.table(
            compile_table.drop(columns=["device"]),
            "compile_time",
            "Compile time (s) per configuration.",
            sources(inference[inference.metric == "compile_s"]),
        )
    )
    breakeven = tables.break_even_table(matrix, meas) if not matrix.empty else pd.DataFrame()
    if breakeven.empty:
        content.note("No pair with compile times on both sides, so no break-even.")
    else:
        display(
            content.table(
                breakeven,
                "break_even",
                "Images (and calls) until the faster side's compile time is paid "
                "back against the other side; ∞: the slower side never pays back.",
                sources(inference[inference.metric.isin(["compile_s", "throughput_img_s"])]),
            )
        )

# %% [markdown]
# ## Energy per image

# %%
energy = tables.energy_table(meas)
content.section(
    "Energy per image",
    "Energy counter (NVML total energy on GPUs, RAPL on CPUs) "
    "read around the throughput measurement, divided by the images processed.",
)
if energy.empty:
    reasons = tables.energy_unavailable_reasons(meas)
    content.note(
        "No energy was measured in this run" + (f" ({'; '.join(reasons)})." if reasons else ".")
    )
else:
    display(
        content.figure(
            charts.by_batch(energy, "energy_j_per_img", "joules per image"),
            "energy_per_image",
            "Energy per image",
            f"Joules per image over the throughput measurement on {devices}.",
        )
    )
    display(
        content.table(
            energy.drop(columns=["device"]),
            "energy",
            "Energy per image (J).",
            sources(inference[inference.metric == "energy_j_per_img"]),
        )
    )

# %% [markdown]
# ## Roofline and MFU
# Ceilings are measured by 02_calibrate on the same device, never copied from datasheets: this
# run's, else the latest calibration of the same device, framework and precision in the index.
# MFU = achieved TFLOP/s ÷ the peak matmul TFLOP/s measured through the same framework; it is
# emitted below as records of this notebook.

# %%
calibration = roofline.calibration_with_fallback(meas, index_calibration)
ceilings = roofline.device_ceilings(calibration)
points = roofline.roofline_points(meas, calibration)
mfu = roofline.mfu_table(meas, calibration)
content.section("Roofline and MFU", f"Classification rule: {roofline.RULE}")
if points.empty:
    content.note("No FLOP counts were recorded in this run, so there is no roofline.")
else:
    if ceilings.empty:
        content.note(
            f"No calibration of {devices} in this run or in the index (02_calibrate did not "
            "run): without measured ceilings no configuration can be placed on a roofline and "
            "no MFU can be computed."
        )
    for i, device_name in enumerate(sorted(points.device_name.unique())):
        on_device = points[(points.device_name == device_name) & points.intensity.notna()]
        device_ceilings = ceilings[ceilings.device_name == device_name]
        if on_device.empty or device_ceilings.empty:
            content.note(f"{device_name}: no intensity or no ceilings, so no roofline plot.")
            continue
        curve = roofline.roofline_curve(device_ceilings, on_device.intensity)
        display(
            content.figure(
                charts.roofline_chart(on_device, curve),
                f"roofline_{i + 1}",
                f"Roofline: {device_name}",
                f"Achieved FLOP/s (FLOPs per image from the frameworks' counters × median "
                f"throughput) against arithmetic intensity (XLA cost analysis FLOPs ÷ bytes) on "
                f"{device_name}; lines are min(measured peak matmul, measured copy bandwidth × "
                f"intensity) per precision.",
            )
        )
    display(
        content.table(
            points.drop(columns=["device"]),
            "roofline",
            "Achieved TFLOP/s, MFU (achieved ÷ the framework's measured matmul peak), intensity and "
            "the regime each configuration falls in.",
            sources(
                meas[
                    meas.metric.isin(
                        ["achieved_tflops", "peak_matmul_tflops", "copy_bandwidth_gbs"]
                    )
                ]
            ),
        )
    )
if not ceilings.empty:
    display(
        content.table(
            ceilings,
            "ceilings",
            "Measured ceilings per device and precision, and the run each was measured in.",
            sources(meas[meas.family == "calibration"]),
        )
    )
content.section(
    "MFU",
    "Model FLOP utilisation of every configuration with a FLOP count, inference and training: "
    "achieved TFLOP/s ÷ the peak matmul TFLOP/s that 02_calibrate measured through the same "
    "framework on the same device and precision.",
    name="mfu",
)
for note in roofline.mfu_notes(mfu, run_id):
    content.note(note)
if mfu.mfu.notna().any():
    display(
        content.table(
            mfu.dropna(subset=["mfu"]).drop(
                columns=["mode", "device", "ceiling_campaign", "ceiling_cell", "channels_last"]
            ),
            "mfu",
            "MFU per configuration: median achieved TFLOP/s over trials ÷ the peak matmul "
            "TFLOP/s of the same framework, device and precision, measured in the run named.",
            sources(meas[meas.metric.isin(["achieved_tflops", "peak_matmul_tflops"])]),
        )
    )
elif mfu.empty:
    content.note("No achieved FLOP/s was recorded in this run, so there is no MFU.")
mfu_records = Recorder("analysis")
roofline.add_mfu_records(mfu_records, mfu)
mfu_records.emit()

# %% [markdown]
# ## CNN vs Transformer

# %%
kind_table = tables.kind_summary(matrix, kinds)
content.section("CNN vs Transformer", "Where each framework wins, by architecture.")
if matrix.empty:
    content.note("No comparison to split by architecture.")
else:
    display(
        content.figure(
            charts.kind_chart(matrix, kinds),
            "cnn_vs_transformer",
            "Who wins, by architecture",
            f"JAX ÷ PyTorch median throughput with 95% bootstrap intervals per model and batch size, "
            f"best modes and defaults, on {devices}; right of the dashed line JAX is faster.",
        )
    )
    display(
        content.table(
            kind_table,
            "by_architecture",
            "Wins, ties and geometric-mean JAX ÷ PyTorch ratio per architecture.",
            sources(inference[inference.metric == "throughput_img_s"]),
        )
    )

# %% [markdown]
# ## Training, memory-saving methods and validation
# Each appears when its notebook ran in this campaign.

# %%
training = meas[meas.family == "training"]
content.section(
    "Training",
    "Training speed with every step synced (each framework at its default and best practice), "
    "then the proof that both frameworks train the same function: per-step loss parity from the "
    "same weights on the same batches, and convergence on real data.",
)
train_samples = tables.throughput_samples(meas, "training")
train_matrix = tables.comparison_matrix(train_samples)
if training.empty:
    content.note("No training records in this run.")
if not train_matrix.empty:
    display(
        content.figure(
            charts.ratio_heatmap(train_matrix),
            "training_ratio_matrix",
            "JAX ÷ PyTorch training throughput",
            "Median training images/s of JAX divided by PyTorch's (batch size over the synced "
            f"step time), on {devices}; 95% bootstrap interval over steps (or trials, with three "
            "or more); 'tie' marks an interval that contains 1.",
        )
    )
    display(
        content.table(
            train_matrix.drop(columns=["device"]),
            "training_ratio_matrix",
            "JAX ÷ PyTorch training throughput with 95% interval and the winner.",
            sources(training[training.metric == "throughput_img_s"]),
        )
    )
train_speed = tables.metric_table(meas, tables.TRAINING_SPEED, "training")
if not train_speed.empty:
    train_memory = tables.memory_table(meas, "training")
    display(
        content.figure(
            charts.by_batch(train_samples, "median", "images/s (median)", ci=("ci_low", "ci_high")),
            "training_throughput",
            "Training throughput vs batch size",
            "Median training images/s over synced steps with its 95% bootstrap interval, per "
            "framework and mode; both axes logarithmic.",
        )
    )
    if not train_memory.empty:
        display(
            content.figure(
                charts.by_batch(train_memory, "peak_mem_gb", "peak memory (GB)"),
                "training_memory",
                "Training peak memory vs batch size",
                "Peak memory over the timed training steps (torch allocator or XLA memory_stats "
                "on a GPU; process peak RSS on a CPU, which includes the runtime), GB = 10⁹ bytes.",
            )
        )
    display(
        content.table(
            train_speed.drop(columns=["device"]),
            "training_speed",
            "Training step time (p50, p95), images/s, compile time, peak memory and energy per "
            "step (median over trials).",
            sources(training[training.metric.isin(tables.TRAINING_SPEED)]),
        )
    )
parity_curves = tables.parity_curves(meas)
if not parity_curves.empty:
    display(
        content.figure(
            charts.parity_chart(parity_curves),
            "training_parity",
            "Loss-curve parity",
            "Per-step training loss of PyTorch (eager) and JAX (jit) from the same ported weights "
            "on the same batches, fp32 with TF32 off, dropout off; the panel title gives the "
            "largest relative difference over the steps (the bar is 1e-3).",
        )
    )
    display(
        content.table(
            tables.check_table(meas, tables.PARITY_METRICS),
            "training_parity",
            "Largest relative difference, JAX against PyTorch: per-step loss, parameters and "
            "BatchNorm statistics after the last step.",
            sources(training[training.metric.isin(tables.PARITY_METRICS)]),
        )
    )
convergence = tables.convergence_curves(meas)
if not convergence.empty:
    display(
        content.figure(
            charts.convergence_chart(convergence),
            "training_convergence",
            "Convergence",
            "Train loss per step and validation top-1 per epoch, both frameworks from the same "
            "weights, batches and learning-rate schedule (dropout on, each side its own masks).",
        )
    )
    display(
        content.table(
            tables.check_table(meas, tables.CONVERGENCE_METRICS),
            "training_convergence",
            "Validation top-1 (%) after the last epoch and mean train loss over the last epoch.",
            sources(training[training.metric.isin(tables.CONVERGENCE_METRICS)]),
        )
    )

# %%
memory_family = tables.family_table(meas, "memory")
content.section(
    "Memory-saving methods",
    "Peak memory and iteration time per method (e.g. activation checkpointing).",
)
if memory_family.empty or "mode" not in memory_family:
    content.note("No memory-method records in this run.")
else:
    display(
        content.table(
            memory_family,
            "memory_methods",
            "Memory-method metrics per mode.",
            sources(meas[meas.family == "memory"]),
        )
    )
    if {"model", "framework", "peak_mem_bytes"} <= set(memory_family.columns):
        display(
            content.figure(
                charts.by_mode_bars(memory_family, "peak_mem_bytes", "peak memory (bytes)"),
                "memory_methods",
                "Peak memory by method",
                "Peak memory of one training iteration per memory-saving method, per framework.",
            )
        )

# %%
validation = tables.family_table(meas, "validation")
content.section(
    "Validation",
    "Both frameworks compute the same function: output and gradient "
    "agreement, FLOP and parameter counts.",
)
if validation.empty:
    content.note("No validation records in this run.")
else:
    display(
        content.table(
            validation,
            "validation",
            "Validation metrics per model.",
            sources(meas[meas.family == "validation"]),
        )
    )

# %% [markdown]
# ## History: this run against the baseline

# %%
history = tables.history_flags(meas, baseline)
flagged = history[history.flag != "unchanged"]
content.section("History", sentences.history_sentence(history, baseline_run_id))
if not baseline_run_id:
    content.note("No earlier run of this campaign.")
elif flagged.empty:
    content.note("No metric changed beyond its 95% interval.")
else:
    display(
        content.table(
            flagged.drop(columns=["notebook"]),
            "history",
            f"Metrics whose 95% intervals do not overlap between run {run_id} and {baseline_run_id}.",
            sources(meas[meas.metric.isin(flagged.metric)]),
        )
    )

# %% [markdown]
# ## Failures and workarounds

# %%
failures = tables.failures_table(meas, cells)
retries = tables.retries_table(cells)
content.section("Failed cells and out-of-memory batch sizes", part="failures")
if failures.empty:
    content.note("Nothing failed.")
else:
    display(
        content.table(
            failures.drop(columns=["path"]),
            "failures",
            "Records that are not ok, with the last line of their error.",
            list(failures.path.dropna()),
        )
    )
content.section(
    "Retries",
    "Cells whose kernel died and that were run again with the campaign's retry environment.",
    part="failures",
)
if retries.empty:
    content.note("No cell was retried.")
else:
    display(
        content.table(
            retries.drop(columns=["path"]),
            "retries",
            "Retried cells, what changed, and the final status.",
            list(retries.path.dropna()),
        )
    )

content.section(
    "Cells run on a shared machine",
    "Cells during which other processes and the hypervisor took more than "
    f"{SHARED_FRACTION:.0%} of the CPU time. On a shared CPU, PyTorch's OpenMP threads wait on "
    "each other, so such a cell's times say more about the neighbours than about the framework.",
    part="failures",
    name="shared_machine",
)
shared = tables.shared_machine_table(cells)
content.note(sentences.contention_sentence(cells))
if not shared.empty:
    display(
        content.table(
            shared.drop(columns=["path"]),
            "shared_machine",
            "Cells run on a shared machine: share of all CPU time taken by other processes and "
            "stolen by the hypervisor, and the 1-minute load average before the cell.",
            list(shared.path.dropna()),
        )
    )

# %% [markdown]
# ## Summary, methodology and limitations

# %%
training_summary = sentences.training_sentences(
    train_matrix,
    tables.check_table(meas, tables.PARITY_METRICS),
    tables.check_table(meas, tables.CONVERGENCE_METRICS),
)
content.summary = sentences.executive_summary(
    matrix,
    kind_table,
    history,
    baseline_run_id,
    failures,
    retries,
    training_summary,
    sentences.shared_machine_sentence(shared, cells),
)
content.methodology = sentences.methodology(run, meas, cells, [samples, train_samples])

content.limitations = sentences.limitations(samples, meas)
content_path = content.write()
display(Markdown("\n".join(f"- {s}" for s in content.summary)))
print(f"wrote {content_path}")
