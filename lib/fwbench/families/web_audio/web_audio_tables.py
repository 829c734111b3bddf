"""The report's web-audio section: every runtime's latency and real-time factor per browser, audio
length and thread count, what was skipped and why, each browser's capabilities, the ONNX Runtime
releases on either side, and one sentence per browser runtime against native ONNX Runtime, which
quotes the browser-against-native table's estimate (14_web_audio's records)."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from fwbench.measure import verdicts
from fwbench.report import tables
from fwbench.report.sentences import interval, times
from fwbench.report.tables import extra_columns, metric_columns
from fwbench.vocab import BROWSER_LABELS, and_list

WEB_AUDIO_METRICS = [
    "latency_p50_ms",
    "latency_p95_ms",
    "rtf",
    "load_s",
    "first_call_s",
    "max_rel_err_vs_torch",
]
_RUNTIME_LABELS = {
    "torch": "PyTorch eager",
    "jax": "JAX jit",
    "onnxruntime": "native ONNX Runtime",
    "ort-web-wasm": "WASM",
    "ort-web-webgpu": "WebGPU",
    "ort-web-webnn": "WebNN",
}
KEYS = ["model", "framework", "browser", "threads", "cores", "audio_seconds"]


def _rows(meas: pd.DataFrame) -> pd.DataFrame:
    """The family's records with their audio length, browser and cores as columns: a native
    runtime's browser is "", and a browser row from before the family ran more than one browser
    is Chromium's, the only one it ran then; a cell that pinned no more cores than its threads
    (every cell before ``cores`` existed) ran on as many cores as threads."""
    rows = extra_columns(meas[meas.family == "web_audio"], ["audio_seconds", "browser", "cores"])
    rows["cores"] = rows.cores.where(rows.cores.notna(), rows.threads)
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


_CAPABILITY_COLUMNS = {
    "browser": "browser",
    "wasmSimd": "WASM SIMD",
    "sharedArrayBuffer": "WASM threads (SharedArrayBuffer)",
    "crossOriginIsolated": "cross-origin isolated",
    # the cell pins its kernel, and the browser it starts, to this many cores; what the page
    # reads from navigator.hardwareConcurrency is the browser's own answer, which need not follow
    "threads": "cores pinned",
    "hardwareConcurrency": "navigator.hardwareConcurrency",
    "follows": "reading follows the pinning",
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
    """ "Firefox ESR 153.8.0esr", or with ``major`` "Firefox ESR 153"; a one-digit major keeps its
    minor ("WebKitGTK 2.50"), since WebKitGTK's releases all start with 2."""
    label = BROWSER_LABELS.get(name, name)
    if not version:
        return label
    parts = version.split(".")
    short = parts[0] if len(parts[0]) > 1 else ".".join(parts[:2])
    return f"{label} {short if major else version}"


def capability_table(meas: pd.DataFrame) -> pd.DataFrame:
    """The capability matrix: what each browser offered the page, one row per browser version
    and cores pinned, with whether its hardwareConcurrency reading followed the pinning."""
    rows = _rows(meas)
    rows = rows[rows.metric == "browser_capabilities"]
    found = []
    pinned = rows.cores if "cores" in rows else [0] * len(rows)
    for extra, threads in zip(rows.extra, pinned, strict=True):
        caps = extra.get("capabilities", {})
        found.append(
            {
                **{k: caps.get(k) for k in _CAPABILITY_COLUMNS},
                "browser": browser_label(
                    caps.get("browser", "chromium"), caps.get("browser_version")
                ),
                "threads": int(threads) if threads == threads and threads else "",
                "webgpu": _webgpu_label(caps),
            }
        )
    if not found:
        return pd.DataFrame()
    table = pd.DataFrame(found).astype(str).drop_duplicates()
    table = table.sort_values(["browser", "threads"], kind="stable", ignore_index=True)
    follows = table.groupby("browser")[["threads", "hardwareConcurrency"]].apply(_follows)
    table["follows"] = table.browser.map(follows)
    return table[list(_CAPABILITY_COLUMNS)].rename(columns=_CAPABILITY_COLUMNS)


_MISSING = ("", "None", "nan")


