"""A synthetic campaign for the analysis and report tests: five runs written as executed notebooks.

``build_synthetic`` writes executed-notebook-like files for five runs of a campaign; one
configuration's throughput drops from ``BASELINE_CENTER`` to its ``CENTERS`` value at the fourth
(``BASELINE_RUN``), so the regression detector has two points on each side of the change and one
more before it. tests/test_analysis.py ingests them and checks the computations,
tests/test_report.py builds the whole report from them.
"""

import json

import nbformat
import numpy as np

from fwbench.results.records import RECORDS_MIME, Recorder
from fwbench.vocab import OVERHEAD

CAMPAIGN = "synth"
EARLIER_RUNS = ("20251229T000000Z", "20251230T000000Z", "20251231T000000Z")
BASELINE_RUN, CURRENT_RUN = "20260101T000000Z", "20260102T000000Z"
DEVICE_NAME = "Test CPU 9000"
# every record says so, whatever the machine running the tests has
THREADS = 2
FLOPS_PER_IMG = {"resnet50": 8.2e9, "vit_b_16": 35.1e9}
BYTES_PER_IMG = {"resnet50": 1.0e8, "vit_b_16": 2.0e8}
COMPILE_S = {"eager": 0.0, "compile": 20.0, "jit": 5.0}
PEAK_TFLOPS = {"torch": 1.0, "jax": 1.2}  # what 02_calibrate measured in both synthetic runs
TRAIN_FLOPS_PER_STEP = 3 * 8 * FLOPS_PER_IMG["resnet50"]  # forward + backward, batch 8
# Median images/s in the current run per (model, framework, mode, batch size). ViT-B/16 at batch 8
# is built as an exact tie between JAX jit and torch.compile (same samples, permuted).
CENTERS = {
    ("resnet50", "torch", "eager", 1): 40.0,
    ("resnet50", "torch", "compile", 1): 45.0,
    ("resnet50", "jax", "jit", 1): 60.0,
    ("resnet50", "torch", "eager", 8): 100.0,
    ("resnet50", "torch", "compile", 8): 120.0,
    ("resnet50", "jax", "jit", 8): 180.0,
    ("vit_b_16", "torch", "eager", 1): 20.0,
    ("vit_b_16", "torch", "compile", 1): 22.0,
    ("vit_b_16", "jax", "jit", 1): 15.0,
    ("vit_b_16", "torch", "eager", 8): 50.0,
    ("vit_b_16", "torch", "compile", 8): 55.0,
    ("vit_b_16", "jax", "jit", 8): None,  # the tie: torch.compile's samples, permuted
}
REGRESSED = ("resnet50", "jax", "jit", 8)
BASELINE_CENTER = 260.0  # the regressed configuration's throughput in the earlier runs


QUIET = {"other_cpu_frac": 0.01, "steal_frac": 0.0, "cpus": 2, "shared": False}
SHARED = {"other_cpu_frac": 0.31, "steal_frac": 0.02, "cpus": 2, "shared": True}


def write_cell(
    run_dir,
    notebook,
    slug,
    rows,
    *,
    status="ok",
    error=None,
    parameters=None,
    retried=False,
    retry_env=None,
    trial=0,
    contention=None,
):
    folder = run_dir / notebook
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = (
        [nbformat.v4.new_output("display_data", data={RECORDS_MIME: rows})] if rows else []
    )
    nb.cells = [cell]
    nb.metadata["fwbench"] = {
        "run_id": run_dir.name,
        "campaign": CAMPAIGN,
        "notebook": notebook,
        "cell": slug,
        "trial": trial,
        "status": status,
        "error": error,
        "duration_s": 1.0,
        "parameters": parameters or {},
        "retried": retried,
        "retry_env": retry_env or {},
        "load_average": {"before": [0.5, 0.4, 0.3], "after": [1.9, 0.8, 0.4], "cpus": 2},
        "contention": contention or QUIET,
    }
    nbformat.write(nb, str(folder / f"{slug}.ipynb"))


