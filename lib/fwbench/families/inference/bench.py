"""Inference benchmark for one model on one framework: what notebooks/10_inference.py runs.

Both sides get the same ported weights (``models.build_pair``) and the same seeded random batches,
placed on the device before timing and rotated. Each batch size yields latency (every call synced),
throughput (blocks of enqueued calls), peak memory, energy, compile time and achieved FLOP/s.
A batch size that runs out of memory yields an ``oom`` result and the loop goes on.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np

from fwbench import vocab
from fwbench.measure import compiler, flops, precision, relay
from fwbench.measure import device as fw_device
from fwbench.measure.meters import measure_energy, measure_peak_memory
from fwbench.measure.timing import (
    StopRule,
    first_call_overhead,
    measure_latency,
    measure_throughput,
)

N_ROTATING_BATCHES = 3


@dataclass
class BatchResult:
    batch_size: int
    status: str = "ok"
    error: str | None = None
    latency: dict = field(default_factory=dict)  # fwbench.measure.stats.summarize of ms
    latency_ms: np.ndarray | None = None
    throughput_img_s: np.ndarray | None = None  # one value per block
    throughput: dict = field(default_factory=dict)
    peak_mem_bytes: int | None = None
    peak_mem_source: str = ""
    energy_j_per_img: float | None = None
    energy_note: str = ""
    compile_s: float | None = None
    lower_s: float | None = None
    xla_compile_s: float | None = None
    flops_per_img: float | None = None
    bytes_per_img: float | None = None
    warmup_stable: bool = True
    # what ran (``side.ran``): compiler settings, layers and the kernel mix, in every record
    ran: dict = field(default_factory=dict)
    # the throughput blocks' CPU seconds over wall seconds, and the share stolen meanwhile
    cpu_per_wall: np.ndarray | None = None
    steal_frac: float | None = None


def is_oom(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    markers = ("OutOfMemory", "out of memory", "RESOURCE_EXHAUSTED", "can't allocate memory")
    return isinstance(exc, MemoryError) or any(m in text for m in markers)


class TorchSide:
    def __init__(
        self, model, device: str, prec: str, mode: str, channels_last: bool, dynamic: bool = False
    ):
        import torch

        mode = vocab.resolve_mode("torch", mode)
        if mode in vocab.TUNED_MODES:
            raise ValueError("a tuned mode is resolved to a concrete one before a side is built")
        self.device, self.mode = device, mode
        self.channels_last = channels_last
        # compiled for any batch size (torch.compile's dynamic=True), else one static graph per
        # batch size: never dynamo's automatic switch after a second shape, which would make a
        # batch size's graph depend on the batch sizes a cell ran before it
        self.dynamic = bool(dynamic) and mode != "eager"
        self.dtype = precision.torch_dtype(prec)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        model = model.to(device=device, dtype=self.dtype, memory_format=self.memory_format).eval()
        self.model = model
        if mode == "eager":
            self.forward_fn = model
        else:
            compile_mode = "max-autotune" if mode == "compile-max-autotune" else "default"
            torch._dynamo.reset()
            self.forward_fn = torch.compile(model, mode=compile_mode, dynamic=self.dynamic)

    def inputs(self, batches: list[np.ndarray]):
        import torch

        # token ids stay integers; only an image batch has a memory format
        return [
            torch.from_numpy(b)
            .to(device=self.device, dtype=self.dtype if b.dtype.kind == "f" else None)
            .contiguous(
                memory_format=self.memory_format if b.ndim == 4 else torch.contiguous_format
            )
            for b in batches
        ]

    def __call__(self, x):
        import torch

        with torch.inference_mode():
            return self.forward_fn(x)

    def sync(self, _out):
        fw_device.torch_sync(self.device)

    def prepare(self, x, result: BatchResult) -> None:
        """Count FLOPs and, for torch.compile, time the first call minus a steady call (inductor
        compiles on it, with freezing switched on for ``compile-freeze`` alone)."""
        import torch

        result.flops_per_img = flops.torch_forward_flops(self.model, x) / x.shape[0]
        result.ran = self.ran()
        if self.mode == "eager":
            result.compile_s = 0.0
            return
        with torch._inductor.config.patch(freezing=self.mode == "compile-freeze"):
            result.compile_s = first_call_overhead(lambda: self(x), self.sync)

    def ran(self) -> dict:
        """What this side runs: its mode, memory format, shapes and inductor's freezing."""
        import torch

        return {
            "mode": self.mode,
            "channels_last": bool(self.channels_last),
            "dynamic_shapes": self.dynamic,
            "inductor_freezing": self.mode == "compile-freeze",
            "mkldnn": bool(torch.backends.mkldnn.is_available()),
        }


