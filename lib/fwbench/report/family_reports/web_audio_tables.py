"""The report's web-audio section: every runtime's latency and real-time factor per browser, audio
length and thread count, what was skipped and why, each browser's capabilities, and one sentence
per browser runtime against native ONNX Runtime (14_web_audio's records)."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from fwbench.measure import verdicts
from fwbench.report import tables
from fwbench.report.tables import extra_columns, metric_columns
from fwbench.vocab import BROWSER_LABELS

WEB_AUDIO_METRICS = [
    "latency_p50_ms",
    "latency_p95_ms",
    "rtf",
    "load_s",
    "first_call_s",
    "max_rel_err_vs_torch",
]
RUNTIME_LABELS = {
    "torch": "PyTorch eager",
    "jax": "JAX jit",
    "onnxruntime": "native ONNX Runtime",
    "ort-web-wasm": "WASM",
    "ort-web-webgpu": "WebGPU",
    "ort-web-webnn": "WebNN",
}
KEYS = ["model", "framework", "browser", "threads", "audio_seconds"]


def _rows(meas: pd.DataFrame) -> pd.DataFrame:
    """The family's records with their audio length and browser as columns: a native runtime's
    browser is "", and a browser row from before the family ran more than one browser is
    Chromium's, the only one it ran then."""
    rows = extra_columns(meas[meas.family == "web_audio"], ["audio_seconds", "browser"])
    in_browser = rows.framework.astype(str).str.startswith("ort-web")
    rows["browser"] = [
        (b if isinstance(b, str) and b else "chromium") if web else ""
        for b, web in zip(rows.browser, in_browser, strict=True)
    ]
    return rows


