"""The web-audio report's text reads the samples its tables read: each browser-against-native
sentence quotes its row of the verdicts' table and names its model, the summary says what the
section found, the limitations count the family's trials, the capability matrix does not claim a
pinning the browser did not report, and the ONNX Runtime releases on either side are named from
the records. Built from records alone: no browser, model or framework runs here."""

import re

import numpy as np
import pandas as pd
import pytest

from fwbench.families.web_audio import web_audio_tables as audio
from fwbench.report import sentences

MODELS = ("wav2vec2_base", "whisper_base")
BROWSERS = {"chromium": "156.0.8078.114", "firefox": "153.8.0", "webkit": "2.50.6"}
# what navigator.hardwareConcurrency said at each pinning in the run this mirrors (20261202T133258Z)
REPORTED = {"chromium": {1: 1, 2: 2}, "firefox": {1: 2, 2: 2}, "webkit": {1: 4, 2: 4}}


def _row(framework, metric, value, trial, threads, seconds, model, **extra):
    return {"family": "web_audio", "model": model, "framework": framework, "threads": threads,
            "metric": metric, "value": value, "status": "ok", "run_id": "r1", "trial": trial,
            "extra": {"audio_seconds": seconds, **extra}}  # fmt: skip


def _records(trials=range(1, 6)) -> pd.DataFrame:
    """Five interleaved trials of native ONNX Runtime and WASM in three browsers, whose rounds
    scatter so that the ratio of the medians and the verdicts' paired estimate differ."""
    rng = np.random.default_rng(11)
    rows = []
    for model in MODELS:
        for threads in (1, 2):
            for seconds in (1.0, 10.0):
                for trial in trials:
                    native = 0.1 / threads * np.exp(rng.normal(0, 0.25))
                    rows.append(_row("onnxruntime", "rtf", native, trial, threads, seconds,
                                     model, onnxruntime="1.32.0"))  # fmt: skip
                    for browser, version in BROWSERS.items():
                        rtf = 5 * native * np.exp(rng.normal(0, 0.25))
                        extra = dict(browser=browser, browser_version=version, ort_version="1.30.0")
                        rows.append(_row("ort-web-wasm", "rtf", rtf, trial, threads, seconds,
                                         model, **extra))  # fmt: skip
                    for browser in BROWSERS:
                        caps = {"browser": browser, "browser_version": BROWSERS[browser],
                                "hardwareConcurrency": REPORTED[browser][threads]}  # fmt: skip
                        rows.append(_row(browser, "browser_capabilities", None, trial, threads,
                                         seconds, model, capabilities=caps))  # fmt: skip
    return pd.DataFrame(rows)


def test_each_sentence_names_its_model_and_quotes_its_row_of_the_verdicts_table():
    meas = _records()
    ratios = audio.ratio_table(audio.ratio_rounds(meas))
    said = audio.sentences(ratios, meas)
    assert len(said) == len(ratios) == 2 * 3 * 2 * 2  # models × browsers × threads × lengths
    medians = audio.runtime_table(meas).set_index(["model", "framework", "browser", "threads",
                                                   "audio_seconds"]).rtf  # fmt: skip
    differs = 0
    for sentence, row in zip(said, ratios.itertuples(), strict=True):
        assert audio.speech_label(row.model) in sentence
        other = audio.speech_label(next(m for m in MODELS if m != row.model))
        assert other not in sentence
        assert sentence.startswith(f"In {row.browser} ")
        assert f"with {row.threads} thread" in sentence
        assert f"runs {row.audio_seconds:g} s of audio" in sentence
        (quoted,) = re.findall(r"(\d+\.\d+)× slower", sentence)
        assert quoted == f"{row.rtf_ratio:.2f}"
        assert f"[{row.ci_low:.2f}, {row.ci_high:.2f}]" in sentence and row.design in sentence
        browser = audio.BROWSER_NAMES[row.browser]
        key = (row.model, "ort-web-wasm", browser, row.threads, row.audio_seconds)
        native = (row.model, "onnxruntime", "", row.threads, row.audio_seconds)
        differs += f"{medians[key] / medians[native]:.2f}" != quoted
    # the ratio of medians, which the sentences quoted before, is not the table's estimate here
    assert differs > len(said) // 2
    names = {"wav2vec2_base": "wav2vec2-base", "whisper_base": "Whisper-base's encoder"}
    assert {audio.speech_label(m) for m in MODELS} == set(names.values())


