"""onnxruntime-web in a real browser: Chromium, Firefox ESR or WebKitGTK, each through its driver
(``drivers``: Debian's browsers, never a download), a local server that makes the page
cross-origin isolated, and the page (``page/bench.mjs``) that loads the model, times its calls and
posts the output back.

- The server is Python's ``ThreadingHTTPServer`` on 127.0.0.1, port 0, in this process. It sends
  ``Cross-Origin-Opener-Policy: same-origin``, ``Cross-Origin-Embedder-Policy: require-corp`` and
  ``Cross-Origin-Resource-Policy: same-origin`` (without them WASM silently runs one thread),
  serves ``.mjs`` as JavaScript and ``.wasm`` as ``application/wasm``, and takes the page's output
  as a raw float32 POST to ``/upload/NAME``. ``/page/`` is the bench page, ``/ort/`` the installed
  onnxruntime-web's ``dist/``, ``/files/`` the model and audio of the run.
- WASM's thread count is fixed once per page, so every (runtime, threads) gets a new page. The
  page reads back the thread count onnxruntime-web kept after creating its session, and the
  warnings it printed: a run that fell back to fewer threads than asked is ``failed``, never
  reported at the count it asked for.
- Headless Chromium's WebGPU is SwiftShader, software; it is reported as such from the adapter.
  WebNN's ``createContext()`` fails on Linux: the page reports the browser's own reason and the
  runtime is recorded ``skipped``.
- Playwright's sync API refuses a thread where an asyncio loop runs, as one does in a Jupyter
  kernel, so ``bench`` and ``stream`` drive the browser from a thread of their own there.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np

from fwbench.families.web_audio import drivers
from fwbench.families.web_audio.native import RuntimeResult

_PAGE = Path(__file__).resolve().parent / "page"
_PAGE_TIMEOUT_S = 600
_ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def ort_web_dist(root: Path) -> Path:
    """Where ``npm ci`` in ``web/`` puts onnxruntime-web's bundles."""
    return root / "web" / "node_modules" / "onnxruntime-web" / "dist"


def unavailable(root: Path, name: str = "chromium") -> str | None:
    """Why the browser runtimes cannot run in ``name`` here, with the command that fixes it; None
    if they can."""
    why = drivers.unavailable(name)
    if why:
        return why
    if not (ort_web_dist(root) / "ort.wasm.min.mjs").is_file():
        return "onnxruntime-web is not installed (`make web` runs npm ci in web/)"
    return None


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".js": "text/javascript",
        ".wasm": "application/wasm",
        ".onnx": "application/octet-stream",
        ".f32": "application/octet-stream",
    }

    def __init__(self, *args, routes: dict, uploads: Path, **kwargs):
        self.routes, self.uploads = routes, uploads
        super().__init__(*args, **kwargs)

    def translate_path(self, path: str) -> str:
        path = unquote(urlsplit(path).path)
        for prefix, folder in self.routes.items():
            if path.startswith(prefix):
                target = (folder / path[len(prefix) :]).resolve()
                if target.is_relative_to(folder.resolve()):
                    return str(target)
        return str(Path("/nonexistent"))

    def end_headers(self):
        for key, value in _ISOLATION_HEADERS.items():
            self.send_header(key, value)
        super().end_headers()

    def do_POST(self):
        name = Path(unquote(urlsplit(self.path).path)).name
        if not self.path.startswith("/upload/") or not name:
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length", 0))
        (self.uploads / name).write_bytes(self.rfile.read(length))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args):  # the notebook's output is not a server log
        pass


