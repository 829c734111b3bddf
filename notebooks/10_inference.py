# %% [markdown]
# # 10 · Inference: latency, throughput, memory, compile time, energy and FLOP/s
#
# **Purpose.** For one model on one framework, mode and precision, measure what users ask about:
# per-call latency (every call synced and timed alone), throughput over pipelined calls (one sync
# per block), peak memory, compile time (JAX lowering and XLA compile apart; torch.compile's first
# call minus a steady call), energy per image where a counter exists, and achieved FLOP/s (FLOPs
# from the framework's own counter × median throughput). MFU divides that by the device's ceiling,
# the best 02_calibrate measured through any framework at that precision; the analysis (20_analysis)
# computes it, so that this notebook never reads another cell's outputs.
# The weights are torchvision's, ported to Flax (`fwbench.models.build_pair`), so both frameworks
# run the same function (01_validation proves it). Inputs are seeded random batches already on the
# device, rotated. A batch size that runs out of memory is recorded as `oom` and the loop goes on.
# Each framework runs at its defaults or at a documented best practice (`fwbench run --help` lists
# the modes): PyTorch eager, torch.compile (default, max-autotune, freezing; one static graph per
# batch size, or with `dynamic_shapes` one graph for any batch size), channels_last; JAX jit
# of the stock Flax layers or of the twin's expert form (`jit-expert`: convolutions written as a
# JAX engineer writes them for the device, proven equal in float64), under a declared XLA option
# set (`xla_options`). Modes `tuned` and `jit-tuned` run what a tuning run chose for each batch
# size, read from the committed selection file `tuning_path`; every record says what ran.
# `framework: jax, mode: torchax` runs PyTorch's own module as a JAX function instead (any model,
# no twin needed), once a float64 proof against PyTorch eager has passed; a model torchax cannot
# trace is a `skipped` record naming why. It never stands for JAX in a JAX-vs-PyTorch ratio.
# A text or speech model (transformers' BERT-base, ViT-base and wav2vec2-base from their configs:
# `hf_bert_base`, `hf_vit_base`, `hf_wav2vec2_base`) takes `seq_len` token ids or audio samples
# per input instead of an image, and its "images" per second are inputs per second.
#
# **Run it:** `fwbench run params/smoke.yaml --only '10_inference/*'`
#
# **Runtime:** 20 s to 1 min per cell on a 2-core CPU with the smoke stop rules (ViT-B/16 is the
# slowest); 1 to 5 min per cell on an H100 with batch sizes up to 256 and ≥ 5 s per measurement.

# %% tags=["parameters"]
model = "resnet50"
framework = "torch"  # one of: torch, jax
device = "auto"  # one of: auto, cpu, cuda, mps, tpu
precision = "fp32"  # one of: fp32, tf32, bf16, fp16, default
mode = "default"  # one of: default, eager, compile, compile-max-autotune, compile-freeze, tuned, jit, jit-expert, jit-tuned, torchax
# JAX jit and jit-expert: a declared XLA option set (measure/compiler.py)
xla_options = "default"  # one of: default, ynn-dots-only, ynn-off, ynn-fused, vector-512, onednn, autotune-off, no-triton-gemm
tuning_path = ""  # modes tuned and jit-tuned: the selection file `fwbench best-modes` wrote
channels_last = False
# torch.compile modes: one graph for any batch size (dynamic=True); else one static graph per size
dynamic_shapes = False
cudnn_benchmark = False
batch_sizes = [1, 8]
image_size = 224
seq_len = 0  # a text or speech model's input: tokens or audio samples (0: the model's own length)
min_iters = 5
min_seconds = 0.5
warmup = 3
block_size = 5
threads = 0  # cores (and intra-op threads) to run on; 0: all the machine gives
seed = 0
profile = False
aa_copy = 0  # 1: an A/A duplicate arm (the runner sets it for a step with aa_copy); one of: 0, 1

# %%
import altair as alt

from fwbench import vocab
from fwbench.families.inference import bench
from fwbench.measure import device as fw_device
from fwbench.measure import precision as fw_precision
from fwbench.measure.timing import StopRule
from fwbench.models import build_pair, build_torch, get_spec
from fwbench.results.records import Recorder

# first: XLA sizes its thread pool from the cores the process may use when its backend starts
threads = fw_device.limit_threads(threads)
spec = get_spec(model)
# an image's pixels a side, or a text or speech model's tokens or samples
size = image_size if spec.inputs == "image" else seq_len or spec.image_size
mode = vocab.resolve_mode(framework, mode)  # "default": torch eager, JAX jit
kind = fw_device.resolve_device(framework, device)
name = fw_device.device_name(framework, kind)
settings = fw_precision.configure(framework, precision)
# what runs at each batch size: the campaign's mode, or for a tuned mode the tuning run's pick
picks = bench.picks(
    framework, mode, batch_sizes, channels_last=channels_last and spec.kind == "cnn",
    dynamic_shapes=dynamic_shapes, xla_options=xla_options, tuning_path=tuning_path,
    device_name=name, precision=precision,
    threads=threads, model=model, image_size=image_size,
)  # fmt: skip
if framework == "torch":
    import torch

    torch.backends.cudnn.benchmark = cudnn_benchmark
    settings["torch.backends.cudnn.benchmark"] = cudnn_benchmark
    torch_model = build_torch(model, seed=seed, image_size=image_size)
    sides = bench.Sides(lambda pick: bench.TorchSide(
        bench.own_copy(torch_model, picks), kind, precision, pick["mode"], pick["channels_last"],
        pick.get("dynamic_shapes", False),
    ))  # fmt: skip
