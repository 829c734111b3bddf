"""The runtimes of the web-audio family, and the three that run in this process: PyTorch eager,
JAX under jit (wav2vec2's Flax twin, or PyTorch's own module through torchax where a model has no
twin) and native ONNX Runtime. Before anything is timed, the JAX side is proven in float64
against PyTorch (``twin_parity``, ``torchax_parity``). Each is timed the same way
(``measure.timing.measure_latency``: every call synced and timed alone, warm-up until stable,
then a minimum count and duration) on the same fp32 input, and its output kept for the agreement
with PyTorch.

``load_s`` is what a user waits before the first call can start (building the session; for the
Flax twin nothing, since tracing happens in the first call; through torchax, turning the module
into a JAX function), ``first_call_s`` the first call itself (compilation included).
"""

from __future__ import annotations

import importlib.metadata
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fwbench.measure.timing import StopRule, measure_latency

NATIVE = ("torch", "jax", "onnxruntime")
BROWSER = ("ort-web-wasm", "ort-web-webgpu", "ort-web-webnn")
_RUNTIMES = NATIVE + BROWSER


@dataclass
class RuntimeResult:
    runtime: str
    status: str = "ok"  # ok, skipped or failed
    reason: str = ""
    load_s: float | None = None
    first_call_s: float | None = None
    latency_ms: list[float] = field(default_factory=list)
    output: np.ndarray | None = None
    details: dict = field(default_factory=dict)  # versions, bundle, adapter, threads in effect


def check_runtimes(runtimes) -> list[str]:
    unknown = [r for r in runtimes if r not in _RUNTIMES]
    if unknown:
        raise ValueError(f"unknown runtime {unknown[0]!r}; choose from {_RUNTIMES}")
    return list(runtimes)


def check_threads(threads: int, cores: int, runtimes) -> int:
    """``threads`` compute threads on ``cores`` cores, checked: no more threads than cores, and
    PyTorch and JAX only with cores equal to threads (XLA sizes its pool from the cores the
    process may use, so JAX would not run ``threads``; PyTorch is held to the same)."""
    if threads < 1 or threads > cores:
        raise ValueError(f"threads must be 1 to cores ({cores}), got {threads}")
    mine = [r for r in runtimes if r in ("torch", "jax")]
    if mine and cores != threads:
        raise ValueError(
            f"{' and '.join(mine)} run with cores equal to threads ({threads}), got cores={cores}: "
            "JAX's thread pool follows the cores"
        )
    return threads


def agreement(output: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """(max |Δ|, max |Δ| / max |reference|) of two outputs of the same shape."""
    output, reference = np.asarray(output, np.float64), np.asarray(reference, np.float64)
    if output.shape != reference.shape:
        raise ValueError(f"output shape {output.shape} against PyTorch's {reference.shape}")
    delta = float(np.max(np.abs(output - reference)))
    return delta, delta / float(np.max(np.abs(reference)))


def _timed(call, sync, rule: StopRule) -> tuple[float, list[float]]:
    start = time.perf_counter()
    sync(call(None))
    first = time.perf_counter() - start
    timing = measure_latency(call, [None], sync, rule)
    return first, list(timing.samples_ms())


def torch_output(model, audio: np.ndarray) -> np.ndarray:
    """PyTorch's last hidden state for ``audio``: the reference every runtime is held to."""
    import torch

    with torch.inference_mode():
        return model(torch.from_numpy(audio[None].copy())).last_hidden_state.numpy()[0]


def run_torch(model, audio: np.ndarray, rule: StopRule) -> RuntimeResult:
    import torch

    x = torch.from_numpy(audio[None].copy())

    def call(_):
        with torch.inference_mode():
            return model(x).last_hidden_state

    first, samples = _timed(call, lambda _out: None, rule)
    output = call(None).numpy()[0]
    return RuntimeResult(
        "torch",
        load_s=0.0,
        first_call_s=first,
        latency_ms=samples,
        output=output,
        details={"torch": torch.__version__, "threads": torch.get_num_threads()},
    )


def _run_jitted(forward, weights, x: np.ndarray, rule: StopRule, load: float, details: dict):
    """JAX's row: ``forward(weights, x)`` (jitted) timed on ``x`` with a batch axis of 1."""
    import jax

    x = jax.device_put(x[None])

    def call(_):
        return forward(weights, x)

    first, samples = _timed(call, jax.block_until_ready, rule)
    return RuntimeResult(
        "jax",
        load_s=load,
        first_call_s=first,
        latency_ms=samples,
        output=np.asarray(call(None))[0],
        details={"jax": jax.__version__, **details},
    )


def run_jax(model, audio: np.ndarray, rule: StopRule) -> RuntimeResult:
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))
    return _run_jitted(forward, state, audio, rule, 0.0, {})


def run_onnxruntime(
    onnx_path: Path, audio: np.ndarray, threads: int, rule: StopRule
) -> RuntimeResult:
    import onnxruntime as ort

    start = time.perf_counter()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - start
    name = session.get_inputs()[0].name
    x = audio[None]

    def call(_):
        return session.run(None, {name: x})[0]

    first, samples = _timed(call, lambda _out: None, rule)
    return RuntimeResult(
        "onnxruntime",
        load_s=load,
        first_call_s=first,
        latency_ms=samples,
        output=call(None)[0],
        details={"onnxruntime": ort.__version__, "threads": threads},
    )


def run_torchax(model, x: np.ndarray, rule: StopRule) -> RuntimeResult:
    """JAX without a twin: PyTorch's own module as a JAX function of its weights (torchax), under
    ``jax.jit``; ``load_s`` is the extraction of the function and the weights' placement."""
    import jax

    from fwbench.models import torchax_bridge
    from fwbench.models.hf_models import LastHidden

    start = time.perf_counter()
    weights, fn = torchax_bridge.jax_function(LastHidden(model).eval())
    weights = jax.block_until_ready(jax.device_put(weights))
    load = time.perf_counter() - start
    details = {"mode": "torchax", "torchax": importlib.metadata.version("torchax")}
    return _run_jitted(jax.jit(fn), weights, x, rule, load, details)


def twin_parity(torch_model, flax_model, audio: np.ndarray) -> float:
    """max |Δ| / max |PyTorch| of the Flax twin against PyTorch, both in float64 on ``audio``;
    the torch model is back in float32 afterwards."""
    import jax
    import torch
    from flax import nnx

    from fwbench.measure.precision import cast_floating

    x = audio[None].astype(np.float64)
    try:
        with torch.inference_mode():
            reference = torch_model.double()(torch.from_numpy(x)).last_hidden_state.numpy()
    finally:
        torch_model.float()
    with jax.enable_x64(True):
        graphdef, state = nnx.split(flax_model)
        twin = nnx.merge(graphdef, cast_floating(state, np.float64))
        ours = np.asarray(twin(x))
    return agreement(ours, reference)[1]


def torchax_parity(torch_model, x: np.ndarray) -> float:
    """max |Δ| / max |PyTorch| of PyTorch's module through torchax against PyTorch eager, both in
    float64 (JAX's 64-bit mode on for the proof alone); the torch model is back in float32
    afterwards."""
    import jax
    import torch

    from fwbench.models import torchax_bridge
    from fwbench.models.hf_models import LastHidden

    was = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        return torchax_bridge.float64_agreement(
            LastHidden(torch_model).eval(), torch.from_numpy(x[None].copy())
        )
    finally:
        jax.config.update("jax_enable_x64", was)
        torch_model.float()
