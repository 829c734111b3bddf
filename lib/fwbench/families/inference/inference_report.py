"""Inference (10_inference): the JAX ÷ PyTorch matrix and its verdicts, why each gap is what it is
(from the per-op profiles), throughput, latency, memory, compile time, energy, and CNNs against
Transformers.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fwbench.families.inference import inference_three_way, inference_tuning
from fwbench.measure import verdicts
from fwbench.report import charts, sentences, tables, why
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    empty,
    literal,
    nonempty,
    per_analysis,
    pooled,
    ratio_heatmap,
    records,
    throughput,
)
from fwbench.vocab import TORCH_GRAPH_MODES, kind_label, model_label, series_label


def latency_at_smallest_batch(meas: pd.DataFrame) -> pd.DataFrame:
    """p50/p95/p99 latency at batch 1 (the smallest batch size measured, where 1 is absent)."""
    table = tables.metric_table(meas, ["latency_p50_ms", "latency_p95_ms", "latency_p99_ms"])
    if table.empty:
        return table
    keys = ["model", "device_name", "precision", "threads"]
    smallest = table.groupby(keys).batch_size.transform("min")
    return table[table.batch_size == smallest].reset_index(drop=True)


def break_even_images(compile_this, compile_other, s_per_img_this, s_per_img_other) -> float:
    """Images after which the faster side's extra compile time is paid back.

    Solves compile_this + N·t_this = compile_other + N·t_other. 0 when the faster side also compiles
    no slower; infinite when this side is not faster at all.
    """
    if s_per_img_this >= s_per_img_other:
        return math.inf
    extra_compile = (compile_this or 0.0) - (compile_other or 0.0)
    if extra_compile <= 0:
        return 0.0
    return extra_compile / (s_per_img_other - s_per_img_this)


def break_even_table(matrix: pd.DataFrame, meas: pd.DataFrame) -> pd.DataFrame:
    """For every compared pair, the faster side's compile time and when it is paid back."""
    compile_s = tables.metric_table(meas, ["compile_s"])
    lookup = {
        (r.model, r.device_name, r.precision, r.threads, r.batch_size, r.framework, r.variant): (
            r.compile_s
        )
        for r in compile_s.itertuples()
    }
    rows = []
    for r in matrix.itertuples():
        base = (r.model, r.device_name, r.precision, r.threads, r.batch_size)
        sides = {
            "jax": (r.jax_variant, r.jax_img_s, lookup.get((*base, "jax", r.jax_variant))),
            "torch": (
                r.torch_variant,
                r.torch_img_s,
                lookup.get((*base, "torch", r.torch_variant)),
            ),
        }
        faster = "jax" if r.jax_img_s > r.torch_img_s else "torch"
        other = "torch" if faster == "jax" else "jax"
        (fv, f_img_s, f_compile), (ov, o_img_s, o_compile) = sides[faster], sides[other]
        if f_compile is None or o_compile is None or np.isnan(f_compile) or np.isnan(o_compile):
            continue
        images = break_even_images(f_compile, o_compile, 1.0 / f_img_s, 1.0 / o_img_s)
        rows.append(
            {
                "model": r.model,
                "device_name": r.device_name,
                "precision": r.precision,
                "threads": r.threads,
                "batch_size": r.batch_size,
                "comparison": r.comparison,
                "faster": series_label(faster, fv),
                "other": series_label(other, ov),
                "faster_compile_s": f_compile,
                "other_compile_s": o_compile,
                "faster_ms_per_img": 1e3 / f_img_s,
                "other_ms_per_img": 1e3 / o_img_s,
                "break_even_images": images,
                "break_even_calls": images / r.batch_size,
            }
        )
    return pd.DataFrame(rows)


# Published throughputs to place a GPU run beside: the 594Project study this project started from.
# What it measured: inference at batch 128 on an H100 NVL, fp32 storage, each library at its
# defaults (PyTorch eager, whose cuDNN convolutions may use TF32 and whose matmuls do not; JAX jit
# at its default matmul precision, TF32 on such a GPU). Ours ÷ theirs is taken only from a run
# at that setting (``SETTING``: fwbench's ``default`` precision, PyTorch eager against JAX jit,
# params/gpu_reference.yaml); a ratio across precisions or modes says nothing of either side.
PUBLISHED = {
    "source": "594Project study",
    "measured": "inference",
    "device": "NVIDIA H100 NVL",
    "precision": "fp32 at each library's defaults",
    "batch_size": 128,
    "img_s": {
        "resnet50": {"torch": 5915, "jax": 11739},
        "vit_b_16": {"torch": 946, "jax": 530},
        "mobilenet_v3_small": {"torch": 37325, "jax": 56123},
        "efficientnet_b0": {"torch": 9027, "jax": 16510},
    },
}
SETTING = {"precision": "default", "torch_variant": "eager", "jax_variant": "jit"}