class JaxSide:
    # the NCHW host batches, reordered to the layout the function takes: a Flax twin's is NHWC
    INPUT_AXES = (0, 2, 3, 1)

    def __init__(
        self,
        flax_model,
        device: str,
        prec: str,
        layers: str = "stock",
        xla_options: str = compiler.DEFAULT,
    ):
        from flax import nnx

        from fwbench.models import conv

        graphdef, state = nnx.split(conv.use_implementation(flax_model, layers))
        self.layers, self._graphdef = layers, graphdef

        def forward(state, x):
            return nnx.merge(graphdef, state)(x)

        dtype = precision.jax_dtype(prec)
        self._place(precision.cast_floating(state, dtype), forward, device, dtype, xla_options)

    def _place(self, state, forward, device: str, dtype, xla_options: str = compiler.DEFAULT):
        """``forward(state, x)`` jitted, with ``state`` (already in ``dtype``) on the device, to be
        compiled with the declared XLA option set ``xla_options``."""
        import jax

        self.xla_options = xla_options
        self.compiler_options = compiler.xla_options(xla_options, device)
        self.device = device
        self.jax_device = fw_device.jax_device(device)
        self.dtype = dtype
        self.state = jax.device_put(state, self.jax_device)
        self.jitted = jax.jit(forward)
        self.compiled = {}

    def inputs(self, batches: list[np.ndarray]):
        import jax

        # an image batch is reordered to the function's layout; token ids stay integers
        return [
            jax.device_put(
                np.ascontiguousarray(b.transpose(self.INPUT_AXES) if b.ndim == 4 else b),
                self.jax_device,
            ).astype(self.dtype if b.dtype.kind == "f" else b.dtype)
            for b in batches
        ]

    def __call__(self, x):
        return self.compiled[x.shape](self.state, x)

    def sync(self, out):
        fw_device.jax_sync(out)

    def prepare(self, x, result: BatchResult) -> None:
        """AOT: lowering and XLA compilation timed apart; FLOPs and bytes from cost analysis."""
        t0 = time.perf_counter()
        lowered = self.jitted.lower(self.state, x)
        t1 = time.perf_counter()
        compiled = lowered.compile(compiler_options=self.compiler_options or None)
        t2 = time.perf_counter()
        self.compiled[x.shape] = compiled
        result.lower_s, result.xla_compile_s = t1 - t0, t2 - t1
        result.compile_s = t2 - t0
        cost = flops.xla_cost(compiled)
        result.flops_per_img = cost["flops"] / x.shape[0] or None
        result.bytes_per_img = cost["bytes_accessed"] / x.shape[0] or None
        result.ran = {**self.ran(x), "kernel_mix": compiler.xla_kernel_mix(compiled.as_text())}

    def ran(self, x) -> dict:
        """What this side runs on input ``x``: layers, XLA option set and options, and how many
        convolutions each layer implementation took."""
        from fwbench.models import conv

        return {
            "layers": self.layers,
            "xla_options": self.xla_options,
            "compiler_options": self.compiler_options,
            "conv_kinds": conv.traced_kinds(self._graphdef, self.state, x),
        }


class TorchaxSide(JaxSide):
    """PyTorch's own module run as a JAX function through torchax, timed exactly as ``JaxSide``:
    XLA gets PyTorch's graph as PyTorch wrote it (NCHW layout, its attention unfused, the weights
    as arguments of the jitted function), not a Flax port."""

    GIVEN = {"graph": "PyTorch's, through torchax", "layout": "NCHW", "weights": "arguments"}
    INPUT_AXES = (0, 1, 2, 3)  # NCHW, as PyTorch takes them

    def __init__(self, torch_model, device: str, prec: str):
        from fwbench.models import torchax_bridge

        # cast by PyTorch, as PyTorch itself would run the model at this precision
        model = torch_model.to(dtype=precision.torch_dtype(prec)).eval()
        weights, fn = torchax_bridge.jax_function(model)
        self.layers, self._graphdef = "PyTorch's", None
        self._place(weights, fn, device, precision.jax_dtype(prec))

    def ran(self, x) -> dict:
        return {"layers": self.layers, "xla_options": self.xla_options, "compiler_options": {}}


