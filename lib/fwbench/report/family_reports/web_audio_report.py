"""Web audio (14_web_audio): one speech encoder in PyTorch, JAX, native ONNX Runtime and the
browser, per runtime and thread count, and what each browser can run.
"""

from __future__ import annotations

from fwbench.report import audio
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    literal,
    nonempty,
    records,
)


def _web_audio_notes(analysis) -> list:
    return [Note(literal(text)) for text in audio.sentences(analysis.meas)]


WEB_AUDIO = Section(
    "Web audio",
    "One wav2vec2 speech encoder (random weights from transformers' config) on the same audio "
    "in PyTorch eager, JAX jit, native ONNX Runtime and onnxruntime-web in Chromium "
    "(14_web_audio). The real-time factor is the median latency / the audio's seconds: below "
    "1 keeps up with a microphone. Every runtime's output is held to PyTorch's on the same "
    "fp32 input (max |diff| / max |PyTorch|, sanity bound 1e-4); the Flax twin's float64 "
    "proof is the gate. All runtimes of a thread count share one cell, timed one after the "
    "other in a single trial, so these ratios carry no interval and no A/A check.",
    (
        Each(_web_audio_notes),
        Figure(
            "web_audio_rtf",
            "Real-time factor by runtime and audio length",
            "Median latency / audio seconds per runtime, audio length and thread count; lower "
            "is faster, below 1 keeps up. Software WebGPU (SwiftShader) is a correctness "
            "check, not a GPU's speed.",
            lambda a: audio.rtf_chart(a.web_audio),
            when=nonempty("web_audio"),
        ),
        Table(
            "web_audio",
            "Latency p50/p95 (ms), real-time factor, load time (fetch and session creation, "
            "s), first call (s) and agreement with PyTorch, per runtime, thread count and "
            "audio length: medians over trials.",
            lambda a: a.web_audio,
            records("web_audio", audio.WEB_AUDIO_METRICS),
            when=nonempty("web_audio"),
        ),
        Table(
            "web_audio_skipped",
            "Runtimes that did not run here, with the reason each gave (the browser's own words).",
            lambda a: a.web_audio_skipped,
            records("web_audio", ["latency_p50_ms"]),
            when=nonempty("web_audio_skipped"),
        ),
        Table(
            "web_audio_capabilities",
            "The capability matrix: what each browser offered the page.",
            lambda a: a.web_audio_capabilities,
            records("web_audio", ["browser_capabilities"]),
            when=nonempty("web_audio_capabilities"),
        ),
    ),
    empty=lambda a: a.web_audio.empty and a.web_audio_skipped.empty,
    empty_note="No web-audio records in this run.",
    name="web_audio",
)


SECTIONS = (WEB_AUDIO,)