def runtime_table(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per model, runtime, thread count and audio length, with the medians over trials."""
    rows = _rows(meas)
    rows = rows[rows.metric.isin(WEB_AUDIO_METRICS) & (rows.status == "ok") & rows.value.notna()]
    if rows.empty:
        return pd.DataFrame()
    return metric_columns(rows, KEYS, WEB_AUDIO_METRICS)


def skipped_table(meas: pd.DataFrame) -> pd.DataFrame:
    """The runtimes that did not run, with the reason each gave (the browser's own words)."""
    rows = _rows(meas)
    rows = rows[(rows.metric == "latency_p50_ms") & (rows.status != "ok")]
    if rows.empty:
        return pd.DataFrame()
    return rows[KEYS + ["status", "error"]].drop_duplicates().reset_index(drop=True)


CAPABILITY_COLUMNS = {
    "browser": "browser",
    "wasmSimd": "WASM SIMD",
    "sharedArrayBuffer": "WASM threads (SharedArrayBuffer)",
    "crossOriginIsolated": "cross-origin isolated",
    "hardwareConcurrency": "cores offered",
    "webgpu": "WebGPU adapter",
    "webnn": "WebNN",
}


def _webgpu_label(caps: dict) -> str:
    adapter = caps.get("webgpu_adapter") or {}
    software = adapter and (
        adapter.get("fallback")
        or any(
            name in " ".join(map(str, adapter.values())).lower()
            for name in ("swiftshader", "llvmpipe", "software")
        )
    )
    return f"{caps.get('webgpu', '')} (software)" if software else caps.get("webgpu", "")


def browser_label(name: str, version: str | None = None, major: bool = False) -> str:
    """ "Firefox ESR 153.8.0esr", or with ``major`` "Firefox ESR 153"."""
    label = BROWSER_LABELS.get(name, name)
    if not version:
        return label
    return f"{label} {version.split('.')[0] if major else version}"


def capability_table(meas: pd.DataFrame) -> pd.DataFrame:
    """The capability matrix: what each browser offered the page, one row per browser version."""
    rows = _rows(meas)
    rows = rows[rows.metric == "browser_capabilities"]
    found = []
    for extra in rows.extra:
        caps = extra.get("capabilities", {})
        found.append(
            {
                **{k: caps.get(k) for k in CAPABILITY_COLUMNS},
                "browser": browser_label(
                    caps.get("browser", "chromium"), caps.get("browser_version")
                ),
                "webgpu": _webgpu_label(caps),
            }
        )
    if not found:
        return pd.DataFrame()
    table = pd.DataFrame(found).astype(str).drop_duplicates().reset_index(drop=True)
    return table.rename(columns=CAPABILITY_COLUMNS)


def _browser_names(meas: pd.DataFrame) -> dict[str, str]:
    """Each browser's label with its major version, as its records name it."""
    rows = _rows(meas)
    names = {}
    for browser, extra in zip(rows.browser, rows.extra, strict=True):
        if browser and extra.get("browser_version"):
            names.setdefault(browser, browser_label(browser, extra["browser_version"], major=True))
    return names


def _software(meas: pd.DataFrame) -> set[tuple]:
    """(model, framework, browser, threads, audio_seconds) of the rows that ran on a software
    adapter."""
    rows = _rows(meas)
    rows = rows[rows.metric == "latency_p50_ms"]
    return {
        (r.model, r.framework, r.browser, r.threads, r.audio_seconds)
        for r in rows.itertuples()
        if r.extra.get("software_webgpu")
    }


def sentences(meas: pd.DataFrame) -> list[str]:
    """For every browser runtime that ran: how much slower (or faster) than native ONNX Runtime
    on the same audio, threads and model."""
    table = runtime_table(meas)
    if table.empty or "onnxruntime" not in set(table.framework):
        return []
    names = _browser_names(meas)
    software = _software(meas)
    native = table[table.framework == "onnxruntime"].set_index(
        ["model", "threads", "audio_seconds"]
    )
    out = []
    for row in table[table.framework.str.startswith("ort-web")].itertuples():
        key = (row.model, row.threads, row.audio_seconds)
        if key not in native.index:
            continue
        ratio = row.latency_p50_ms / native.loc[key, "latency_p50_ms"]
        label = RUNTIME_LABELS.get(row.framework, row.framework)
        if (row.model, row.framework, row.browser, row.threads, row.audio_seconds) in software:
            label = f"software {label} (a CPU rasteriser, not a GPU)"
        threads = f"{int(row.threads)} thread" + ("s" if int(row.threads) != 1 else "")
        pace = f"{ratio:.1f}× slower" if ratio >= 1 else f"{1 / ratio:.1f}× faster"
        out.append(
            f"In {names.get(row.browser, browser_label(row.browser))}, {label} with {threads} runs {row.audio_seconds:g} s of audio {pace} "
            f"than native ONNX Runtime (real-time factor {row.rtf:.3f} against "
            f"{native.loc[key, 'rtf']:.3f})."
        )
    return out


NATIVE = "onnxruntime"


def ratio_rounds(meas: pd.DataFrame) -> pd.DataFrame:
    """The verdicts' rounds of browser against native: one per run, trial and configuration (model,
    thread count, audio length) in which a browser runtime and native ONNX Runtime both ran, ``y``
    the log of the browser's real-time factor over native's (above 0: the browser slower). The
    runtimes of a trial run one after the other in one cell, so a trial pairs them; cells without
    a trial number (one trial) give none."""
    rows = _rows(meas)
    rows = rows[rows.metric == "rtf"]
    arm = [f"{f} {b}".strip() for f, b in zip(rows.framework, rows.browser, strict=True)]
    in_browser = sorted({a for a in arm if a.startswith("ort-web")})
    return tables.arm_rounds(
        rows.assign(arm=arm),
        ["model", "threads", "audio_seconds"],
        [(NATIVE, name) for name in in_browser],
        lambda key, _native, name: (key[0], *name.split(" "), int(key[1]), float(key[2])),
        lambda native, browser: math.log(browser / native),
    )


def ratio_table(rounds: pd.DataFrame) -> pd.DataFrame:
    """Each browser runtime's real-time factor over native ONNX Runtime's on the same model,
    threads and audio (above 1: slower in the browser), through the verdicts' estimator (trials
    as rounds, nested in runs; one run calls no winner)."""
    if rounds.empty:
        return pd.DataFrame()
    found = tables.estimated(rounds, imported=None)
    rows = []
    for (model, runtime, browser, threads, seconds), (e, v) in sorted(found.items()):
        # y is log(browser / native): a significant ratio above 1 is native's win
        faster = {verdicts.FASTER_B: "native", verdicts.FASTER_A: "browser"}.get(v.verdict, "")
        rows.append(
            {
                "model": model,
                "runtime": RUNTIME_LABELS.get(runtime, runtime),
                "browser": browser_label(browser),
                "threads": threads,
                "audio_seconds": seconds,
                "rtf_ratio": e.ratio,
                "ci_low": e.low,
                "ci_high": e.high,
                "design": e.design,
                "faster": faster,
                "verdict": "faster" if faster else v.verdict,
                "p_holm": v.p_holm,
            }
        )
    return pd.DataFrame(rows)


def rtf_chart(table: pd.DataFrame) -> alt.Chart:
    frame = table.assign(
        runtime=[
            f"{RUNTIME_LABELS.get(f, f)} · {browser_label(b)}" if b else RUNTIME_LABELS.get(f, f)
            for f, b in zip(table.framework, table.browser, strict=True)
        ],
        setting=[
            f"{s:g} s, {int(t)} thr"
            for s, t in zip(table.audio_seconds, table.threads, strict=True)
        ],
    )
    return (
        alt.Chart(frame)
        # points, not bars: a bar starts at zero, which a log scale cannot place
        .mark_point(filled=True, size=90)
        .encode(
            x=alt.X("runtime:N", sort="y", title=None),
            xOffset="setting:N",
            # software WebGPU sits two orders of magnitude above the rest
            y=alt.Y(
                "rtf:Q",
                scale=alt.Scale(type="log"),
                title="real-time factor (latency / audio; below 1 keeps up)",
            ),
            color=alt.Color("setting:N", title="audio, threads"),
            tooltip=["runtime", "setting", "rtf", "latency_p50_ms", "load_s"],
        )
    )


def readme_lines(ratios: pd.DataFrame, capabilities: pd.DataFrame, report_link: str) -> list[str]:
    """The README's lines: per browser, the range of WASM's real-time factor over native ONNX
    Runtime's (``ratio_table``) across models and thread counts at the longest audio, with the
    range its 95% intervals span; then what each browser offered the page."""
    out = []
    wasm = ratios[ratios.runtime == RUNTIME_LABELS["ort-web-wasm"]] if len(ratios) else ratios
    if len(wasm):
        seconds = wasm.audio_seconds.max()
        wasm = wasm[wasm.audio_seconds == seconds]
        parts = [
            f"{browser} {_span(group.rtf_ratio.min(), group.rtf_ratio.max())} (intervals within "
            f"{_span(group.ci_low.min(), group.ci_high.max())})"
            for browser, group in wasm.groupby("browser", sort=False)
        ]
        settings = (
            ", ".join(sorted(set(wasm.model)))
            + " at "
            + " and ".join(str(t) for t in sorted(set(wasm.threads)))
        )
        one_run = set(wasm.verdict) == {verdicts.WITHIN_ONE_RUN}
        out.append(
            f"onnxruntime-web's WASM against native ONNX Runtime on {seconds:g} s of audio, the "
            f"ratio of real-time factors (above 1: slower in the browser; {settings} threads; "
            f"{', '.join(sorted(set(wasm.design)))}, 95% intervals"
            + (", within one run, so no winner is called" if one_run else "")
            + "): "
            + "; ".join(parts)
            + f". Shorter audio and every runtime: the [report]({report_link})."
        )
    if len(capabilities):
        out.append("What each browser offered the page: " + capability_sentence(capabilities))
    return out


def _span(low: float, high: float) -> str:
    return f"{low:.2f}×" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}×"


def capability_sentence(capabilities: pd.DataFrame) -> str:
    """One sentence per browser version: WASM SIMD and threads, cross-origin isolation, its WebGPU
    adapter and WebNN (``capability_table``'s columns)."""
    clauses = []
    for _, row in capabilities.drop_duplicates("browser").iterrows():
        offered = [
            name
            for column, name in (
                ("WASM SIMD", "WASM SIMD"),
                ("WASM threads (SharedArrayBuffer)", "WASM threads"),
                ("cross-origin isolated", "cross-origin isolation"),
            )
            if str(row.get(column)) == "True"
        ]
        offered += [
            _webgpu_words(str(row.get("WebGPU adapter", ""))),
            _webnn_words(str(row.get("WebNN", ""))),
        ]
        clauses.append(f"{row['browser']}: {', '.join(offered)}.")
    return " ".join(clauses)


def _webgpu_words(found: str) -> str:
    """The capability probe's WebGPU reading ("absent", "no adapter" or the adapter) in words."""
    if found in ("absent", "", "nan", "None"):
        return "no WebGPU"
    return "WebGPU without an adapter" if found == "no adapter" else f"WebGPU on {found}"


def _webnn_words(found: str) -> str:
    """The probe's WebNN reading ("absent", "context" or the error it raised) in words."""
    if found in ("absent", "", "nan", "None"):
        return "no WebNN"
    return "WebNN" if found == "context" else f"WebNN refused ({found.split(':')[0]})"
