"""Web audio (14_web_audio): a wav2vec2 speech encoder in every runtime this machine has, native
(PyTorch, JAX, ONNX Runtime) and in a real browser (onnxruntime-web's WASM, WebGPU and WebNN),
with load time, latency, real-time factor and agreement with PyTorch."""
