"""The report's web-audio section: every runtime's latency and real-time factor per audio length
and thread count, what was skipped and why, the browser's capabilities, and one sentence per
browser runtime against native ONNX Runtime (14_web_audio's records)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from fwbench.report.tables import extra_columns, metric_columns

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
KEYS = ["model", "framework", "threads", "audio_seconds"]


def _rows(meas: pd.DataFrame) -> pd.DataFrame:
    return extra_columns(meas[meas.family == "web_audio"], ["audio_seconds"])


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


def capability_table(meas: pd.DataFrame) -> pd.DataFrame:
    """The capability matrix: what each browser offered the page, one row per browser version."""
    rows = _rows(meas)
    rows = rows[rows.metric == "browser_capabilities"]
    found = []
    for extra in rows.extra:
        caps = extra.get("capabilities", {})
        version = caps.get("browser_version", "")
        found.append(
            {
                **{k: caps.get(k) for k in CAPABILITY_COLUMNS},
                "browser": f"Chromium {version}" if version else "Chromium",
                "webgpu": _webgpu_label(caps),
            }
        )
    if not found:
        return pd.DataFrame()
    table = pd.DataFrame(found).astype(str).drop_duplicates().reset_index(drop=True)
    return table.rename(columns=CAPABILITY_COLUMNS)


def _browser_name(meas: pd.DataFrame) -> str:
    versions = [e.get("browser_version") for e in _rows(meas).extra if e.get("browser_version")]
    return f"Chromium {versions[0].split('.')[0]}" if versions else "the browser"


def _software(meas: pd.DataFrame) -> set[tuple]:
    """(model, framework, threads, audio_seconds) of the rows that ran on a software adapter."""
    rows = _rows(meas)
    rows = rows[rows.metric == "latency_p50_ms"]
    return {
        (r.model, r.framework, r.threads, r.audio_seconds)
        for r in rows.itertuples()
        if r.extra.get("software_webgpu")
    }


def sentences(meas: pd.DataFrame) -> list[str]:
    """For every browser runtime that ran: how much slower (or faster) than native ONNX Runtime
    on the same audio, threads and model."""
    table = runtime_table(meas)
    if table.empty or "onnxruntime" not in set(table.framework):
        return []
    browser = _browser_name(meas)
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
        if (row.model, row.framework, row.threads, row.audio_seconds) in software:
            label = f"software {label} (a CPU rasteriser, not a GPU)"
        threads = f"{int(row.threads)} thread" + ("s" if int(row.threads) != 1 else "")
        pace = f"{ratio:.1f}× slower" if ratio >= 1 else f"{1 / ratio:.1f}× faster"
        out.append(
            f"In {browser}, {label} with {threads} runs {row.audio_seconds:g} s of audio {pace} "
            f"than native ONNX Runtime (real-time factor {row.rtf:.3f} against "
            f"{native.loc[key, 'rtf']:.3f})."
        )
    return out


def rtf_chart(table: pd.DataFrame) -> alt.Chart:
    frame = table.assign(
        runtime=[RUNTIME_LABELS.get(f, f) for f in table.framework],
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