def _follows(readings: pd.DataFrame) -> str:
    """Whether one browser's hardwareConcurrency equalled the cores pinned at every setting:
    only a reading that moves with the pinning shows it follows it (one setting cannot)."""
    if (readings.threads == "").any() or readings.hardwareConcurrency.isin(_MISSING).any():
        return "not recorded"
    if (readings.threads != readings.hardwareConcurrency).any():
        return "no"
    return "yes" if readings.threads.nunique() > 1 else "not shown (one setting)"


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


_SPEECH_LABELS = {"wav2vec2": "wav2vec2-{size}", "whisper": "Whisper-{size}'s encoder"}


def speech_label(model: str) -> str:
    """ "wav2vec2_base" as "wav2vec2-base", "whisper_base" as "Whisper-base's encoder"."""
    name, _, size = str(model).partition("_")
    return _SPEECH_LABELS[name].format(size=size) if name in _SPEECH_LABELS and size else model


_RUNTIME_NAMES = {label: name for name, label in _RUNTIME_LABELS.items()}
BROWSER_NAMES = {label: name for name, label in BROWSER_LABELS.items()}
_COMPARED = ["model", "framework", "browser", "threads", "audio_seconds"]


def compared(ratios: pd.DataFrame, meas: pd.DataFrame) -> pd.DataFrame:
    """Each browser runtime against native ONNX Runtime as the section's sentences and the
    summary quote it: the rows of ``ratio_table`` (the verdicts' estimate) where the campaign ran
    trials; otherwise, one trial a cell, the ratio of ``runtime_table``'s real-time factors,
    without an interval. ``framework`` and ``browser`` are the records' names."""
    if not ratios.empty:
        return ratios.assign(
            framework=ratios.runtime.map(lambda r: _RUNTIME_NAMES.get(r, r)),
            browser=ratios.browser.map(lambda b: BROWSER_NAMES.get(b, b)),
            ratio=ratios.rtf_ratio,
        )
    table = runtime_table(meas)
    if table.empty or NATIVE not in set(table.framework):
        return pd.DataFrame()
    setting = ["model", "threads", "audio_seconds"]
    native = table[table.framework == NATIVE][[*setting, "rtf"]]
    web = table[table.framework.str.startswith("ort-web")]
    both = web.merge(native, on=setting, suffixes=("", "_native"))
    return both.assign(
        ratio=both.rtf / both.rtf_native, ci_low=math.nan, ci_high=math.nan, design="", verdict=""
    )[[*_COMPARED, "ratio", "ci_low", "ci_high", "design", "verdict", "rtf", "rtf_native"]]


def _verdict_words(row) -> str:
    if row.verdict == "faster":
        return f"{'native ONNX Runtime' if row.faster == 'native' else 'the browser'} is faster"
    if row.verdict == verdicts.WITHIN_ONE_RUN:
        return "within one run, so no winner is called"
    return verdicts.words(str(row.verdict))


def _estimate_words(row) -> str:
    """The estimate's interval, design and verdict, or for one trial a cell the two medians."""
    if not row.design:
        return (
            f"real-time factor {row.rtf:.3f} against {row.rtf_native:.3f}; one trial a cell, "
            "so no interval"
        )
    return (
        f"ratio of real-time factors, 95% interval {interval(row.ci_low, row.ci_high)}, "
        f"{row.design}; {_verdict_words(row)}"
    )


def sentences(ratios: pd.DataFrame, meas: pd.DataFrame) -> list[str]:
    """For every browser runtime that ran: how much slower (or faster) than native ONNX Runtime
    on the same model, audio and threads, the number its row of ``compared`` holds."""
    rows = compared(ratios, meas)
    names = _browser_names(meas)
    software = _software(meas)
    out = []
    for row in rows.itertuples():
        label = _RUNTIME_LABELS.get(row.framework, row.framework)
        if (row.model, row.framework, row.browser, row.threads, row.audio_seconds) in software:
            label = f"software {label} (a CPU rasteriser, not a GPU)"
        threads = f"{int(row.threads)} thread" + ("s" if int(row.threads) != 1 else "")
        pace = (
            f"{times(row.ratio)} slower than native ONNX Runtime"
            if row.ratio >= 1
            else f"faster than native ONNX Runtime, at {times(row.ratio)} its real-time factor"
        )
        browser = names.get(row.browser, browser_label(row.browser))
        out.append(
            f"In {browser}, {speech_label(row.model)} on {label} with {threads} runs "
            f"{row.audio_seconds:g} s of audio {pace} ({_estimate_words(row)})."
        )
    return out


