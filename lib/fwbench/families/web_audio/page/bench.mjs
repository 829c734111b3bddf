// One runtime, one thread count, one audio file: load the model, time its calls, post the
// output back as raw float32. Query: runtime (none: do nothing), threads, model, input, out,
// min_iters, min_seconds, warmup (calls after the first, untimed), dims (the input's shape,
// comma-separated; without it one row of audio, [1, samples]).
const query = new URLSearchParams(location.search);
const runtime = query.get("runtime");
const threads = Number(query.get("threads") || "1");
const minIters = Number(query.get("min_iters") || "5");
const minSeconds = Number(query.get("min_seconds") || "1");
const warmup = Number(query.get("warmup") || "3");
// WASM from its own small bundle (the all-in-one bundle's WASM ran 1.2-4x slower), WebGPU from
// the WebGPU bundle, WebNN from the bundle that carries its execution provider
const BUNDLES = {
  "ort-web-wasm": ["ort.wasm.min.mjs", "wasm"],
  "ort-web-webgpu": ["ort.webgpu.min.mjs", "webgpu"],
  "ort-web-webnn": ["ort.all.min.mjs", "webnn"],
};

class Skip extends Error {}

// what onnxruntime-web warns about (a thread count it could not honour, for one) goes into the
// result as well as the console: not every driver can read a browser's console
const warnings = [];
for (const level of ["warn", "error"]) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    warnings.push(args.map(String).join(" ").slice(0, 500));
    original(...args);
  };
}

async function probe(result) {
  if (runtime === "ort-web-webnn") {
    if (!("ml" in navigator)) throw new Skip("navigator.ml is absent: this browser does not expose WebNN");
    try {
      await navigator.ml.createContext();
    } catch (error) {
      throw new Skip(`navigator.ml.createContext() failed: ${error.name}: ${error.message}`);
    }
  }
  if (runtime === "ort-web-webgpu") {
    if (!("gpu" in navigator)) throw new Skip("navigator.gpu is absent: this browser does not expose WebGPU");
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) throw new Skip("navigator.gpu.requestAdapter() returned no adapter");
    const info = adapter.info || {};
    result.adapter = {
      vendor: info.vendor || "", architecture: info.architecture || "",
      device: info.device || "", description: info.description || "",
      fallback: Boolean(adapter.isFallbackAdapter || info.isFallbackAdapter),
    };
  }
}

async function bytes(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.arrayBuffer();
}

async function main() {
  // the capability probe loads this page for its origin and isolation only
  if (runtime === "none") return;
  const result = {
    runtime, threads,
    crossOriginIsolated: self.crossOriginIsolated,
    hardwareConcurrency: navigator.hardwareConcurrency,
    userAgent: navigator.userAgent,
  };
  try {
    if (!(runtime in BUNDLES)) throw new Error(`unknown runtime ${runtime}`);
    await probe(result);
    const [bundle, provider] = BUNDLES[runtime];
    result.bundle = bundle;
    const ort = await import(`/ort/${bundle}`);
    ort.env.wasm.wasmPaths = "/ort/";
    // always explicit: the default here is one thread
    ort.env.wasm.numThreads = threads;
    const start = performance.now();
    const model = new Uint8Array(await bytes(query.get("model")));
    const session = await ort.InferenceSession.create(model, {
      executionProviders: [provider], graphOptimizationLevel: "all",
    });
    result.load_s = (performance.now() - start) / 1000;
    result.ort_version = ort.env.versions ? ort.env.versions.web : "";
    result.num_threads = ort.env.wasm.numThreads;
    const audio = new Float32Array(await bytes(query.get("input")));
    const dims = query.get("dims") ? query.get("dims").split(",").map(Number) : [1, audio.length];
    if (dims.reduce((a, b) => a * b, 1) !== audio.length) {
      throw new Error(`input of ${audio.length} values does not fill dims ${dims}`);
    }
    const feeds = { [session.inputNames[0]]: new ort.Tensor("float32", audio, dims) };
    let t0 = performance.now();
    let outputs = await session.run(feeds);
    result.first_call_s = (performance.now() - t0) / 1000;
    for (let i = 0; i < warmup; i++) outputs = await session.run(feeds);
    result.warmup = warmup;
    const samples = [];
    const begin = performance.now();
    while (samples.length < minIters || (performance.now() - begin) / 1000 < minSeconds) {
      t0 = performance.now();
      outputs = await session.run(feeds);
      samples.push(performance.now() - t0);
    }
    result.latency_ms = samples;
    const output = outputs[session.outputNames[0]];
    result.output_dims = output.dims;
    const posted = await fetch(`/upload/${query.get("out")}`, { method: "POST", body: output.data });
    if (!posted.ok) throw new Error(`posting the output: HTTP ${posted.status}`);
    result.status = "ok";
  } catch (error) {
    result.status = error instanceof Skip ? "skipped" : "failed";
    result.reason = error instanceof Skip ? error.message : String((error && error.stack) || error);
  }
  result.warnings = warnings;
  document.getElementById("state").textContent = result.status;
  window.__fwbench_result = result;
}

main();
