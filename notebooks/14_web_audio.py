# %% [markdown]
# # 14 · Web audio: one speech encoder in every runtime, native and in the browser
#
# **Purpose.** Run the same speech encoder (`model`: wav2vec2 or Whisper's encoder, random weights
# from `transformers`' config, `model_size` tiny or base) on the same audio in PyTorch (eager),
# JAX (jit), native ONNX Runtime and onnxruntime-web inside Debian's Chromium, Firefox ESR and
# WebKitGTK (WASM with SIMD and threads, WebGPU, WebNN), and
# measure for each runtime and audio length: load time (fetch and session creation), the first
# call, latency p50/p95 over calls, the **real-time factor** (latency ÷ audio seconds; below 1
# keeps up with a microphone) and the agreement with PyTorch on the same fp32 input.
#
# **Same function first**: JAX's side (wav2vec2's Flax twin; for Whisper, PyTorch's own module
# through torchax) is proven in float64 against `transformers`' model (outputs within 1e-10
# relative) before anything is timed; the other runtimes run PyTorch's own export
# (`torch.onnx.export(..., dynamo=True)`), and their fp32 agreement with PyTorch is a
# measurement with a sanity bound of 1e-4.
#
# **Whisper hears a 30 s window.** Its input is the log-mel spectrogram of `transformers`' own
# feature extractor, the audio padded with silence to Whisper's 30 s: every runtime gets the same
# features (computed once, not timed), and one call costs the same at 1 s as at 10 s of audio, so
# its real-time factor falls with the audio's length. Audio longer than 30 s is refused.
#
# **Run it:** `fwbench run params/web_audio.yaml` (the study: both models at base, 1 s and 10 s,
# one and two threads, interleaved trials); its defaults (wav2vec2 tiny, 1 s) are the smoke
# setting. Browser runtimes need the browsers
# (`make browser`: Debian's Chromium, Firefox ESR and WebKitGTK) and onnxruntime-web (`make web`);
# where one is missing or does not start, its rows are `skipped` with the reason, and the cell
# still succeeds. A WASM run whose browser gave it fewer threads than asked is `failed`.
# `threads` is each runtime's compute threads; `cores` the cores the kernel, and the browser it
# starts, may use (0: as many as threads). With more cores than threads, a browser's own
# processes (its renderer's main thread, its GPU and network processes) run beside WASM's threads
# rather than on their core, and native ONNX Runtime gets the same cores: at one thread both get
# one compute thread and two cores. PyTorch and JAX run with cores equal to threads (JAX's thread
# pool follows the cores the process may use).
#
# **Runtime:** the defaults (tiny, 1 s, one thread) take about a minute and a half on a 2-core
# CPU per browser (Firefox's start takes 3-4 s): the kernel's imports, the ONNX export, each
# browser's start and software WebGPU's first call
# (shader compilation, about 10 s). Software WebGPU (SwiftShader, a CPU rasteriser) is a
# correctness check: no warm-up, at most two timed calls, and skipped above tiny. Base at 10 s
# takes about 10 minutes per thread count. Whisper costs the same at every audio length (its
# 30 s window).

# %% tags=["parameters"]
model = "wav2vec2"  # one of: wav2vec2, whisper
model_size = "tiny"  # one of: tiny, base
whisper_window_s = 30  # Whisper's own window; a shorter one is not Whisper (for tests)
audio_seconds = [1.0]  # > 0: seconds of audio, each a cell of its own measurement
runtimes = [
    "torch",
    "jax",
    "onnxruntime",
    "ort-web-wasm",
    "ort-web-webgpu",
    "ort-web-webnn",
]  # one of: torch, jax, onnxruntime, ort-web-wasm, ort-web-webgpu, ort-web-webnn
browsers = ["chromium", "firefox", "webkit"]  # one of: chromium, firefox, webkit
threads = 1
cores = 0  # 0: as many as threads; more: each runtime's threads with the browser beside them
min_iters = 5
min_seconds = 1.0
streaming = False
check_parity = True
seed = 0

