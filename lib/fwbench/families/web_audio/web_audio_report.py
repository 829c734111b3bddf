"""Web audio (14_web_audio): one speech encoder in PyTorch, JAX, native ONNX Runtime and the
browser, per runtime and thread count, and what each browser can run.
"""

from __future__ import annotations

from fwbench.families.web_audio import web_audio_tables
from fwbench.measure import verdicts
from fwbench.report import sections
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    literal,
    nonempty,
    per_analysis,
    records,
)


@per_analysis
def runtimes(analysis):
    return web_audio_tables.runtime_table(analysis.meas)


@per_analysis
def ratios(analysis):
    # the rounds of every run the verdicts pool, so that their intervals carry the between-run term
    pooled = analysis.pool_meas if not analysis.pool_meas.empty else analysis.meas
    return web_audio_tables.ratio_table(web_audio_tables.ratio_rounds(pooled))


@per_analysis
def skipped(analysis):
    return web_audio_tables.skipped_table(analysis.meas)


@per_analysis
def capabilities(analysis):
    return web_audio_tables.capability_table(analysis.meas)


@per_analysis
def compared(analysis):
    # the sentences and the summary quote the rows of the ratio table, not a ratio of their own
    return web_audio_tables.compared(ratios(analysis), analysis.meas)


def _web_audio_notes(analysis) -> list:
    said = [web_audio_tables.versions_sentence(analysis.meas)]
    said += web_audio_tables.sentences(ratios(analysis), analysis.meas)
    return [Note(literal(text)) for text in said if text]


def summary_sentences(analysis) -> list[str]:
    """The executive summary's web-audio line, from the rows the section's sentences quote."""
    return web_audio_tables.summary_sentence(compared(analysis), analysis.meas)


WEB_AUDIO = Section(
    "Web audio",
    "Speech encoders (random weights from transformers' configs: wav2vec2, and Whisper's "
    "encoder, which hears a 30 s log-mel window whatever the audio's length) on the same audio "
    "in PyTorch eager, JAX jit, native ONNX Runtime and onnxruntime-web in the browsers that "
    "ran (Chromium, Firefox ESR, WebKitGTK; 14_web_audio). The real-time factor is the median "
    "latency / the audio's seconds: below 1 keeps up with a microphone. Every runtime's output "
    "is held to PyTorch's on the same fp32 input (max |diff| / max |PyTorch|, sanity bound "
    "1e-4); JAX's float64 proof (wav2vec2's Flax twin, Whisper's module through torchax) is the "
    "gate. All runtimes of a thread count share one cell, timed one after the other; the "
    "browser-versus-native ratios carry intervals where the campaign repeated its cells as "
    "interleaved trials.",
    (
        Each(_web_audio_notes),
        Figure(
            "web_audio_rtf",
            "Real-time factor by runtime and audio length",
            "Median latency / audio seconds per runtime, audio length and thread count; lower "
            "is faster, below 1 keeps up. Software WebGPU (SwiftShader) is a correctness "
            "check, not a GPU's speed.",
            lambda a: web_audio_tables.rtf_chart(runtimes(a)),
            when=nonempty(runtimes),
        ),
        Table(
            "web_audio",
            "Latency p50/p95 (ms), real-time factor, load time (fetch and session creation, "
            "s), first call (s) and agreement with PyTorch, per runtime, browser, thread count, "
            "cores and audio length: medians over trials. `threads` is each runtime's compute "
            "threads; `cores` the cores its cell pinned the kernel, and the browser it starts, "
            "to: more cores than threads leave a browser's own processes a core beside WASM's "
            "threads, and give native ONNX Runtime the same cores.",
            runtimes,
            records("web_audio", web_audio_tables.WEB_AUDIO_METRICS),
            when=nonempty(runtimes),
        ),
        Table(
            "web_audio_ratios",
            "Browser against native: each browser runtime's real-time factor ÷ native ONNX "
            "Runtime's on the same model, threads and audio (above 1: slower in the browser), "
            "with interleaved trials as rounds nested in runs through the verdicts' estimator "
            f"(its design stated): *faster*, *{verdicts.EQUIVALENT_WORDS}* or *inconclusive*; one "
            "run "
            "calls no winner.",
            ratios,
            records("web_audio", ["rtf"]),
            when=nonempty(ratios),
        ),
        Table(
            "web_audio_skipped",
            "Runtimes that did not run here, with the reason each gave (the browser's own words).",
            skipped,
            records("web_audio", ["latency_p50_ms"]),
            when=nonempty(skipped),
        ),
        Table(
            "web_audio_capabilities",
            "The capability matrix: what each browser offered the page, per thread setting. "
            "Each cell pins its kernel, and the browser it starts, to its cores "
            "(cores pinned); navigator.hardwareConcurrency is the number the browser reports to "
            "the page, which it may take from the machine rather than from that pinning "
            "(reading follows the pinning: yes only where it equalled the cores pinned at every "
            "setting measured). WASM's own thread count is read back from onnxruntime-web.",
            capabilities,
            records("web_audio", ["browser_capabilities"]),
            when=nonempty(capabilities),
        ),
    ),
    empty=lambda a: runtimes(a).empty and skipped(a).empty,
    empty_note="No web-audio records in this run.",
    name="web_audio",
)


SECTIONS = (WEB_AUDIO,)


def readme_part(content: dict, tables_dir, report_link: str) -> list[str]:
    """The README's lines: the browsers against native ONNX Runtime, with intervals, and what
    each browser offered; a report without intervals (one trial) gives its sentences."""
    if not sections.has_data(content, "web_audio"):
        return []
    ratios = sections.read_table(tables_dir, "web_audio_ratios")
    if ratios.empty:
        return sections.notes_part(content, "web_audio", "Web audio", report_link)
    capabilities = sections.read_table(tables_dir, "web_audio_capabilities")
    return web_audio_tables.readme_lines(ratios, capabilities, report_link)