@contextlib.contextmanager
def serve(files: Path, ort_dist: Path):
    """A cross-origin-isolated server of the page, onnxruntime-web and ``files``; yields its
    base URL. Uploads land in ``files``."""
    routes = {"/page/": _PAGE, "/ort/": ort_dist, "/files/": files}
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, routes=routes, uploads=files))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _on_own_thread(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, on a thread of its own when this one runs an asyncio loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    box = {}

    def target():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="fwbench-playwright")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _run_page(
    browser: drivers.Driver,
    base_url: str,
    runtime: str,
    threads: int,
    model: str,
    audio: str,
    out: Path,
    min_iters: int,
    min_seconds: float,
    warmup: int = 3,
    *,
    dims: tuple[int, ...] | None = None,
) -> RuntimeResult:
    """One runtime at one thread count in a fresh page; the output read back from ``out``.
    ``dims`` is the input's shape (Whisper's log-mel window); without it the input is one row
    of audio, (1, samples).

    A page that crashes or never finishes is this runtime's ``failed`` row, not the end of the
    others; so is a page whose onnxruntime-web ran fewer WASM threads than asked."""
    query = (
        f"runtime={runtime}&threads={threads}&model=/files/{model}&input=/files/{audio}"
        f"&out={out.name}&min_iters={min_iters}&min_seconds={min_seconds}&warmup={warmup}"
    )
    if dims:
        query += "&dims=" + ",".join(str(int(d)) for d in dims)
    base = {"browser": browser.name, "browser_version": browser.version}
    try:
        result = browser.result(f"{base_url}/page/index.html?{query}", _PAGE_TIMEOUT_S)
    except drivers.DriverError as exc:
        return RuntimeResult(runtime, status="failed", reason=f"the page: {exc}", details=base)
    details = {k: result.get(k) for k in _PAGE_DETAILS if result.get(k) is not None}
    details.update(base)
    if "adapter" in details:
        details["software_webgpu"] = is_software_adapter(details["adapter"])
    if result["status"] != "ok":
        return RuntimeResult(
            runtime, status=result["status"], reason=result.get("reason", ""), details=details
        )
    fewer = thread_fallback(runtime, threads, details)
    if fewer:
        return RuntimeResult(runtime, status="failed", reason=fewer, details=details)
    output = np.fromfile(out, "<f4").reshape(result["output_dims"][1:])
    return RuntimeResult(
        runtime,
        load_s=result["load_s"],
        first_call_s=result["first_call_s"],
        latency_ms=list(result["latency_ms"]),
        output=output,
        details=details,
    )


_PAGE_DETAILS = (
    "bundle",
    "ort_version",
    "num_threads",
    "crossOriginIsolated",
    "hardwareConcurrency",
    "userAgent",
    "adapter",
    "warmup",
    "warnings",
)


def thread_fallback(runtime: str, threads: int, details: dict) -> str | None:
    """Why a WASM run is not the thread count it asked for (onnxruntime-web falls back to one
    thread, with a console warning, where SharedArrayBuffer is missing); None where it is."""
    if runtime != "ort-web-wasm":
        return None
    used = details.get("num_threads")
    if used == threads:
        return None
    warned = "; ".join(details.get("warnings") or []) or "no warning"
    return f"asked for {threads} WASM thread(s), onnxruntime-web ran {used} ({warned})"


def is_software_adapter(adapter: dict) -> bool:
    """Whether a WebGPU adapter is a CPU rasteriser (SwiftShader, llvmpipe, a fallback adapter)
    rather than a GPU: its timings then say nothing about WebGPU on real hardware."""
    text = " ".join(str(adapter.get(k, "")) for k in ("vendor", "architecture", "description"))
    return bool(adapter.get("fallback")) or any(
        name in text.lower() for name in ("swiftshader", "llvmpipe", "software")
    )


_SOFTWARE_WEBGPU_SKIP = (
    "WebGPU runs on a software adapter here ({adapter}), about 100x slower than WASM: "
    "run it with wav2vec2 at model_size tiny, for correctness"
)