# %%
import os
import tempfile
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from fwbench import vocab
from fwbench.families.web_audio import browser, drivers, native, signals
from fwbench.families.web_audio.onnx_export import export_onnx
from fwbench.measure import device as fw_device
from fwbench.measure.precision import configure
from fwbench.measure.timing import StopRule
from fwbench.models.speech import WHISPER_WINDOW_S, build_speech, check_size, model_input
from fwbench.pipeline.campaign import find_repo_root
from fwbench.report import charts
from fwbench.results.records import Recorder

charts.use_theme()
runtimes = native.check_runtimes(runtimes)  # bad input stops here
browsers = drivers.check_browsers(browsers)
check_size(model_size, model)
# a campaign refuses audio_seconds <= 0 before anything runs (the parameters cell's "> 0"); this
# guards a Run-All with edited defaults
if not audio_seconds or min(audio_seconds) <= 0:
    raise ValueError(f"audio_seconds must be positive, got {audio_seconds}")
if model == "whisper" and max(audio_seconds) > whisper_window_s:
    raise ValueError(f"Whisper's encoder hears at most {whisper_window_s} s, got {audio_seconds}")
# the kernel, and the browser it starts, on these cores; each runtime runs `threads` of them
cores = fw_device.limit_threads(cores or threads)
threads = native.check_threads(threads, cores, runtimes)
configure("torch", "fp32")
configure("jax", "fp32")
root = find_repo_root(Path.cwd())
rule = StopRule(min_iters=min_iters, min_seconds=min_seconds)
model_name = f"{model}_{model_size}"
window = {}
if model == "whisper":
    window = {"window_s": whisper_window_s}
    if whisper_window_s != WHISPER_WINDOW_S:  # not Whisper's encoder: its name says so
        model_name += f"_{whisper_window_s}s"
rec = Recorder(
    "web_audio",
    extra={"model_size": model_size, "speech_model": model, **window, "cores": cores},
    model=model_name,
    device="cpu",
    device_name=fw_device.cpu_device_name(),
    precision="fp32",
    batch_size=1,
    threads=threads,
)
work = tempfile.TemporaryDirectory(
    prefix=".14_web_audio-", dir=os.environ.get(vocab.ENV_EXECUTED_DIR) or None
)
files = Path(work.name)
torch_model, flax_model = build_speech(model, model_size, seed=seed, window_s=whisper_window_s)
# JAX runs the Flax twin where there is one, else PyTorch's own module through torchax
jax_mode = "jit" if flax_model is not None else "torchax"
print(f"{model_name} · {threads} thread(s) on {cores} core(s) · {fw_device.cpu_device_name()}")

# %% [markdown]
# ## JAX computes the same function (float64)

# %%
if check_parity:
    probe = model_input(model, signals.synthetic_speech(1.0, seed), whisper_window_s)
    if flax_model is not None:
        parity = native.twin_parity(torch_model, flax_model, probe)
    else:
        parity = native.torchax_parity(torch_model, probe)
    rec.add(
        "fp64_output_parity_max_rel",
        parity,
        "ratio",
        framework="jax",
        mode=jax_mode,
        status="ok" if parity <= 1e-10 else "failed",
        precision="fp64",
        extra={"tolerance": 1e-10},
    )
    print(f"float64: max|Δ|/max|torch| = {parity:.2e} (gate 1e-10)")

# %% [markdown]
# ## Every runtime, every audio length