def inference_rows(rng, model, framework, mode, batch_size, center, throughput=None):
    rec = Recorder(
        "inference",
        model=model,
        framework=framework,
        mode=mode,
        device="cpu",
        threads=THREADS,
        device_name=DEVICE_NAME,
        precision="fp32",
        batch_size=batch_size,
    )
    thr = np.round(rng.normal(center, 0.02 * center, 12), 3) if throughput is None else throughput
    # quartiles stand in for the bootstrap interval: the analysis only reads the two ends
    lo, hi = np.percentile(thr, [25, 75])
    extra = {"channels_last": False} if framework == "torch" else {}
    rec.add(
        "throughput_img_s",
        float(np.median(thr)),
        "img/s",
        n=len(thr),
        ci_low=lo,
        ci_high=hi,
        extra={**extra, "samples": thr.tolist()},
    )
    lat = np.round(batch_size / thr * 1e3 * rng.uniform(0.95, 1.3, len(thr)), 5)
    llo, lhi = np.percentile(lat, [25, 75])
    rec.add(
        "latency_p50_ms",
        float(np.median(lat)),
        "ms",
        n=len(lat),
        ci_low=llo,
        ci_high=lhi,
        extra={**extra, "samples": lat.tolist()},
    )
    for q in (95, 99):
        rec.add(f"latency_p{q}_ms", float(np.percentile(lat, q)), "ms", n=len(lat), extra=extra)
    rec.add("peak_mem_bytes", 2e8 + 5e7 * batch_size, "bytes", extra=extra)
    rec.add("compile_s", COMPILE_S[mode], "s", extra=extra)
    rec.add("energy_j_per_img", None, "J", extra={**extra, "source_or_reason": "no RAPL access"})
    flop_extra = {
        "flops_per_img": FLOPS_PER_IMG[model],
        "bytes_per_img": BYTES_PER_IMG[model] if framework == "jax" else None,
    }
    achieved = FLOPS_PER_IMG[model] * float(np.median(thr)) / 1e12
    rec.add("achieved_tflops", achieved, "TFLOP/s", extra={**extra, **flop_extra})
    # a profile that agrees with the speed: ms per call split 70/20/10 between the model's main
    # op category, elementwise ops and the framework overhead
    call_ms = 1e3 * batch_size / float(np.median(thr))
    main = "convolution" if model == "resnet50" else "matmul/linear"
    for category, share in ((main, 0.7), ("elementwise/activation", 0.2), (OVERHEAD, 0.1)):
        rec.add(
            "op_time_ms",
            share * call_ms,
            "ms",
            family="profile",
            extra={**extra, "category": category, "wall_ms": call_ms},
        )
    return rec.rows, thr


def calibration_rows():
    rows = []
    for framework, bandwidth in (("torch", 20.0), ("jax", 18.0)):
        peak = PEAK_TFLOPS[framework]
        rec = Recorder(
            "calibration",
            framework=framework,
            device="cpu",
            threads=THREADS,
            device_name=DEVICE_NAME,
            precision="fp32",
        )
        rec.add(
            "peak_matmul_tflops",
            peak,
            "TFLOP/s",
            n=10,
            ci_low=peak * 0.98,
            ci_high=peak * 1.02,
            extra={"size": 1024},
        )
        rec.add(
            "copy_bandwidth_gbs",
            bandwidth,
            "GB/s",
            n=10,
            ci_low=bandwidth * 0.97,
            ci_high=bandwidth * 1.03,
        )
        rows.append((framework, rec.rows))
    return rows