def picks(
    framework: str,
    mode: str,
    batch_sizes: list[int],
    *,
    channels_last: bool,
    xla_options: str,
    tuning_path: str,
    dynamic_shapes: bool = False,
    **configuration,
) -> dict[int, dict]:
    """What runs at each batch size: the cell's own mode, or for a tuned mode
    (``vocab.TUNED_MODES``) the pick the selection file at ``tuning_path`` holds for this
    configuration (``configuration``: device_name, precision, threads, model, image_size), with
    the tuning run it came from. A configuration the file lacks is ``best_modes.NoChoice``."""
    from fwbench.measure import best_modes

    if mode not in vocab.TUNED_MODES:
        if mode in vocab.TORCH_GRAPH_MODES:
            own = {"mode": mode}
        else:
            given = {
                "channels_last": channels_last,
                "dynamic_shapes": dynamic_shapes,
                "xla_options": xla_options,
            }
            own = best_modes.candidate(framework, mode, given)
        return {bs: own for bs in batch_sizes}
    selection = best_modes.read(tuning_path)
    found = {}
    for bs in batch_sizes:
        pick = best_modes.choice(selection, framework=framework, batch_size=bs, **configuration)
        found[bs] = {
            **pick["choice"],
            "tuned": {
                "candidate": pick["candidate"],
                "tuning_img_s": pick["img_s"],
                "runner_up": pick["runner_up"],
                "tuning": [pick["tuning_run"]],  # the pick's own run, of the file's several
            },
        }
    return found


def own_dynamic(mode: str, picks: dict) -> bool:
    """Whether a cell's own mode (not a tuned one, whose picks say it per batch size) compiles
    one graph for any batch size."""
    return mode not in vocab.TUNED_MODES and any(p.get("dynamic_shapes") for p in picks.values())


def pick_extra(pick: dict) -> dict:
    """What a tuned batch size's records add to ``extra``: the pick and its tuning run."""
    return {"tuned_pick": pick["tuned"]} if "tuned" in pick else {}


def pick_words(framework: str, pick: dict) -> str:
    from fwbench.measure import best_modes

    if "mode" in pick and framework == "jax":
        return pick["mode"]
    name = best_modes.candidate_name(framework, pick)
    return f"tuned: {name}" if "tuned" in pick else name


class Sides:
    """One side per distinct pick, built on first use: a tuned cell may run two ways."""

    def __init__(self, build):
        self.build, self.built = build, {}

    def get(self, pick: dict):
        key = _side_key(pick)
        if key not in self.built:
            self.built[key] = self.build(pick)
        return self.built[key]


def own_copy(torch_model, picks: dict):
    """``torch_model`` itself, or a copy where a cell builds several PyTorch sides: a side moves
    its model to a memory format in place, which the next side must not inherit."""
    import copy

    distinct = {_side_key(p) for p in picks.values()}
    return copy.deepcopy(torch_model) if len(distinct) > 1 else torch_model


def _side_key(pick: dict) -> str:
    """What sets a side apart: the pick without the tuning run's account of it."""
    return json.dumps({k: v for k, v in pick.items() if k != "tuned"}, sort_keys=True)