def published_table(matrix: pd.DataFrame) -> pd.DataFrame:
    """Each best-mode GPU comparison at the published batch size beside the published figures for
    the same model, labelled by what the study measured: both throughputs, both JAX ÷ PyTorch
    ratios, and ours ÷ theirs per side where this run measured the study's setting (else empty)."""
    if matrix.empty:
        return pd.DataFrame()
    figures = PUBLISHED["img_s"]
    mine = matrix[
        (matrix.comparison == "best")
        & (matrix.batch_size == PUBLISHED["batch_size"])
        & matrix.device_name.str.startswith("NVIDIA")
        & matrix.model.isin(list(figures))
    ]
    rows = []
    for r in mine.itertuples():
        theirs = figures[r.model]
        alike = all(getattr(r, key, None) == value for key, value in SETTING.items())
        rows.append(
            {
                "model": r.model,
                "device_name": r.device_name,
                "precision": r.precision,
                "batch_size": r.batch_size,
                "torch_img_s": r.torch_img_s,
                "jax_img_s": r.jax_img_s,
                "ratio": r.ratio,
                "published_measured": PUBLISHED["measured"],
                "published_device": PUBLISHED["device"],
                "published_precision": PUBLISHED["precision"],
                "published_torch_img_s": float(theirs["torch"]),
                "published_jax_img_s": float(theirs["jax"]),
                "published_ratio": theirs["jax"] / theirs["torch"],
                "torch_vs_published": r.torch_img_s / theirs["torch"] if alike else float("nan"),
                "jax_vs_published": r.jax_img_s / theirs["jax"] if alike else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def torchax_table(meas: pd.DataFrame) -> pd.DataFrame:
    """Each model run through torchax (10_inference's torchax mode): its float64 proof against
    PyTorch eager, or why it failed, and the images/s it then reached per batch size."""
    if meas.empty:
        return pd.DataFrame()
    arms = meas[(meas.family == "inference") & (meas["mode"].isin(TORCH_GRAPH_MODES))]
    proofs = arms[arms.metric == "float64_max_rel_err"]
    if proofs.empty:
        return pd.DataFrame()
    keys = ["model", "device_name"]
    table = proofs[[*keys, "status", "value", "error"]].rename(
        columns={"status": "proof", "value": "float64_max_rel_err", "error": "why_not"}
    )
    speed = arms[(arms.metric == "throughput_img_s") & (arms.status == "ok")]
    speed = speed[[*keys, "precision", "batch_size", "value"]].rename(
        columns={"value": "throughput_img_s"}
    )
    table = table.merge(speed, on=keys, how="left")
    return table.sort_values([*keys, "batch_size"]).reset_index(drop=True)


def energy_table(meas: pd.DataFrame) -> pd.DataFrame:
    return tables.metric_table(meas, ["energy_j_per_img"]).dropna(subset=["energy_j_per_img"])


def kind_summary(matrix: pd.DataFrame, kinds: dict[str, str]) -> pd.DataFrame:
    """Per model kind and comparison: wins, equivalences, undecided ratios and the geometric mean
    of JAX ÷ PyTorch."""
    if matrix.empty:
        return pd.DataFrame()
    frame = matrix.assign(kind=matrix.model.map(lambda m: kind_label(kinds.get(m, "unknown"))))
    rows = []
    for (kind, comparison), group in frame.groupby(["kind", "comparison"], sort=True):
        rows.append(
            {
                "kind": kind,
                "comparison": comparison,
                "configurations": len(group),
                "jax_wins": int((group.winner == "jax").sum()),
                "torch_wins": int((group.winner == "torch").sum()),
                "equivalent": int((group.winner == verdicts.EQUIVALENT).sum()),
                "undecided": int(
                    (
                        ~group.winner.map(tables.decided) & (group.winner != verdicts.EQUIVALENT)
                    ).sum()
                ),
                "geomean_ratio": float(np.exp(np.log(group.ratio).mean())),
                "min_ratio": float(group.ratio.min()),
                "max_ratio": float(group.ratio.max()),
            }
        )
    return pd.DataFrame(rows)


def _why_figures(analysis) -> list:
    items = []
    for model in sorted(analysis.breakdown.model.unique()):
        rows = analysis.breakdown[analysis.breakdown.model == model]
        order = why.category_order(rows.category)
        items.append(
            Figure(
                f"why_{model}",
                f"Where the time goes: {model_label(model)}",
                literal(
                    f"Profiled ms per call of {model_label(model)} by op category (mean over trials), per "
                    f"framework variant and batch size, on {analysis.devices}: an XLA fusion "
                    "whose ops span several categories is one kernel and counts under all of "
                    "them joined (convolution + normalisation); framework overhead is wall time "
                    "outside every op, to which an eager framework's profiler adds its own cost "
                    "per op. Where XLA ran ops on several threads at once, the bars add up to "
                    "more than the wall time."
                ),
                lambda _a, rows=rows, order=order: charts.breakdown_chart(rows, order),
            )
        )
    return items


def _energy_note(analysis) -> str:
    reasons = tables.energy_unavailable_reasons(analysis.meas)
    return "No energy was measured in this run" + (f" ({'; '.join(reasons)})." if reasons else ".")


COMPARISON = Section(
    "Comparison matrix",
    lambda a: sentences.matrix_intro(a.matrix),
    (
        Figure(
            "ratio_matrix",
            "JAX ÷ PyTorch throughput",
            "JAX images/s ÷ PyTorch's on {devices} (the estimated ratio over rounds paired by "
            "trial and pooled runs, else the ratio of medians); best modes (each framework's "
            "tuned arm, else its only one, else its fastest here, which calls no winner) and "
            "defaults (PyTorch eager vs JAX jit). Colour is log₂ of the "
            f"ratio; ≈ marks {verdicts.EQUIVALENT_WORDS}, ? inconclusive, (1 run) within one run.",
            ratio_heatmap("matrix"),
        ),
        Table(
            "ratio_matrix",
            "JAX ÷ PyTorch throughput ratio with 95% and 90% intervals and the verdict "
            "(`winner`: jax, torch, equivalent, inconclusive or within one run); `design` the "
            "runs × rounds behind it, `between_term` where its between-run term came from, "
            "`p_holm` the Holm-adjusted p-value, `runs_to_decide` roughly how many runs would "
            "decide an inconclusive one, `dropped_shared` rounds left out for contention.",
            lambda a: a.matrix,
            pooled("inference", ["throughput_img_s"]),
            drop=("device",),
        ),
    ),
    empty=empty("matrix"),
    empty_note="No configuration was measured with both frameworks in this run.",
)


WHY = Section(
    "Why",
    "Where each framework's time goes, per op category, and the parts that add up to the gap "
    "in every comparison with a measured one (10_inference with `profile: true`): each "
    "category with its sign, categories that either side ran fused in one kernel counted as "
    "one block on both sides, the time outside every profiled op, and, where XLA ran ops on "
    "several threads at once, the op time the wall clock counted once.",
    (
        Each(lambda a: [Note(literal(t)) for t in a.borrowed_line]),
        Each(lambda a: [Note(literal(t)) for t in a.why_lines]),
        Note(
            "No comparison with a winner has a profile on both sides.",
            when=lambda a: not a.why_lines,
        ),
        Each(_why_figures),
        Table(
            "op_breakdown",
            "Profiled ms per call by op category (mean over trials, so that the parts of a "
            "gap add up), its share of the side's summed profiled time, the profiled wall "
            "time per call, and whether a JAX profile leaves unnamed what XLA fused (one "
            "recorded before fusions were named).",
            lambda a: a.breakdown,
            records("profile", ["op_time_ms"]),
            drop=("device",),
        ),
        Table(
            "gaps",
            "Per comparison with a measured gap: each part's ms per call on the slower and "
            "the faster side and the difference, which add up to the two sides' profiled "
            "wall times and their gap; `merged` lists the categories a block holds, "
            "`assumed` marks a block merged because a JAX profile does not name its fusions.",
            lambda a: a.gaps,
            records("profile", ["op_time_ms"]),
            drop=("device",),
            when=nonempty("gaps"),
        ),
    ),
    empty=empty("breakdown"),
    empty_note=(
        "No cell of this run was profiled (10_inference's `profile` parameter), and no "
        "companion `<campaign>_why` run on this CPU model profiled one."
    ),
    name="why",
)


THROUGHPUT = Section(
    "Throughput scaling",
    "How many images per second each variant sustains as the batch grows (median over blocks "
    "of enqueued calls, one sync per block).",
    (
        Figure(
            "throughput_scaling",
            "Throughput vs batch size",
            "Median images/s over timed blocks of pipelined calls with its 95% bootstrap "
            "interval, per framework and mode, on {devices}; both axes logarithmic.",
            throughput("samples"),
        ),
    ),
    empty=empty("samples"),
    empty_note="No throughput was measured in this run.",
)


LATENCY = Section(
    "Latency at batch 1",
    "Per-call latency, every call synced and timed alone, at the smallest batch size measured "
    "(1 unless the campaign left it out).",
    (
        Figure(
            "latency_batch1",
            "Latency percentiles at the smallest batch",
            "p50, p95 and p99 of per-call latency (each call synchronised and timed alone) on "
            "{devices}, at batch size {latency_batches}.",
            lambda a: charts.latency_chart(a.latency),
        ),
        Table(
            "latency_batch1",
            "Latency percentiles (ms) at the smallest batch size.",
            lambda a: a.latency,
            records("inference", prefix="latency_"),
            drop=("device",),
        ),
    ),
    empty=empty("latency"),
    empty_note="No latency was measured in this run.",
)


MEMORY = Section(
    "Memory",
    "Peak device memory per batch size (torch max_memory_allocated, JAX peak_bytes_in_use, "
    "CPU peak RSS) and images/s per GB of that peak. PyTorch's GPU peak is reset before the "
    "timed calls; JAX's cannot be reset, so where compilation set a higher peak before them, "
    "bytes in use sampled through the timed calls stand in (runs before that rule hold the "
    "process's peak so far; each record's note says which).",
    (
        Figure(
            "memory_scaling",
            "Peak memory vs batch size",
            "Peak memory during the timed calls per framework and mode (JAX on a GPU: see the "
            "section's note), on {devices}; GB = 10⁹ bytes; both axes logarithmic.",
            lambda a: charts.by_batch(a.memory, "peak_mem_gb", "peak memory (GB)"),
        ),
        Figure(
            "memory_efficiency",
            "Memory efficiency",
            "Median throughput divided by peak memory (images/s per GB), on {devices}.",
            lambda a: charts.by_batch(a.memory, "img_s_per_gb", "images/s per GB"),
        ),
        Table(
            "memory",
            "Peak memory and memory efficiency per configuration.",
            lambda a: a.memory,
            records("inference", ["peak_mem_bytes"]),
            drop=("device",),
        ),
    ),
    empty=empty("memory"),
    empty_note="No peak memory was recorded in this run.",
)


COMPILE = Section(
    "Compile time and break-even",
    "JAX: AOT lowering plus XLA compilation; torch.compile: first call minus a steady call; "
    "eager: 0. Break-even is the number of images after which the faster side's extra "
    "compile time is paid back: (compile_faster − compile_other) ÷ (s/img other − s/img "
    "faster).",
    (
        Figure(
            "compile_time",
            "Compile time vs batch size",
            "Seconds spent compiling before the first measured call, per compiled mode, on "
            "{devices} (eager modes compile nothing and are left out).",
            lambda a: charts.by_batch(
                a.compile_times[a.compile_times.compile_s > 0], "compile_s", "compile time (s)"
            ),
            when=lambda a: (a.compile_times.compile_s > 0).any(),
            otherwise="Only eager modes ran, so nothing was compiled.",
        ),
        Table(
            "compile_time",
            "Compile time (s) per configuration.",
            lambda a: a.compile_times,
            records("inference", ["compile_s"]),
            drop=("device",),
        ),
        Table(
            "break_even",
            "Images (and calls) until the faster side's compile time is paid back against the "
            "other side; ∞: the slower side never pays back.",
            lambda a: a.break_even,
            records("inference", ["compile_s", "throughput_img_s"]),
            when=nonempty("break_even"),
            otherwise="No pair with compile times on both sides, so no break-even.",
        ),
    ),
    empty=empty("compile_times"),
    empty_note="No compile time was recorded in this run.",
)


ENERGY = Section(
    "Energy per image",
    "Energy counter (NVML total energy on GPUs, RAPL on CPUs) read around the throughput "
    "measurement, divided by the images processed.",
    (
        Figure(
            "energy_per_image",
            "Energy per image",
            "Joules per image over the throughput measurement on {devices}.",
            lambda a: charts.by_batch(a.energy, "energy_j_per_img", "joules per image"),
        ),
        Table(
            "energy",
            "Energy per image (J).",
            lambda a: a.energy,
            records("inference", ["energy_j_per_img"]),
            drop=("device",),
        ),
    ),
    empty=empty("energy"),
    empty_note=_energy_note,
)


KINDS = Section(
    "CNN vs Transformer",
    "Where each framework wins, by architecture.",
    (
        Figure(
            "cnn_vs_transformer",
            "Who wins, by architecture",
            "JAX ÷ PyTorch throughput with its 95% interval (as in the ratio matrix) per "
            "model and batch size, best modes and defaults, on {devices}; right of the "
            "dashed line JAX is faster.",
            lambda a: charts.kind_chart(a.matrix, a.kinds),
        ),
        Table(
            "by_architecture",
            "Wins, equivalences, undecided ratios and the geometric-mean JAX ÷ PyTorch ratio per architecture.",
            lambda a: a.kind_table,
            records("inference", ["throughput_img_s"]),
        ),
    ),
    empty=empty("matrix"),
    empty_note="No comparison to split by architecture.",
)


@per_analysis
def published(analysis):
    return published_table(analysis.matrix)


@per_analysis
def through_torchax(analysis):
    return torchax_table(analysis.meas)


PUBLISHED_SECTION = Section(
    "Beside published figures",
    "This run's best modes at batch 128 on a GPU beside the throughputs the 594Project study "
    "published for inference on an H100 NVL at batch 128, fp32 storage with each library at its "
    "defaults: PyTorch eager (cuDNN convolutions may use TF32, matmuls do not) and JAX jit (its "
    "default matmul precision, TF32 on such a GPU). Other GPUs (an H200 has the H100's compute "
    "and more memory bandwidth) and software versions: read the published JAX ÷ PyTorch ratio "
    "beside ours, not as a check. Ours ÷ published is given only for a run at the study's own "
    "setting (fwbench's `default` precision, PyTorch eager against JAX jit: "
    "params/gpu_reference.yaml); at fwbench's explicit precisions (fp32 with TF32 off, tf32, "
    "bf16) or its best modes it is left empty, since a ratio across settings says nothing.",
    (
        Table(
            "published",
            "Images/s per framework here and as published (`published_measured`, "
            "`published_device`, `published_precision`: what the study timed), both JAX ÷ "
            "PyTorch ratios, and ours ÷ published per framework where this run measured the "
            "study's setting (single trials here: within-run medians).",
            published,
            records("inference", ["throughput_img_s"]),
        ),
    ),
    when=nonempty(published),
)


TORCHAX = Section(
    "Through torchax",
    "PyTorch models run as JAX functions (10_inference's torchax mode): XLA compiles PyTorch's "
    "own graph, with no Flax twin. Each was first proven the same function as PyTorch eager in "
    "float64 (outputs within 1e-10 relative: a classifier's logits, an encoder's last hidden "
    "state); a model that failed the proof or could not be traced was not timed, and the table "
    "says why. A text or speech model's images/s are its inputs per second (token sequences, "
    "audio clips). These arms are never JAX's side of a ratio above.",
    (
        Table(
            "torchax",
            "Per model: the float64 proof (ok or skipped), the largest relative output difference, "
            "why a model was not timed, and its images/s per batch size.",
            through_torchax,
            records("inference", ["float64_max_rel_err", "throughput_img_s"]),
        ),
    ),
    when=nonempty(through_torchax),
)


# what a native Flax port buys: its own module, as the comparison it makes is its own
THREE_WAY = inference_three_way.SECTION
# each framework's candidates and the fastest: what a tuning run's picks come from
TUNING = inference_tuning.SECTION
EXPERT = inference_tuning.EXPERT

SECTIONS = (
    COMPARISON,
    PUBLISHED_SECTION,
    TORCHAX,
    THREE_WAY,
    TUNING,
    EXPERT,
    WHY,
    THROUGHPUT,
    LATENCY,
    MEMORY,
    COMPILE,
    ENERGY,
    KINDS,
)
