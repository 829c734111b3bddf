"""The web-audio family: the audio, the wav2vec2 twin's float64 proof, the ONNX export in native
ONNX Runtime, the page server's isolation headers, onnxruntime-web's WASM, WebGPU and WebNN in a
real Chromium, and the notebook through the runner (streaming included), its records indexed.

The browser tests need Debian's Chromium (`make browser`) and onnxruntime-web (`make web`); they
are skipped with the reason where either is missing, and fail instead under
FWBENCH_REQUIRE_BROWSER=1 (CI)."""

import asyncio
import json
import os
import urllib.error
import urllib.request

import numpy as np
import pandas as pd
import pytest

from fwbench.families.web_audio import native, signals
from fwbench.families.web_audio import web_audio_tables as audio_report
from fwbench.measure.timing import StopRule
from tests.conftest import REPO, run_cli

QUICK = StopRule(min_iters=2, min_seconds=0.0)
RECORDS_MIME = "application/vnd.fwbench.records+json"
FP32_BOUND = 1e-4  # the sanity bound on an fp32 runtime against PyTorch


def test_the_audio_is_seeded_and_round_trips(tmp_path):
    audio = signals.synthetic_speech(0.5, seed=3)
    assert audio.dtype == np.float32 and audio.shape == (8000,)
    assert np.array_equal(audio, signals.synthetic_speech(0.5, seed=3))
    assert not np.array_equal(audio, signals.synthetic_speech(0.5, seed=4))
    assert np.max(np.abs(audio)) == pytest.approx(0.5)
    back = signals.read_f32(signals.write_f32(audio, tmp_path / "a.f32"))
    assert np.array_equal(back, audio)
    with pytest.raises(ValueError, match="positive"):
        signals.synthetic_speech(0.0)


def test_unknown_runtimes_are_refused():
    assert native.check_runtimes(["torch", "ort-web-wasm"]) == ["torch", "ort-web-wasm"]
    with pytest.raises(ValueError, match="tensorrt"):
        native.check_runtimes(["torch", "tensorrt"])


def test_a_campaign_with_an_unknown_runtime_is_bad_input(tmp_path):
    campaign = tmp_path / "bad.yaml"
    campaign.write_text(
        f"campaign: web_audio_bad\nsteps:\n  - notebook: {REPO}/notebooks/14_web_audio\n"
        "    params: {runtimes: [torch, tensorrt]}\n"
    )
    proc = run_cli("run", campaign, "--out", tmp_path / "out", "--dry-run")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "tensorrt" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def tiny_pair():
    from fwbench.models.speech import build_speech_pair

    return build_speech_pair("tiny", seed=0)


@pytest.fixture(scope="module")
def tiny_onnx(tiny_pair, tmp_path_factory):
    from fwbench.families.web_audio.onnx_export import export_onnx

    folder = tmp_path_factory.mktemp("onnx")
    return export_onnx(tiny_pair[0], folder / "model.onnx", signals.synthetic_speech(1.0))


def test_the_flax_twin_computes_transformers_encoder_in_float64(tiny_pair):
    torch_model, flax_model = tiny_pair
    audio = signals.synthetic_speech(0.5)
    assert native.twin_parity(torch_model, flax_model, audio) <= 1e-10
    # the proof left the torch model in float32, for the timing
    assert {str(p.dtype) for p in torch_model.parameters()} == {"torch.float32"}
    reference = native.torch_output(torch_model, audio)
    assert reference.shape == (24, 256)
    # the function is not trivial: the output moves with the input
    other = native.torch_output(torch_model, audio[::-1].copy())
    assert native.agreement(other, reference)[1] > 1e-2


def test_the_onnx_export_runs_any_length_in_onnxruntime(tiny_pair, tiny_onnx):
    torch_model, _ = tiny_pair
    for seconds in (1.0, 2.5):
        audio = signals.synthetic_speech(seconds, seed=1)
        ours = native.run_onnxruntime(tiny_onnx, audio, 1, QUICK)
        ref = native.torch_output(torch_model, audio)
        assert ours.status == "ok" and len(ours.latency_ms) >= 2
        assert ours.output.shape == ref.shape
        assert native.agreement(ours.output, ref)[1] <= FP32_BOUND