elif mode == "torchax":
    # PyTorch's own graph on XLA (any model build_torch makes): proven the same function as
    # PyTorch eager in float64 before anything is timed; a model torchax cannot trace is skipped
    torch_model = build_torch(model, seed=seed, image_size=image_size)
    proof = bench.torchax_proof(torch_model, size, seed, spec.inputs)
    sides = bench.Sides(lambda pick: bench.TorchaxSide(torch_model, kind, precision))
    settings["torchax"] = bench.TorchaxSide.GIVEN
    print(f"float64 proof: {proof}")
else:
    # the JAX side takes its weights from the same seeded torchvision model, ported
    torch_model, flax_model = build_pair(model, seed=seed, image_size=image_size)
    sides = bench.Sides(lambda pick: bench.JaxSide(
        flax_model, kind, precision, pick["layers"], pick["xla_options"]
    ))  # fmt: skip
    del torch_model
print(f"{model} · {framework} {mode} · {precision} · {name}")
settings

# %%
rule = StopRule(min_iters=min_iters, min_seconds=min_seconds)
rec = Recorder(
    "inference",
    model=model,
    framework=framework,
    mode=mode,
    device=kind,
    device_name=name,
    precision=precision,
    extra={
        "settings": settings,
        "channels_last": bool(
            channels_last and spec.kind == "cnn" and framework == "torch" and mode != "tuned"
        ),
        # only where set, so the records of every cell made before this choice read the same
        **({"dynamic_shapes": True} if bench.own_dynamic(mode, picks) else {}),
        "xla_options": xla_options if framework == "jax" else None,
        "image_size": image_size,
        # only for a text or speech model, so an image model's records are unchanged
        **({"inputs": spec.inputs, "seq_len": size} if spec.inputs != "image" else {}),
        "stop_rule": {"min_iters": min_iters, "min_seconds": min_seconds, "warmup": warmup},
        # only on copies, so the records of every cell made before A/A copies are unchanged
        **({"aa_copy": 1} if aa_copy else {}),
    },
)
results = []
if mode == "torchax":
    rec.add(
        "float64_max_rel_err",
        proof["error"],
        "ratio",
        status="skipped" if proof["failure"] else "ok",
        error=proof["failure"],
    )
proven = mode != "torchax" or not proof["failure"]
for bs in batch_sizes if proven else []:
    side = sides.get(picks[bs])
    result = bench.run_batch_size(
        side,
        bs,
        size,
        rule,
        warmup=warmup,
        block_size=block_size,
        seed=seed,
        inputs=spec.inputs,
    )
    results.append(result)
    with rec.extras(**bench.pick_extra(picks[bs])):
        bench.add_records(rec, result)
    print(f"batch {bs}: {result.status} ({bench.pick_words(framework, picks[bs])})")

# %% [markdown]
# ## Results by batch size

# %%
table = (
    rec.frame()
    .pivot_table(index="batch_size", columns="metric", values="value", aggfunc="first")
    .reindex(
        columns=[
            "latency_p50_ms",
            "latency_p95_ms",
            "latency_p99_ms",
            "throughput_img_s",
            "peak_mem_bytes",
            "compile_s",
            "achieved_tflops",
            "energy_j_per_img",
        ]
    )
)
table

# %%
ok = rec.frame().query("status == 'ok'")
lat = ok[ok.metric.isin(["latency_p50_ms", "latency_p95_ms", "latency_p99_ms"])]
thr = ok[ok.metric == "throughput_img_s"]
latency_chart = (
    alt.Chart(lat)
    .mark_line(point=True)
    .encode(
        x=alt.X("batch_size:O", title="batch size"),
        y=alt.Y("value:Q", title="latency (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("metric:N", title=None),
        tooltip=["batch_size", "metric", "value", "ci_low", "ci_high"],
    )
    .properties(title="Latency per call", width=260, height=200)
)
throughput_chart = (
    alt.Chart(thr)
    .mark_bar()
    .encode(
        x=alt.X("batch_size:O", title="batch size"),
        y=alt.Y("value:Q", title="images/s (median block)"),
        tooltip=["batch_size", "value", "ci_low", "ci_high", "n"],
    )
    .properties(title="Throughput", width=260, height=200)
)
(latency_chart | throughput_chart).properties(
    title=f"{model} · {framework} {mode} · {precision} · {name}"
)

# %% [markdown]
# ## Where the time goes (`profile=True`)
# Every batch size that fit, profiled for a few calls: a trace per batch size saved next to this
# executed notebook, each op's time in the categories both frameworks share
# (`fwbench.families.inference.op_categories`), and the framework overhead: wall time minus the
# union of op intervals. Records: family `profile`, metric `op_time_ms` per category (ms per call,
# `extra.category`; a category joined by " + " is a fused kernel that spans several), which the
# analysis's "Why" section subtracts between the frameworks.

# %%
if profile:
    from fwbench.families.inference.profiling import profile_side

    found = None
    for batch_size in [r.batch_size for r in results if r.status == "ok"]:
        found = profile_side(
            sides.get(picks[batch_size]), framework, batch_size, size, seed, spec.inputs
        )
        for category, ms in found.rows():
            rec.add(
                "op_time_ms",
                ms,
                "ms",
                family="profile",
                batch_size=batch_size,
                extra={
                    "category": category,
                    "wall_ms": found.wall_ms,
                    "busy_ms": found.busy_ms,
                    "calls": found.calls,
                    # whether XLA's fusions were read op by op: a profile that names them splits
                    # its fused blocks; one that does not is read as one block per fusion kind
                    "fusions_recorded": found.fusions_recorded,
                },
            )
    if found is not None:  # the largest batch size that fit
        display(found.ops.head(15))
        display(found.chart())

# %%
rec.emit()