def build_run(out, run_id, seed, regressed_center=None):
    """One run of the synthetic campaign; returns the throughput samples written per config."""
    rng = np.random.default_rng(seed)
    run_dir = out / CAMPAIGN / run_id
    run_dir.mkdir(parents=True)
    env = {
        "host": "bench-host",
        "python": "3.11.9",
        "cpu_model": DEVICE_NAME,
        "cpu_count": 2,
        "packages": {"torch": "2.9.0", "jax": "0.10.2"},
        "env_vars": {"XLA_FLAGS": None},
        "git_sha": "abc1234",
    }
    (run_dir / "manifest.json").write_text(
        json.dumps(
            {
                "campaign": CAMPAIGN,
                "run_id": run_id,
                "started_at": f"{run_id[:8]}T00:00:00+00:00",
                "finished_at": f"{run_id[:8]}T00:10:00+00:00",
                "environment": env,
                "cells": {},
            }
        )
    )
    for framework, rows in calibration_rows():
        write_cell(run_dir, "02_calibrate", f"framework={framework}", rows)
    written = {}
    for model in ("resnet50", "vit_b_16"):
        for framework, mode in (("torch", "eager"), ("torch", "compile"), ("jax", "jit")):
            rows = []
            for bs in (1, 8):
                key = (model, framework, mode, bs)
                center = CENTERS[key]
                given = None
                if center is None:
                    given = rng.permutation(written[(model, "torch", "compile", bs)])
                if key == REGRESSED and regressed_center:
                    center = regressed_center
                new, thr = inference_rows(rng, model, framework, mode, bs, center, given)
                rows += new
                written[key] = thr
            if (model, framework, mode) == ("resnet50", "torch", "eager"):
                oom = Recorder(
                    "inference",
                    model=model,
                    framework=framework,
                    mode=mode,
                    device="cpu",
                    threads=THREADS,
                    device_name=DEVICE_NAME,
                    precision="fp32",
                )
                oom.add(
                    "cell_status",
                    None,
                    "",
                    status="oom",
                    batch_size=64,
                    error="OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
                )
                rows += oom.rows
            params = {
                "model": model,
                "framework": framework,
                "mode": mode,
                "batch_sizes": [1, 8],
                "min_iters": 20,
                "min_seconds": 0.5,
            }
            write_cell(
                run_dir,
                "10_inference",
                f"framework={framework}__mode={mode}__model={model}",
                rows,
                parameters=params,
            )
    write_cell(
        run_dir,
        "10_inference",
        "framework=jax__mode=jit__model=efficientnet_b0",
        [],
        status="failed",
        parameters={"model": "efficientnet_b0", "framework": "jax"},
        error="Traceback (most recent call last):\n\x1b[0;31mXlaRuntimeError\x1b[0m: "
        "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered\n",
    )
    write_cell(
        run_dir,
        "10_inference",
        "framework=jax__mode=jit__model=mobilenet_v3_small",
        [],
        parameters={"model": "mobilenet_v3_small", "framework": "jax"},
        retried=True,
        retry_env={"XLA_FLAGS": "--xla_gpu_autotune_level=0"},
    )
    for framework, mode, step_ms in (("torch", "eager", 100.0), ("jax", "jit", 80.0)):
        train = Recorder(
            "training",
            model="resnet50",
            framework=framework,
            mode=mode,
            device="cpu",
            threads=THREADS,
            device_name=DEVICE_NAME,
            precision="fp32",
            batch_size=8,
        )
        steps_ms = step_ms + np.linspace(-2, 2, 11)
        train.add("step_time_p50_ms", step_ms, "ms", n=11, extra={"samples": steps_ms.tolist()})
        train.add(
            "throughput_img_s",
            8e3 / step_ms,
            "img/s",
            n=11,
            extra={"samples": (8e3 / steps_ms).tolist()},
        )
        train.add(
            "achieved_tflops",
            TRAIN_FLOPS_PER_STEP / (step_ms / 1e3) / 1e12,
            "TFLOP/s",
            extra={"flops_per_step": TRAIN_FLOPS_PER_STEP},
        )
        if framework == "torch":  # the torch cell also ran both checks
            train.add(
                "loss_parity_max_rel",
                2e-7,
                "ratio",
                framework="jax",
                mode="jit",
                extra={"losses": {"torch": [2.3, 2.1, 1.9], "jax": [2.3, 2.1, 1.9000004]}},
            )
            for fw, top1 in (("torch", 91.0), ("jax", 90.0)):
                train.add(
                    "val_top1",
                    top1,
                    "%",
                    framework=fw,
                    extra={"val_top1_by_epoch": [10.0, 60.0, top1]},
                )
                train.add(
                    "train_loss_final",
                    0.3,
                    "nats",
                    framework=fw,
                    n=2,
                    extra={"train_loss": [2.3, 1.0, 0.4, 0.2]},
                )
        write_cell(run_dir, "11_training", f"framework={framework}__model=resnet50", train.rows)
    mem = Recorder(
        "memory",
        model="resnet50",
        framework="torch",
        device="cpu",
        threads=THREADS,
        device_name=DEVICE_NAME,
        precision="fp32",
        batch_size=8,
    )
    for method, peak in (("none", 9e8), ("checkpoint", 5e8)):
        mem.add("peak_mem_bytes", peak, "bytes", mode=method)
        mem.add("iter_time_ms", 300.0 if method == "none" else 380.0, "ms", mode=method)
    write_cell(run_dir, "12_memory", "framework=torch__model=resnet50", mem.rows, contention=SHARED)
    return written


def build_synthetic(tmp_path):
    """Five runs (the last two regressed on one configuration); returns the folder and the
    current run's throughput samples per configuration."""
    out = tmp_path / "executed"
    for seed, run_id in enumerate(EARLIER_RUNS, start=10):
        build_run(out, run_id, seed=seed, regressed_center=BASELINE_CENTER)
    build_run(out, BASELINE_RUN, seed=1)
    current = build_run(out, CURRENT_RUN, seed=2)
    return out, current


def expected_ratio(current, model, batch_size, comparison):
    """JAX ÷ PyTorch from the written samples with plain numpy medians."""
    jax = np.median(current[(model, "jax", "jit", batch_size)])
    if comparison == "defaults":
        torch = np.median(current[(model, "torch", "eager", batch_size)])
    else:
        torch = max(
            np.median(current[(model, "torch", m, batch_size)]) for m in ("eager", "compile")
        )
    return jax / torch


# The figures a report of the synthetic campaign draws, in the order of its sections.
FIGURES = [
    "ratio_matrix",
    "candidates",
    "why_resnet50",
    "why_vit_b_16",
    "throughput_scaling",
    "latency_batch1",
    "memory_scaling",
    "memory_efficiency",
    "compile_time",
    "roofline_1",
    "cnn_vs_transformer",
    "training_ratio_matrix",
    "training_throughput",
    "training_parity",
    "training_convergence",
    "memory_methods",
]