def test_the_page_server_isolates_and_takes_uploads(tmp_path):
    from fwbench.families.web_audio import browser

    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "x.mjs").write_text("export const a = 1;")
    (dist / "x.wasm").write_bytes(b"\x00asm")
    with browser.serve(tmp_path, dist) as url:
        with urllib.request.urlopen(f"{url}/ort/x.mjs") as response:
            assert response.headers["Content-Type"].startswith("text/javascript")
            assert response.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
            assert response.headers["Cross-Origin-Resource-Policy"] == "same-origin"
        with urllib.request.urlopen(f"{url}/ort/x.wasm") as response:
            assert response.headers["Content-Type"] == "application/wasm"
        request = urllib.request.Request(f"{url}/upload/out.f32", data=b"\x00" * 8, method="POST")
        with urllib.request.urlopen(request) as response:
            assert response.status == 204
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{url}/files/../../etc/passwd")
    assert (tmp_path / "out.f32").read_bytes() == b"\x00" * 8


def test_software_adapters_are_told_from_gpus():
    from fwbench.families.web_audio import browser

    swiftshader = {"vendor": "google", "architecture": "swiftshader", "fallback": True}
    assert browser.is_software_adapter(swiftshader)
    assert browser.is_software_adapter({"vendor": "mesa", "description": "llvmpipe (LLVM 15)"})
    assert not browser.is_software_adapter({"vendor": "nvidia", "architecture": "hopper"})


def test_a_checkout_without_onnxruntime_web_says_how_to_get_it(tmp_path):
    from fwbench.families.web_audio import browser

    reason = browser.unavailable(tmp_path)  # a root whose web/ was never installed
    assert reason is not None
    assert any(fix in reason for fix in ("make web", "make browser", "pip install"))