def test_the_summary_quotes_the_range_of_the_same_estimates():
    meas = _records()
    rows = audio.compared(audio.ratio_table(audio.ratio_rounds(meas)), meas)
    (line,) = audio.summary_sentence(rows, meas)
    low, high = rows.ratio.min(), rows.ratio.max()
    assert line.startswith("Web audio: onnxruntime-web's WASM in Chromium 156, Firefox ESR 153 "
                           f"and WebKitGTK 2.50 ran {low:.2f}× to {high:.2f}× slower than native "
                           "ONNX Runtime in all 24 comparisons")  # fmt: skip
    assert "wav2vec2-base and Whisper-base's encoder, 1 and 2 threads, 1 and 10 s of audio" in line
    assert line.endswith("1 run × 5 rounds; within one run, so no winner is called).")
    # no web-audio records: nothing to say, and the summary keeps its inference line
    assert audio.summary_sentence(audio.compared(pd.DataFrame(), meas.iloc[0:0]), meas) == []
    said = sentences.executive_summary(pd.DataFrame(), pd.DataFrame(), "h.", pd.DataFrame(),
                                       pd.DataFrame(), [line])  # fmt: skip
    assert said[0] == line and not any(s.startswith("No inference") for s in said)


def test_one_trial_a_cell_quotes_the_runtime_tables_medians_without_an_interval():
    meas = _records(trials=[0])
    assert audio.ratio_rounds(meas).empty
    said = audio.sentences(pd.DataFrame(), meas)
    table = audio.runtime_table(meas).set_index(["model", "framework", "browser", "threads",
                                                 "audio_seconds"]).rtf  # fmt: skip
    wasm = table[("wav2vec2_base", "ort-web-wasm", "chromium", 1, 1.0)]
    native = table[("wav2vec2_base", "onnxruntime", "", 1, 1.0)]
    assert said[0] == (
        f"In Chromium 156, wav2vec2-base on WASM with 1 thread runs 1 s of audio "
        f"{wasm / native:.2f}× slower than native ONNX Runtime (real-time factor {wasm:.3f} "
        f"against {native:.3f}; one trial a cell, so no interval)."
    )


def test_the_limitations_count_the_web_audio_trials():
    meas = _records()
    no_inference = pd.DataFrame()
    assert audio.most_trials(meas) == 5
    lines = sentences.limitations(no_inference, meas, [audio.most_trials(meas)])
    assert not any(line.startswith("Fewer than three trials") for line in lines)
    once = _records(trials=[0])
    assert audio.most_trials(once) == 1
    lines = sentences.limitations(no_inference, once, [audio.most_trials(once)])
    assert lines[0].startswith("Fewer than three trials per configuration")
    assert audio.most_trials(meas[meas.family == "inference"]) == 0


def test_the_outline_counts_web_audio_trials_in_the_limitations():
    from fwbench.families.web_audio import web_audio_tables
    from fwbench.publish import outline

    assert web_audio_tables in outline.TRIALS_AS_ROUNDS


def test_the_capability_matrix_says_whether_the_reading_followed_the_pinning():
    caps = audio.capability_table(_records()).set_index(["browser", "cores pinned"])
    assert "cores offered" not in caps.columns
    follows = caps["reading follows the pinning"]
    assert set(follows.loc["Chromium 156.0.8078.114"]) == {"yes"}
    assert set(follows.loc["Firefox ESR 153.8.0"]) == {"no"}
    assert set(follows.loc["WebKitGTK 2.50.6"]) == {"no"}
    assert caps.loc[("WebKitGTK 2.50.6", "1"), "navigator.hardwareConcurrency"] == "4"
    # one setting that happens to match shows nothing either way
    one = _records()
    one = one[one.threads == 2]
    follows = audio.capability_table(one).set_index("browser")["reading follows the pinning"]
    assert follows["Firefox ESR 153.8.0"] == "not shown (one setting)"


