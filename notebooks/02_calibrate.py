# %% [markdown]
# # 02 · Calibration: the device's real ceilings, measured through each framework
#
# **Purpose.** The roofline and MFU divide achieved FLOP/s by a ceiling. Datasheet peaks are
# optimistic and ignore the framework's own kernels, so we measure two ceilings on the same device,
# through the same framework and precision as the benchmarks: peak matmul FLOP/s (large square
# matmuls; on GPU sizes that fill the chip) and device memory bandwidth (an elementwise `x + 1`,
# counting bytes read plus written). Records (family `calibration`) feed the MFU and the roofline
# that the analysis (20_analysis) computes.
#
# **Run it:** `fwbench run params/smoke.yaml --only '02_calibrate/*'`
#
# **Runtime:** about 15 s per cell on a 2-core CPU with the smoke sizes; about 1 min on an H100 with
# sizes up to 16384. The timer check (PyTorch, fp32 only) adds about 20 s on CPU.

# %% tags=["parameters"]
framework = "torch"  # one of: torch, jax
device = "auto"  # one of: auto, cpu, cuda, mps, tpu
precision = "fp32"  # one of: fp32, tf32, bf16, fp16
matmul_sizes = [512, 1024]
copy_mib = 64
min_iters = 10
min_seconds = 1.0
threads = 0  # cores (and intra-op threads) to run on, as in 10_inference; 0: all the machine gives
timer_check = True  # PyTorch fp32 cells: our timer vs torch.utils.benchmark on a real forward
timer_check_model = "resnet50"
timer_check_batch = 8
timer_check_image_size = 112  # 224 on a GPU; 112 keeps a CPU call near 0.3 s
timer_check_rounds = 6

# %%
import altair as alt
import pandas as pd

from fwbench.families.calibration.ceilings import host_device_bandwidth, measure_ceilings
from fwbench.measure import device as fw_device
from fwbench.measure import precision as fw_precision
from fwbench.measure.timing import StopRule
from fwbench.results.records import Recorder

# first: XLA sizes its thread pool from the cores the process may use when its backend starts;
# a one-core configuration is placed against one core's ceilings
threads = fw_device.limit_threads(threads)
kind = fw_device.resolve_device(framework, device)
settings = fw_precision.configure(framework, precision)
name = fw_device.device_name(framework, kind)
ceilings = measure_ceilings(
    framework, kind, precision, matmul_sizes, copy_mib, StopRule(min_iters, min_seconds)
)
print(f"{framework} on {name} ({kind}), {precision}, {threads} threads: {settings}")

# %% [markdown]
# ## Matmul throughput by size
# The ceiling is the best median over the sizes tried: small sizes under-fill the device, so the
# largest sizes usually win. Its interval comes from the bootstrap CI of the median call time.

# %%
matmul = pd.DataFrame(ceilings["matmul"])
best = matmul.loc[matmul.tflops.idxmax()]
alt.Chart(matmul).mark_line(point=True).encode(
    x=alt.X("size:Q", title="square matmul size n"),
    y=alt.Y("tflops:Q", title="TFLOP/s (2n³ / median time)"),
    tooltip=["size", "tflops", "ci_low", "ci_high", "n"],
).properties(title=f"{framework} {precision} matmul on {name}", width=420, height=220)

# %%
rec = Recorder(
    "calibration",
    framework=framework,
    mode="jit" if framework == "jax" else "eager",
    device=kind,
    device_name=name,
    precision=precision,
)
rec.add(
    "peak_matmul_tflops",
    best.tflops,
    "TFLOP/s",
    n=int(best.n),
    ci_low=best.ci_low,
    ci_high=best.ci_high,
    extra={"size": int(best["size"]), "all_sizes": ceilings["matmul"], "settings": settings},
)
copy = ceilings["copy"]
rec.add(
    "copy_bandwidth_gbs",
    copy["gbs"],
    "GB/s",
    n=copy["n"],
    ci_low=copy["ci_low"],
    ci_high=copy["ci_high"],
    extra={"bytes_moved": copy["bytes"], "op": "x + 1 (read + write)"},
)
# the memory family's swap plans move activations between host and device memory: on a GPU,
# pinned copies each way (torch); a CPU has no device memory, so nothing is measured there
transfer = (
    host_device_bandwidth(copy_mib, StopRule(min_iters, min_seconds))
    if (framework == "torch" and kind == "cuda")
    else None
)
for direction, measured in (transfer or {}).items():
    rec.add(
        f"{direction}_bandwidth_gbs",
        measured["gbs"],
        "GB/s",
        n=measured["n"],
        ci_low=measured["ci_low"],
        ci_high=measured["ci_high"],
        extra={"bytes_moved": measured["bytes"], "op": f"pinned {direction} copy"},
    )
rec.frame()[["metric", "value", "unit", "ci_low", "ci_high"]]

# %% [markdown]
# ## Does our timer read what torch.utils.benchmark reads?
# DESIGN.md times every call alone after a warm-up that runs until times settle, and reports the
# median. Here that timer and torch's own `Timer.blocked_autorange` take turns timing the same
# eval forward, in interleaved rounds so that a burst of stolen CPU time lands on both alike; the
# medians over all rounds should agree within 5%. The contention reading says whether the machine
# was quiet enough for the answer to count.

# %%
if timer_check and framework == "torch" and precision == "fp32":
    from fwbench.families.calibration.timer_check import check_on_torch_model

    agreement = check_on_torch_model(
        timer_check_model,
        kind,
        timer_check_batch,
        timer_check_image_size,
        rounds=timer_check_rounds,
    )
    print(agreement.verdict())
    rec.add(
        "timer_ratio_vs_torch_benchmark",
        agreement.ratio,
        "ratio",
        n=agreement.ours_n,
        model=timer_check_model,
        batch_size=timer_check_batch,
        extra={**agreement.as_dict(), "image_size": timer_check_image_size},
    )
else:
    print("timer check: only on PyTorch fp32 cells, and only when timer_check is on")

# %%
rec.emit()