# %%
browser_runtimes = [r for r in runtimes if r in native.BROWSER]
needs_onnx = streaming or any(r not in ("torch", "jax") for r in runtimes)
onnx_path = (
    export_onnx(
        torch_model,
        files / "model.onnx",
        model_input(model, signals.synthetic_speech(1.0, seed), whisper_window_s),
        model,
    )
    if needs_onnx
    else None
)
# each browser that cannot run here, and why
why_not = {
    name: browser.unavailable(root, name) for name in browsers if browser_runtimes or streaming
}
results, references, runs, dims = [], {}, [], {}
for seconds in audio_seconds:
    # what the encoder hears: the audio, or Whisper's log-mel window of it
    features = model_input(model, signals.synthetic_speech(seconds, seed), whisper_window_s)
    name = f"audio_{seconds:g}s.f32"
    signals.write_f32(features, files / name)
    dims[name] = (1, *features.shape)
    # the reference is PyTorch's output whether or not PyTorch is timed
    references[seconds] = native.torch_output(torch_model, features)
    for runtime in [r for r in runtimes if r in native.NATIVE]:
        if runtime == "torch":
            found = native.run_torch(torch_model, features, rule)
        elif runtime == "jax" and flax_model is not None:
            found = native.run_jax(flax_model, features, rule)
        elif runtime == "jax":
            found = native.run_torchax(torch_model, features, rule)
        else:
            found = native.run_onnxruntime(onnx_path, features, threads, rule)
        results.append((seconds, found))
    runs += [(runtime, threads, name) for runtime in browser_runtimes]
by_name = {f"audio_{s:g}s.f32": s for s in audio_seconds}
caps = {}
for name in browsers if browser_runtimes else []:
    try:
        if why_not[name]:
            raise drivers.DriverError(why_not[name])
        found, caps[name] = browser.bench(
            files,
            browser.ort_web_dist(root),
            runs,
            "model.onnx",
            min_iters,
            min_seconds,
            name=name,
            # a software adapter's call takes minutes above wav2vec2 tiny
            software_webgpu=(model, model_size) == ("wav2vec2", "tiny"),
            dims=dims,
        )
    except drivers.DriverError as exc:  # this browser's rows are skipped, the others run
        why_not[name] = str(exc)
        results += [
            (
                s,
                native.RuntimeResult(
                    r, status="skipped", reason=str(exc), details={"browser": name}
                ),
            )
            for s in audio_seconds
            for r in browser_runtimes
        ]
        continue
    results += [(by_name[audio], r) for (_, _, audio), r in zip(runs, found, strict=True)]

for seconds, result in results:
    runtime = result.runtime
    mode = jax_mode if runtime == "jax" else vocab.DEFAULT_MODE.get(runtime)
    columns = {"framework": runtime, "mode": mode}
    extra = {"audio_seconds": seconds, **result.details}
    if result.status != "ok":
        rec.add(
            "latency_p50_ms",
            None,
            "ms",
            status=result.status,
            error=result.reason,
            extra=extra,
            **columns,
        )
        continue
    p50, p95 = np.percentile(result.latency_ms, [50, 95])
    n = len(result.latency_ms)
    rec.add(
        "latency_p50_ms", p50, "ms", n=n, extra={**extra, "samples": result.latency_ms}, **columns
    )
    rec.add("latency_p95_ms", p95, "ms", n=n, extra=extra, **columns)
    rec.add("rtf", p50 / 1e3 / seconds, "ratio", n=n, extra=extra, **columns)
    rec.add("load_s", result.load_s, "s", extra=extra, **columns)
    rec.add("first_call_s", result.first_call_s, "s", extra=extra, **columns)
    abs_err, rel_err = native.agreement(result.output, references[seconds])
    rec.add("max_abs_err_vs_torch", abs_err, "1", extra=extra, **columns)
    # a sanity bound on an fp32 runtime, not a proof: the float64 check above is the proof
    rec.add(
        "max_rel_err_vs_torch",
        rel_err,
        "ratio",
        status="ok" if rel_err <= 1e-4 else "failed",
        error=None if rel_err <= 1e-4 else f"{rel_err:.2e} > 1e-4",
        extra={**extra, "sanity_bound": 1e-4},
        **columns,
    )