@pytest.mark.parametrize(
    ("native", "web", "expected"),
    [
        ("1.32.0", "1.30.0", "Native ONNX Runtime ran onnxruntime 1.32.0 and the browsers "
         "onnxruntime-web 1.30.0, as the records name them: different releases, so each "
         "browser-against-native ratio also holds what changed between them."),
        ("1.30.0", "1.30.0", "Native ONNX Runtime ran onnxruntime 1.30.0 and the browsers "
         "onnxruntime-web 1.30.0, as the records name them."),
    ],
)  # fmt: skip
def test_the_onnx_runtime_releases_come_from_the_records(native, web, expected):
    meas = _records(trials=[1])
    meas["extra"] = [
        {**e, **({"onnxruntime": native} if "onnxruntime" in e else {}),
         **({"ort_version": web} if "ort_version" in e else {})}
        for e in meas.extra
    ]  # fmt: skip
    assert audio.versions_sentence(meas) == expected
    assert audio.versions_sentence(meas.iloc[0:0]) == ""


def test_software_webgpu_is_said_as_such_and_stays_out_of_the_summarys_range():
    meas = _records(trials=[0])
    extra = {"audio_seconds": 1.0, "browser": "chromium", "browser_version": "156.0.8078.114",
             "software_webgpu": True}  # fmt: skip
    slow = [
        {**_row("ort-web-webgpu", metric, value, 0, 1, 1.0, "wav2vec2_base"), "extra": extra}
        for metric, value in (("rtf", 50.0), ("latency_p50_ms", 50e3))
    ]
    meas = pd.concat([meas, pd.DataFrame(slow)], ignore_index=True)
    said = [s for s in audio.sentences(pd.DataFrame(), meas) if "WebGPU" in s]
    assert len(said) == 1 and "software WebGPU (a CPU rasteriser, not a GPU)" in said[0]
    rows = audio.compared(pd.DataFrame(), meas)
    (line,) = audio.summary_sentence(rows, meas)
    assert (
        "WebGPU" not in line
        and f"to {rows[rows.framework == 'ort-web-wasm'].ratio.max():.2f}×" in line
    )


def test_a_browser_label_shortens_to_the_release_people_name():
    assert audio.browser_label("firefox", "153.8.0esr", major=True) == "Firefox ESR 153"
    assert audio.browser_label("chromium", "156.0.8078.114", major=True) == "Chromium 156"
    # every WebKitGTK release starts with 2: its major alone names none of them
    assert audio.browser_label("webkit", "2.50.6", major=True) == "WebKitGTK 2.50"
    assert audio.browser_label("webkit", "2.50.6") == "WebKitGTK 2.50.6"


def test_a_cell_with_more_cores_than_threads_says_so_in_its_tables():
    # at one thread, native ONNX Runtime and the browsers on two cores; older rows name no cores
    meas = _records(trials=[1, 2])
    one = meas.threads == 1
    meas.loc[one, "extra"] = [{**e, "cores": 2} for e in meas.extra[one]]
    table = audio.runtime_table(meas)
    assert set(zip(table.threads, table.cores, strict=True)) == {(1, 2), (2, 2)}
    caps = audio.capability_table(meas)
    assert set(caps["cores pinned"]) == {"2"}
    # the reading is judged against the cores pinned: Chromium said 1 at one thread on two cores
    assert set(
        caps.set_index("browser").loc["Chromium 156.0.8078.114", "reading follows the pinning"]
    ) == {"no"}
    older = audio.runtime_table(_records(trials=[1]))
    assert (older.cores == older.threads).all()


def test_pytorch_and_jax_run_with_cores_equal_to_threads():
    from fwbench.families.web_audio import native

    assert native.check_threads(1, 2, ["onnxruntime", "ort-web-wasm"]) == 1
    assert native.check_threads(2, 2, ["torch", "jax"]) == 2
    with pytest.raises(ValueError, match="JAX's thread pool follows the cores"):
        native.check_threads(1, 2, ["jax", "onnxruntime"])
    with pytest.raises(ValueError, match="threads must be 1 to cores"):
        native.check_threads(3, 2, ["onnxruntime"])