def summary_sentence(rows: pd.DataFrame, meas: pd.DataFrame) -> list[str]:
    """The executive summary's line (``compared`` rows): the range of every browser runtime's
    ratio to native ONNX Runtime, over what, on what design, and the verdicts' tally."""
    # a software WebGPU adapter is a correctness check, not a speed worth a summary's range
    software = _software(meas)
    if not rows.empty:
        rows = rows[[tuple(r) not in software for r in rows[_COMPARED].itertuples(index=False)]]
    if rows.empty:
        return []
    names = _browser_names(meas)
    low, high = rows.ratio.min(), rows.ratio.max()
    span = times(low) if f"{low:.2f}" == f"{high:.2f}" else f"{times(low)} to {times(high)}"
    if low >= 1:
        pace = f"ran {span} slower than native ONNX Runtime"
    else:
        pace = f"ran at {span} native ONNX Runtime's real-time factor"
    runtimes = and_list(sorted({_RUNTIME_LABELS.get(f, f) for f in rows.framework}))
    browsers = and_list(names.get(b, browser_label(b)) for b in sorted(set(rows.browser)))
    threads = sorted(set(rows.threads.astype(int)))
    over = (
        f"{and_list(speech_label(m) for m in sorted(set(rows.model)))}, "
        f"{and_list(threads)} thread{'s' if threads != [1] else ''}, "
        f"{and_list(f'{s:g}' for s in sorted(set(rows.audio_seconds)))} s of audio"
    )
    if not rows.design.any():
        how = "ratios of the runtime table's medians, one trial a cell, so no interval"
    else:
        said = rows.apply(_verdict_words, axis=1)
        tally = (
            said.iloc[0]
            if said.nunique() == 1
            else and_list(f"{words} in {n}" for words, n in said.value_counts().items())
        )
        designs = and_list(sorted(set(rows.design)))
        how = f"the estimates of the browser-against-native table, {designs}; {tally}"
    return [
        f"Web audio: onnxruntime-web's {runtimes} in {browsers} {pace} "
        + ("in its one comparison" if len(rows) == 1 else f"in all {len(rows)} comparisons")
        + f" ({over}; {how})."
    ]


def versions_sentence(meas: pd.DataFrame) -> str:
    """The ONNX Runtime releases on either side of the browser-against-native ratios, as the
    records name them (native: the Python package; the browser: onnxruntime-web's bundle)."""
    rows = _rows(meas)
    rows = rows[rows.metric == "rtf"]
    native = sorted({str(e["onnxruntime"]) for e in rows.extra if e.get("onnxruntime")})
    web = sorted({str(e["ort_version"]) for e in rows.extra if e.get("ort_version")})
    if not native and not web:
        return ""
    unknown = "(not recorded)"
    text = (
        f"Native ONNX Runtime ran onnxruntime {and_list(native) if native else unknown} and the "
        f"browsers onnxruntime-web {and_list(web) if web else unknown}, as the records name them"
    )
    if native and web and native != web:
        # a ratio across releases also holds whatever changed between them
        text += ": different releases, so each browser-against-native ratio also holds what "
        text += "changed between them"
    return text + "."


NATIVE = "onnxruntime"


def most_trials(meas: pd.DataFrame) -> int:
    """The most trials any configuration (model, runtime, browser, threads, audio) ran in; a cell
    run once counts one, and a family without records none."""
    rows = _rows(meas)
    rows = rows[(rows.metric == "rtf") & (rows.status == "ok")]
    return int(rows.groupby(KEYS, dropna=False).trial.nunique().max()) if len(rows) else 0


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
                "runtime": _RUNTIME_LABELS.get(runtime, runtime),
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
            f"{_RUNTIME_LABELS.get(f, f)} · {browser_label(b)}" if b else _RUNTIME_LABELS.get(f, f)
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
    wasm = ratios[ratios.runtime == _RUNTIME_LABELS["ort-web-wasm"]] if len(ratios) else ratios
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
        out.append("What each browser offered the page: " + _capability_sentence(capabilities))
    return out


def _span(low: float, high: float) -> str:
    return f"{low:.2f}×" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}×"


def _capability_sentence(capabilities: pd.DataFrame) -> str:
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