table = pd.DataFrame(
    [
        {
            "audio s": s,
            "runtime": r.runtime,
            "browser": r.details.get("browser", ""),
            "threads used": r.details.get("num_threads", threads),
            "status": r.status,
            "p50 ms": np.median(r.latency_ms) if r.latency_ms else None,
            "rtf": np.median(r.latency_ms) / 1e3 / s if r.latency_ms else None,
            "load s": r.load_s,
            "reason": r.reason[:80],
        }
        for s, r in results
    ]
)
table

# %%
ok = table.dropna(subset=["rtf"]).assign(
    where=lambda t: [f"{r} · {b}" if b else r for r, b in zip(t.runtime, t.browser, strict=True)]
)
alt.Chart(
    ok,
    title=f"{model_name}: real-time factor ({threads} thread(s), {cores} core(s); below 1 keeps up)",
).mark_bar().encode(
    x=alt.X("where:N", sort="y", title="runtime"),
    xOffset="audio s:N",
    y=alt.Y("rtf:Q", scale=alt.Scale(type="log"), title="latency / audio"),
    color="audio s:N",
)

# %% [markdown]
# ## Streaming, like a microphone
# Chromium's fake capture device plays a WAV of the same signal through `getUserMedia`,
# Firefox's a tone of its own (its audio played into a PulseAudio null sink: without an output
# its AudioContext never starts); an AudioWorklet at 16 kHz posts one-second chunks, each run
# through the model (WASM) as it arrives. Per chunk: latency, and how many chunks queued behind
# it (any backlog: it does not keep up). WebKitGTK's rows are skipped with the reason (its fake
# microphone is not driven). Streaming is wav2vec2's: Whisper's encoder hears a 30 s window.

# %%
for name in browsers if streaming else []:
    why = why_not.get(name) or browser.no_stream(name)
    if model != "wav2vec2":
        why = f"streaming runs wav2vec2 a second at a time; {model}'s encoder hears a 30 s window"
    if why:
        rec.add(
            "chunk_latency_p50_ms", None, "ms", framework="ort-web-wasm", status="skipped",
            error=why, extra={"streaming": True, "browser": name},
        )  # fmt: skip
        print(f"{vocab.BROWSER_LABELS[name]}: {why}")
        continue
    seconds = max(audio_seconds)
    wav = signals.write_wav(signals.synthetic_speech(seconds + 1.0, seed), files / "speech.wav")
    try:
        with browser.serve(files, browser.ort_web_dist(root)) as url:
            streamed = browser.stream(url, wav, "model.onnx", threads, max(1, int(seconds)), name)
    except drivers.DriverError as exc:  # the browser did not start: its stream failed, not the cell
        streamed = {"status": "failed", "reason": str(exc), "browser": name}
    summary = browser.add_stream_records(rec, streamed)
    if summary:
        display(pd.DataFrame(streamed["chunks"]))
        print(
            f"{vocab.BROWSER_LABELS[name]} keeps up: {summary['keeps_up']} "
            f"(largest backlog {summary['max_backlog']})"
        )
    else:
        print(f"{vocab.BROWSER_LABELS[name]}: {streamed.get('reason')}")

# %% [markdown]
# ## What each browser offers

# %%
for name in browsers:
    if why_not.get(name) is None and name not in caps:
        try:
            _, caps[name] = browser.bench(
                files, browser.ort_web_dist(root), [], "model.onnx", 1, 0.0, name=name
            )
        except drivers.DriverError as exc:
            why_not[name] = str(exc)
    if name in caps:
        rec.add(
            "browser_capabilities", None, "1", framework=name, extra={"capabilities": caps[name]}
        )
    else:
        print(f"{vocab.BROWSER_LABELS[name]}: {why_not.get(name)}")
if caps:
    display(
        pd.DataFrame({vocab.BROWSER_LABELS[n]: c for n, c in caps.items()}).drop(
            index="webgpu_adapter"
        )
    )

# %%
rec.emit()
work.cleanup()