def bench(
    files: Path,
    ort_dist: Path,
    runs: list[tuple[str, int, str]],
    model: str,
    min_iters: int,
    min_seconds: float,
    *,
    name: str = "chromium",
    warmup: int = 3,
    software_webgpu: bool = True,
    dims: dict[str, tuple[int, ...]] | None = None,
) -> tuple[list[RuntimeResult], dict]:
    """The capabilities of browser ``name``, then every ``(runtime, threads, audio file)`` of
    ``runs`` in that one browser, each in a page of its own; outputs are read back from
    ``files/out_<browser>_<runtime>_<threads>_<audio>.f32``. ``dims`` maps an input file to
    its shape where it is not one row of audio.

    WebGPU on a software adapter (a CPU rasteriser) is a correctness check, not a timing: it
    gets no warm-up and at most two timed calls, and ``software_webgpu=False`` skips it (one call
    of a large model takes minutes there)."""

    def go():
        with serve(files, ort_dist) as url, drivers.launch(name) as b:
            caps = capabilities(b, url)
            adapter = caps.get("webgpu_adapter") or {}
            software = bool(adapter) and is_software_adapter(adapter)
            results = []
            for runtime, threads, audio in runs:
                settings = (min_iters, min_seconds, warmup)
                if runtime == "ort-web-webgpu" and software:
                    if not software_webgpu:
                        results.append(_software_webgpu_skipped(b, caps))
                        continue
                    settings = (min(min_iters, 2), 0.0, 0)
                out = files / f"out_{name}_{runtime}_{threads}_{Path(audio).stem}.f32"
                shape = (dims or {}).get(audio)
                results.append(
                    _run_page(b, url, runtime, threads, model, audio, out, *settings, dims=shape)
                )
            return results, caps

    return _on_own_thread(go)


def _software_webgpu_skipped(browser: drivers.Driver, caps: dict) -> RuntimeResult:
    return RuntimeResult(
        "ort-web-webgpu",
        status="skipped",
        reason=_SOFTWARE_WEBGPU_SKIP.format(adapter=caps["webgpu"]),
        details={
            "browser": browser.name,
            "browser_version": browser.version,
            "adapter": caps["webgpu_adapter"],
            "software_webgpu": True,
        },
    )


def capabilities(browser: drivers.Driver, base_url: str) -> dict:
    """What this browser offers the page: WASM SIMD and threads, isolation, WebGPU, WebNN; with
    the browser's name and version."""
    found = browser.evaluate(f"{base_url}/page/index.html?runtime=none", _CAPABILITIES_JS)
    if not isinstance(found, dict) or "error" in found:
        raise drivers.DriverError(f"the capability probe failed: {found}")
    return {**found, "browser": browser.name, "browser_version": browser.version}


_CAPABILITIES_JS = """async () => {
  const simd = WebAssembly.validate(new Uint8Array([0,97,115,109,1,0,0,0,1,5,1,96,0,1,123,3,2,1,
    0,10,10,1,8,0,65,0,253,15,253,98,11]));
  let webgpu = "absent", webnn = "absent", webgpu_adapter = null;
  if ("gpu" in navigator) {
    const adapter = await navigator.gpu.requestAdapter();
    webgpu = "no adapter";
    if (adapter) {
      const info = adapter.info || {};
      webgpu_adapter = {
        vendor: info.vendor || "", architecture: info.architecture || "",
        device: info.device || "", description: info.description || "",
        fallback: Boolean(adapter.isFallbackAdapter || info.isFallbackAdapter),
      };
      webgpu = info.description || [info.vendor, info.architecture].filter(Boolean).join(" ")
        || "adapter";
    }
  }
  if ("ml" in navigator) {
    try { await navigator.ml.createContext(); webnn = "context"; }
    catch (e) { webnn = `${e.name}: ${e.message}`; }
  }
  return {
    userAgent: navigator.userAgent, wasmSimd: simd,
    sharedArrayBuffer: typeof SharedArrayBuffer !== "undefined",
    crossOriginIsolated: self.crossOriginIsolated,
    hardwareConcurrency: navigator.hardwareConcurrency, webgpu, webgpu_adapter, webnn,
  };
}"""


# what each browser's fake microphone plays into getUserMedia, where the streaming page runs
FAKE_MICROPHONES = {
    "chromium": "a WAV of the same signal (Chromium's fake capture device)",
    "firefox": "a tone (Firefox's fake capture device), its audio played into a null sink",
}
# why it does not run elsewhere: what was seen here
_NO_STREAM = {
    "webkit": "streaming needs a fake microphone, which fwbench does not drive in WebKitGTK",
}