def torchax_proof(torch_model, size: int, seed: int, inputs: str = "image") -> dict:
    """The float64 proof a torchax cell passes before anything is timed: the largest relative
    output difference from PyTorch eager on one seeded input (an image of ``size`` pixels a side,
    or ``size`` tokens or audio samples), with JAX's 64-bit mode on for the
    proof alone, on a copy whose all-zero weights are drawn afresh (a zero-initialised head gives
    zero logits, which prove nothing); ``failure`` names what went wrong (a model torchax cannot
    trace), else None."""
    import jax
    import torch

    from fwbench.data import synthetic_input
    from fwbench.models import torchax_bridge

    x = torch.from_numpy(synthetic_input(inputs, 1, size, seed))
    was = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        proved = torchax_bridge.without_zero_weights(torch_model, seed)
        error = torchax_bridge.float64_agreement(proved, x)
    except Exception as exc:  # a model torchax cannot trace: any error, named in the record
        return {"error": None, "failure": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        jax.config.update("jax_enable_x64", was)
    failure = None
    if not error <= torchax_bridge.FLOAT64_TOLERANCE:
        failure = f"float64 logits differ by {error:.2e}, above {torchax_bridge.FLOAT64_TOLERANCE}"
    return {"error": error, "failure": failure}


def run_batch_size(
    side,
    batch_size: int,
    image_size: int,
    rule: StopRule,
    *,
    warmup: int,
    block_size: int,
    seed: int,
    energy_device_index: int = 0,
    inputs: str = "image",
) -> BatchResult:
    """Measure one batch size; an out-of-memory error becomes an ``oom`` result. ``image_size``
    is the input's size: pixels a side, or tokens or audio samples as ``inputs`` says."""
    from fwbench.data import synthetic_input
    from fwbench.measure.stats import summarize

    result = BatchResult(batch_size)
    framework = "jax" if isinstance(side, JaxSide) else "torch"
    try:
        host = [
            synthetic_input(inputs, batch_size, image_size, seed + i)
            for i in range(N_ROTATING_BATCHES)
        ]
        inputs = side.inputs(host)
        del host
        side.prepare(inputs[0], result)
        with measure_peak_memory(framework, side.device, getattr(side, "jax_device", None)) as mem:
            lat = measure_latency(side, inputs, side.sync, rule, warmup=warmup)
            with measure_energy(side.device, energy_device_index) as energy:
                # the latency loop above warmed this function up until its times settled; one
                # call re-fills the pipeline, a second stability search would only cost time
                thr = measure_throughput(
                    side, inputs, side.sync, rule, block_size=block_size, warmup=1, max_warmup=1
                )
    except Exception as exc:
        if not is_oom(exc):
            raise
        result.status, result.error = "oom", f"{type(exc).__name__}: {str(exc)[:500]}"
        return result
    result.warmup_stable = lat.warmup_stable
    result.latency_ms = lat.samples_ms()
    result.latency = lat.summary_ms()
    result.throughput_img_s = batch_size * block_size / thr.samples
    result.throughput = summarize(result.throughput_img_s)
    result.cpu_per_wall, result.steal_frac = thr.cpu_per_wall, thr.steal_frac
    result.peak_mem_bytes, result.peak_mem_source = mem.bytes, mem.source
    if energy.joules is not None:
        calls = block_size * len(thr.samples) + thr.warmup_iters  # every call inside the meter
        result.energy_j_per_img = energy.joules / (batch_size * calls)
    result.energy_note = energy.source if energy.joules is not None else energy.reason
    return result


def add_records(rec, result: BatchResult) -> None:
    """Turn one batch size's result into the inference records of DESIGN.md section 4.

    Every record of the batch size carries ``ran`` (what ran: compiler settings, layers, the
    kernel mix) in its ``extra``. MFU is not among them: the analysis divides
    ``achieved_tflops`` by the peak that 02_calibrate measured, so that a cell never reads
    another cell's outputs. In a relay group (``fwbench.measure.relay``) they also carry
    ``relay``: the kernel's place, the turns it has passed and the seconds it waited so far.
    """
    relayed = relay.reading()
    extras = {"ran": result.ran} if result.ran else {}
    with rec.extras(**extras, **({"relay": relayed} if relayed else {})):
        _add_batch_records(rec, result)


def _add_batch_records(rec, result: BatchResult) -> None:
    bs = result.batch_size
    if result.status != "ok":
        rec.add("cell_status", None, "", status=result.status, error=result.error, batch_size=bs)
        return
    rec.add_summary(
        "latency",
        result.latency,
        "ms",
        samples=np.round(result.latency_ms, 5).tolist(),
        extra={"warmup_stable": result.warmup_stable},
        batch_size=bs,
    )
    thr = result.throughput
    rec.add(
        "throughput_img_s",
        thr["p50"],
        "img/s",
        n=thr["n"],
        ci_low=thr["median_ci_low"],
        ci_high=thr["median_ci_high"],
        batch_size=bs,
        extra={
            "samples": np.round(result.throughput_img_s, 3).tolist(),
            "noisy": thr["noisy"],
            **(
                {"cpu_per_wall": np.round(result.cpu_per_wall, 3).tolist()}
                if result.cpu_per_wall is not None
                else {}
            ),
            "steal_frac": result.steal_frac,
        },
    )
    rec.add_compile_and_memory(result, batch_size=bs)
    rec.add(
        "energy_j_per_img",
        result.energy_j_per_img,
        "J",
        batch_size=bs,
        extra={"source_or_reason": result.energy_note},
    )
    achieved = None
    if result.flops_per_img:
        achieved = result.flops_per_img * thr["p50"] / 1e12
    flop_extra = {"flops_per_img": result.flops_per_img, "bytes_per_img": result.bytes_per_img}
    rec.add("achieved_tflops", achieved, "TFLOP/s", batch_size=bs, extra=flop_extra)
