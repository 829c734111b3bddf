// Streaming like a microphone: chunks of one second from an AudioWorklet, each run through the
// model as it arrives. Per chunk: the model's latency, how long the chunk waited for the model,
// and how many chunks were queued behind it (a backlog means the pipeline does not keep up).
// Query: threads, model, chunks (how many to process), chunk (samples, default 16000).
const query = new URLSearchParams(location.search);
const threads = Number(query.get("threads") || "1");
const wanted = Number(query.get("chunks") || "5");
const chunkSamples = Number(query.get("chunk") || "16000");

async function main() {
  const result = { threads, crossOriginIsolated: self.crossOriginIsolated, chunks: [] };
  try {
    const ort = await import("/ort/ort.wasm.min.mjs");
    ort.env.wasm.wasmPaths = "/ort/";
    ort.env.wasm.numThreads = threads;
    const model = new Uint8Array(await (await fetch(query.get("model"))).arrayBuffer());
    const session = await ort.InferenceSession.create(model, { executionProviders: ["wasm"] });
    const inputName = session.inputNames[0];
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false,
               channelCount: 1 },
    });
    const context = new AudioContext({ sampleRate: 16000 });
    result.sample_rate = context.sampleRate;
    await context.audioWorklet.addModule("chunker.js");
    const node = new AudioWorkletNode(context, "chunker", { processorOptions: { chunk: chunkSamples } });
    context.createMediaStreamSource(stream).connect(node);
    const queue = [];
    let busy = false;
    const done = new Promise((resolve) => {
      async function drain() {
        busy = true;
        while (queue.length && result.chunks.length < wanted) {
          const item = queue.shift();
          const start = performance.now();
          await session.run({ [inputName]: new ort.Tensor("float32", item.data, [1, item.data.length]) });
          const end = performance.now();
          result.chunks.push({ latency_ms: end - start, wait_ms: start - item.arrived, backlog: queue.length });
        }
        busy = false;
        if (result.chunks.length >= wanted) resolve();
      }
      node.port.onmessage = (event) => {
        queue.push({ data: event.data, arrived: performance.now() });
        if (!busy) drain();
      };
    });
    await done;
    stream.getTracks().forEach((track) => track.stop());
    await context.close();
    result.status = "ok";
  } catch (error) {
    result.status = "failed";
    result.reason = String((error && error.stack) || error);
  }
  document.getElementById("state").textContent = result.status;
  window.__fwbench_result = result;
}

main();