def no_stream(name: str) -> str | None:
    """Why the streaming page cannot run in browser ``name``; None where it can."""
    if name == "firefox" and drivers.no_sound_server():
        # without an audio output Firefox's AudioContext stays suspended: no chunk arrives
        return f"Firefox streams through a sound server: {drivers.no_sound_server()}"
    return None if name in FAKE_MICROPHONES else _NO_STREAM.get(name, f"no streaming in {name}")


def stream(
    base_url: str, wav: Path, model: str, threads: int, chunks: int, name: str = "chromium"
) -> dict:
    """Stream audio from browser ``name``'s fake microphone into the model, a second at a time
    (``wav`` in Chromium; ``FAKE_MICROPHONES`` lists where it runs, ``no_stream`` says why not).

    A browser of its own: Chromium's fake capture device is a launch flag. Returns the page's
    result: per chunk the model's latency, the wait before it started and the chunks queued
    behind it."""
    why = no_stream(name)
    if why:
        raise drivers.DriverError(why)
    return _on_own_thread(_stream, base_url, wav, model, threads, chunks, name)


def _stream(base_url: str, wav: Path, model: str, threads: int, chunks: int, name: str) -> dict:
    fake_microphone = (
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    )
    url = f"{base_url}/page/stream.html?threads={threads}&model=/files/{model}&chunks={chunks}"
    with contextlib.ExitStack() as stack:
        env = None
        if name == "firefox":
            env = {"PULSE_SERVER": stack.enter_context(drivers.sound_server())}
        browser = stack.enter_context(drivers.launch(name, chromium_args=fake_microphone, env=env))
        # the fake microphone plays in real time: a page still waiting long after the last
        # chunk should have arrived is stuck, not slow
        result = browser.result(url, min(_PAGE_TIMEOUT_S, 60 + 30 * chunks))
        return {
            **result,
            "browser": name,
            "browser_version": browser.version,
            "source": FAKE_MICROPHONES[name],
        }


def add_stream_records(rec, streamed: dict) -> dict | None:
    """The records of one streamed run (``stream``'s result) in ``rec``: the chunks' latency
    p50 and the stream's real-time factor, or the failure; returns the summary (None on failure)."""
    extra = {"streaming": True, "browser": streamed.get("browser", "chromium")}
    if streamed["status"] != "ok":
        rec.add(
            "chunk_latency_p50_ms", None, "ms", framework="ort-web-wasm", status="failed",
            error=streamed.get("reason"), extra=extra,
        )  # fmt: skip
        return None
    summary = _stream_summary(streamed)
    extra.update(
        per_chunk=streamed["chunks"],
        browser_version=streamed["browser_version"],
        source=streamed.get("source", ""),
        **summary,
    )
    rec.add(
        "chunk_latency_p50_ms", summary["chunk_latency_p50_ms"], "ms", framework="ort-web-wasm",
        n=summary["chunks"], extra=extra,
    )  # fmt: skip
    rec.add("stream_rtf", summary["stream_rtf"], "ratio", framework="ort-web-wasm", extra=extra)
    return summary


def _stream_summary(result: dict, chunk_seconds: float = 1.0) -> dict:
    """Per-chunk latency p50 and max, the real-time factor (mean latency over the chunk's
    duration) and whether the pipeline kept up (no chunk ever queued behind another)."""
    latencies = np.array([c["latency_ms"] for c in result.get("chunks", [])])
    backlog = max((c["backlog"] for c in result.get("chunks", [])), default=0)
    if latencies.size == 0:
        return {"chunks": 0}
    return {
        "chunks": int(latencies.size),
        "chunk_latency_p50_ms": float(np.median(latencies)),
        "chunk_latency_max_ms": float(latencies.max()),
        "stream_rtf": float(latencies.mean() / 1e3 / chunk_seconds),
        "max_backlog": int(backlog),
        "keeps_up": bool(backlog == 0 and latencies.max() / 1e3 < chunk_seconds),
    }