def _browser_or_skip(name: str = "chromium"):
    from fwbench.families.web_audio import browser

    reason = browser.unavailable(REPO, name)
    if reason:
        if os.environ.get("FWBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"FWBENCH_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    return browser


def test_unknown_browsers_are_refused_and_a_missing_one_says_how_to_get_it(tmp_path, monkeypatch):
    from fwbench.families.web_audio import drivers

    assert drivers.check_browsers(["webkit", "firefox"]) == ["webkit", "firefox"]
    with pytest.raises(ValueError, match="safari"):
        drivers.check_browsers(["chromium", "safari"])
    monkeypatch.setattr(drivers, "FIREFOX", str(tmp_path / "no-firefox"))
    assert "make browser" in drivers.unavailable("firefox")
    campaign = tmp_path / "bad.yaml"
    campaign.write_text(
        f"campaign: web_audio_bad\nsteps:\n  - notebook: {REPO}/notebooks/14_web_audio\n"
        "    params: {browsers: [chromium, safari]}\n"
    )
    proc = run_cli("run", campaign, "--out", tmp_path / "out", "--dry-run")
    assert proc.returncode == 2 and "safari" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_a_wasm_run_on_fewer_threads_than_asked_is_never_reported_as_asked():
    from fwbench.families.web_audio import browser

    warned = {"num_threads": 1, "warnings": ["env.wasm.numThreads is set to 2, but ..."]}
    reason = browser.thread_fallback("ort-web-wasm", 2, warned)
    assert reason.startswith("asked for 2 WASM thread(s), onnxruntime-web ran 1")
    assert "numThreads is set to 2" in reason
    assert browser.thread_fallback("ort-web-wasm", 2, {"num_threads": 2}) is None
    assert "ran None" in browser.thread_fallback("ort-web-wasm", 1, {})
    assert browser.thread_fallback("ort-web-webgpu", 2, {"num_threads": 1}) is None


def test_the_report_names_each_browser_and_reads_older_rows_as_chromiums():
    def row(framework, metric, value, **extra):
        return {"family": "web_audio", "model": "wav2vec2_tiny", "framework": framework,
                "threads": 2, "metric": metric, "value": value, "status": "ok",
                "extra": {"audio_seconds": 1.0, **extra}}  # fmt: skip

    meas = pd.DataFrame(
        [
            row("onnxruntime", "latency_p50_ms", 10.0),
            row("onnxruntime", "rtf", 0.01),
            # a row from before the family ran more than one browser: no browser named
            row("ort-web-wasm", "latency_p50_ms", 20.0, browser_version="140.0.1"),
            row("ort-web-wasm", "rtf", 0.02),
            row(
                "ort-web-wasm",
                "latency_p50_ms",
                40.0,
                browser="firefox",
                browser_version="153.8.0esr",
            ),  # fmt: skip
            row("ort-web-wasm", "rtf", 0.04, browser="firefox"),
            row("chromium", "browser_capabilities", None, capabilities={"browser_version": "140"}),
            row(
                "firefox",
                "browser_capabilities",
                None,
                capabilities={"browser": "firefox", "browser_version": "153.8.0esr"},
            ),  # fmt: skip
        ]
    )
    table = audio_report.runtime_table(meas)
    assert list(table.browser) == ["", "chromium", "firefox"]
    # one trial a cell: no verdicts' table, so the ratio of the runtime table's medians
    assert audio_report.sentences(pd.DataFrame(), meas) == [
        "In Chromium 140, wav2vec2-tiny on WASM with 2 threads runs 1 s of audio 2.00× slower "
        "than native ONNX Runtime (real-time factor 0.020 against 0.010; one trial a cell, so no "
        "interval).",
        "In Firefox ESR 153, wav2vec2-tiny on WASM with 2 threads runs 1 s of audio 4.00× slower "
        "than native ONNX Runtime (real-time factor 0.040 against 0.010; one trial a cell, so no "
        "interval).",
    ]
    caps = audio_report.capability_table(meas)
    assert list(caps.browser) == ["Chromium 140", "Firefox ESR 153.8.0esr"]


def test_browser_against_native_goes_through_the_verdicts_with_trials_as_rounds():
    rng = np.random.default_rng(4)
    rows = []
    for run in ("r1", "r2"):
        shift = rng.normal(0, 0.01)
        for trial in range(1, 6):
            native = 0.1 * np.exp(rng.normal(0, 0.02))
            for framework, browser, times in [
                ("onnxruntime", None, 1.0),
                ("ort-web-wasm", "chromium", 3.0),
                ("ort-web-wasm", "firefox", 1.0),
            ]:
                value = native * times * np.exp(shift + rng.normal(0, 0.005) if browser else 0)
                extra = {"audio_seconds": 1.0, **({"browser": browser} if browser else {})}
                rows.append({"family": "web_audio", "model": "wav2vec2_base", "threads": 2,
                             "framework": framework, "metric": "rtf", "value": value,
                             "status": "ok", "run_id": run, "trial": trial, "extra": extra})  # fmt: skip
    meas = pd.DataFrame(rows)
    rounds = audio_report.ratio_rounds(meas)
    assert len(rounds) == 2 * 2 * 5  # two browsers, two runs of five trials
    table = audio_report.ratio_table(rounds).set_index("browser")
    chromium, firefox = table.loc["Chromium"], table.loc["Firefox ESR"]
    assert chromium.rtf_ratio == pytest.approx(3.0, rel=0.05)
    assert chromium.faster == "native" and chromium.verdict == "faster"
    assert chromium.design == "2 runs × 5 rounds"
    assert firefox.ci_low < 1 < firefox.ci_high and firefox.faster == ""
    # one trial per cell (no trial number above 0) gives no rounds, so no verdict
    assert audio_report.ratio_rounds(meas.assign(trial=0)).empty
    # the README's sentence: each browser's range at the longest audio; one run of the same
    # rounds says it calls no winner
    one_run = audio_report.ratio_table(audio_report.ratio_rounds(meas[meas.run_id == "r1"]))
    caps = pd.DataFrame(
        [
            {"browser": "Chromium 156", "WASM SIMD": "True",
             "WASM threads (SharedArrayBuffer)": "True", "cross-origin isolated": "True",
             "WebGPU adapter": "google swiftshader (software)",
             "WebNN": "NotSupportedError: WebNN is not supported on this platform."},
            {"browser": "Firefox ESR 153", "WASM SIMD": "True",
             "WASM threads (SharedArrayBuffer)": "False", "cross-origin isolated": "False",
             "WebGPU adapter": "no adapter", "WebNN": "absent"},
        ]
    )  # fmt: skip
    ratios, offered = audio_report.readme_lines(one_run, caps, "report.md")
    assert "1 run × 5 rounds, 95% intervals, within one run, so no winner is called" in ratios
    found = one_run.set_index("browser").loc["Chromium"]
    assert (
        f"Chromium {found.rtf_ratio:.2f}× (intervals within {found.ci_low:.2f}-"
        f"{found.ci_high:.2f}×); Firefox ESR " in ratios
    )
    assert offered.endswith(
        "Chromium 156: WASM SIMD, WASM threads, cross-origin isolation, WebGPU on google "
        "swiftshader (software), WebNN refused (NotSupportedError). Firefox ESR 153: WASM SIMD, "
        "WebGPU without an adapter, no WebNN."
    )


@pytest.mark.parametrize("name", ["chromium", "firefox", "webkit"])
def test_each_browser_runs_wasm_on_the_threads_asked_and_agrees_with_pytorch(
    name, tiny_pair, tiny_onnx
):
    browser = _browser_or_skip(name)
    files = tiny_onnx.parent
    audio = signals.synthetic_speech(1.0, seed=5)
    signals.write_f32(audio, files / "audio_5.f32")
    runs = [("ort-web-wasm", 2, "audio_5.f32")]
    (wasm,), caps = browser.bench(
        files, browser.ort_web_dist(REPO), runs, "model.onnx", 2, 0.0, name=name
    )
    assert caps["browser"] == name and caps["browser_version"]
    assert caps["crossOriginIsolated"] is True and caps["sharedArrayBuffer"] is True
    assert caps["wasmSimd"] is True
    assert wasm.status == "ok", wasm.reason
    assert wasm.details["num_threads"] == 2 and wasm.details["browser"] == name
    reference = native.torch_output(tiny_pair[0], audio)
    assert native.agreement(wasm.output, reference)[1] <= FP32_BOUND


def test_streaming_says_why_it_does_not_run_where_it_cannot(tmp_path, monkeypatch):
    from fwbench.families.web_audio import browser, drivers

    assert browser.no_stream("chromium") is None
    assert "fake microphone" in browser.no_stream("webkit")
    # Firefox's audio needs a sound server to run: without PulseAudio its stream is refused
    # before a browser starts, with the command that installs it
    monkeypatch.setattr(drivers.shutil, "which", lambda _name: None)
    assert "make browser" in browser.no_stream("firefox")
    with pytest.raises(drivers.DriverError, match="PulseAudio"):
        browser.stream("http://127.0.0.1:9", tmp_path / "a.wav", "model.onnx", 1, 1, "firefox")


def test_firefox_streams_its_fake_microphone_into_the_model(tiny_onnx, tmp_path):
    browser = _browser_or_skip("firefox")
    why = browser.no_stream("firefox")
    if why:
        if os.environ.get("FWBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"FWBENCH_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    with browser.serve(tiny_onnx.parent, browser.ort_web_dist(REPO)) as url:
        # the WAV is Chromium's; Firefox's fake microphone plays its own tone
        streamed = browser.stream(url, tmp_path / "unused.wav", "model.onnx", 1, 2, "firefox")
    assert streamed["status"] == "ok", streamed.get("reason")
    assert streamed["browser"] == "firefox" and "tone" in streamed["source"]
    assert streamed["sample_rate"] == 16000
    assert len(streamed["chunks"]) == 2 and all(c["latency_ms"] > 0 for c in streamed["chunks"])


def test_webkit_without_shared_memory_is_caught_running_one_thread(tiny_onnx, monkeypatch):
    """WebKitGTK hides SharedArrayBuffer unless told; onnxruntime-web then warns and runs one
    thread. The run must come back failed, naming the fallback."""
    browser = _browser_or_skip("webkit")
    from fwbench.families.web_audio import drivers

    monkeypatch.setattr(drivers, "WEBKIT_ENV", {})
    files = tiny_onnx.parent
    signals.write_f32(signals.synthetic_speech(0.5, seed=6), files / "audio_6.f32")
    runs = [("ort-web-wasm", 2, "audio_6.f32")]
    (wasm,), caps = browser.bench(
        files, browser.ort_web_dist(REPO), runs, "model.onnx", 1, 0.0, name="webkit"
    )
    assert caps["sharedArrayBuffer"] is False
    assert wasm.status == "failed" and wasm.details.get("num_threads") == 1, (
        wasm.reason,
        wasm.details,
    )
    assert wasm.reason.startswith("asked for 2 WASM thread(s), onnxruntime-web ran 1")


def test_wasm_and_webgpu_in_chromium_agree_with_pytorch_and_webnn_says_why_not(
    tiny_pair, tiny_onnx, tmp_path
):
    browser = _browser_or_skip()
    torch_model, _ = tiny_pair
    files = tiny_onnx.parent
    references = {}
    for seconds in (1.0, 0.25):  # WebGPU gets the short one: here it is likely software
        audio = signals.synthetic_speech(seconds, seed=2)
        signals.write_f32(audio, files / f"audio_{seconds:g}.f32")
        references[f"audio_{seconds:g}.f32"] = native.torch_output(torch_model, audio)
    runs = [
        ("ort-web-wasm", 2, "audio_1.f32"),
        ("ort-web-webgpu", 1, "audio_0.25.f32"),
        ("ort-web-webnn", 1, "audio_1.f32"),
    ]

    async def in_a_running_loop():  # as in a Jupyter kernel, where Playwright's sync API balks
        return browser.bench(files, browser.ort_web_dist(REPO), runs, "model.onnx", 2, 0.0)

    results, caps = asyncio.run(in_a_running_loop())
    wasm, webgpu, webnn = results

    assert caps["crossOriginIsolated"] is True and caps["wasmSimd"] is True
    assert caps["sharedArrayBuffer"] is True and caps["browser_version"]

    assert wasm.status == "ok", wasm.reason
    assert wasm.details["crossOriginIsolated"] is True and wasm.details["num_threads"] == 2
    assert wasm.details["bundle"] == "ort.wasm.min.mjs"
    assert len(wasm.latency_ms) >= 2 and wasm.load_s > 0 and wasm.first_call_s > 0
    assert native.agreement(wasm.output, references["audio_1.f32"])[1] <= FP32_BOUND

    if caps["webgpu"] in ("absent", "no adapter"):
        assert webgpu.status == "skipped" and "navigator.gpu" in webgpu.reason
    else:
        assert webgpu.status == "ok", webgpu.reason
        assert webgpu.details["bundle"] == "ort.webgpu.min.mjs"
        assert webgpu.details["software_webgpu"] == browser.is_software_adapter(
            webgpu.details["adapter"]
        )
        assert native.agreement(webgpu.output, references["audio_0.25.f32"])[1] <= FP32_BOUND

    # WebNN is the browser's to offer: where it does not, the row carries the browser's words
    if webnn.status == "skipped":
        assert "navigator.ml" in webnn.reason
        assert caps["webnn"] != "context"
    else:
        assert webnn.status == "ok", webnn.reason
        assert native.agreement(webnn.output, references["audio_1.f32"])[1] <= FP32_BOUND


def _records(out):
    (executed,) = out.glob("web_audio_test/*/14_web_audio/*.ipynb")
    notebook = json.loads(executed.read_text())
    return [
        row
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        for row in output.get("data", {}).get(RECORDS_MIME, [])
    ]


@pytest.mark.slow
def test_the_notebook_runs_every_runtime_and_streams_through_the_runner(tmp_path):
    _browser_or_skip()
    campaign = tmp_path / "web_audio.yaml"
    campaign.write_text(
        f"campaign: web_audio_test\nsteps:\n  - notebook: {REPO}/notebooks/14_web_audio\n"
        "    params: {model_size: tiny, audio_seconds: [1.0], min_iters: 2, min_seconds: 0.0,\n"
        "             streaming: true, browsers: [chromium, webkit],\n"
        "             runtimes: [torch, jax, onnxruntime, ort-web-wasm, ort-web-webnn]}\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _records(out)
    assert records and all(r["family"] == "web_audio" for r in records)

    (parity,) = [r for r in records if r["metric"] == "fp64_output_parity_max_rel"]
    assert parity["status"] == "ok" and parity["value"] <= 1e-10

    def by_runtime(metric):
        return {
            (r["framework"], r["extra"].get("browser", "")): r
            for r in records
            if r["metric"] == metric
        }

    latency = by_runtime("latency_p50_ms")
    wasm_rows = [("ort-web-wasm", "chromium"), ("ort-web-wasm", "webkit")]
    native_rows = [("torch", ""), ("jax", ""), ("onnxruntime", "")]
    for key in native_rows + wasm_rows:
        assert latency[key]["status"] == "ok" and latency[key]["value"] > 0, key
    for name in ("chromium", "webkit"):
        webnn = latency[("ort-web-webnn", name)]
        assert webnn["status"] in ("ok", "skipped")
        if webnn["status"] == "skipped":
            assert "navigator.ml" in webnn["error"]
    agreement = by_runtime("max_rel_err_vs_torch")
    assert agreement[("torch", "")]["value"] == 0.0
    for key in native_rows[1:] + wasm_rows:
        assert agreement[key]["status"] == "ok" and agreement[key]["value"] <= FP32_BOUND
    rtf = by_runtime("rtf")
    for key in wasm_rows:
        assert rtf[key]["value"] == pytest.approx(latency[key]["value"] / 1e3)
        wasm = latency[key]["extra"]
        assert wasm["crossOriginIsolated"] is True and wasm["num_threads"] == 1
        assert wasm["ort_version"] and wasm["browser_version"]

    chunks = {r["extra"]["browser"]: r for r in records if r["metric"] == "chunk_latency_p50_ms"}
    chunk = chunks["chromium"]
    assert chunk["status"] == "ok" and chunk["value"] > 0 and chunk["n"] == 1
    assert chunk["extra"]["per_chunk"][0]["latency_ms"] == pytest.approx(chunk["value"])
    assert (
        chunks["webkit"]["status"] == "skipped" and "fake microphone" in chunks["webkit"]["error"]
    )
    caps = {r["framework"]: r for r in records if r["metric"] == "browser_capabilities"}
    assert set(caps) == {"chromium", "webkit"}
    assert all(c["extra"]["capabilities"]["crossOriginIsolated"] is True for c in caps.values())

    # the report's section reads them, one row and one sentence per browser
    meas = pd.DataFrame(records)
    table = audio_report.runtime_table(meas)
    assert set(table.framework) == {"torch", "jax", "onnxruntime", "ort-web-wasm"}
    assert set(table[table.framework == "ort-web-wasm"].browser) == {"chromium", "webkit"}
    # one trial a cell: no verdict table, so each sentence quotes the runtime table's ratio
    wasm_lines = [line for line in audio_report.sentences(pd.DataFrame(), meas) if "WASM" in line]
    assert [line.split(",")[0].split()[1] for line in wasm_lines] == ["Chromium", "WebKitGTK"]
    assert all("native ONNX Runtime" in ln and "1 s of audio" in ln for ln in wasm_lines)
    assert len(audio_report.capability_table(meas)) == 2
    skipped = audio_report.skipped_table(meas)
    assert set(skipped.framework) <= {"ort-web-webnn"}

    # and the index holds them
    import duckdb

    with duckdb.connect(str(out / "fwbench.duckdb"), read_only=True) as con:
        indexed = dict(
            con.execute(
                "select framework, count(*) from measurements where family = 'web_audio' "
                "and metric = 'rtf' group by framework"
            ).fetchall()
        )
    assert indexed == {"jax": 1, "onnxruntime": 1, "ort-web-wasm": 2, "torch": 1}  # two browsers
