"""Whisper's encoder in the web-audio family: its log-mel input, its float64 proof through
torchax, its ONNX export in native ONNX Runtime and in a browser (an input of three axes), and
the notebook through the runner.

A two-second window keeps these quick; it is not Whisper's (30 s), and the notebook names such a
model apart. Browser tests skip or fail as in test_web_audio."""

import numpy as np
import pytest

from fwbench.families.web_audio import native, signals
from fwbench.measure.timing import StopRule
from fwbench.models import speech
from tests.conftest import REPO, run_cli
from tests.test_web_audio import FP32_BOUND, _browser_or_skip, _records

QUICK = StopRule(min_iters=2, min_seconds=0.0)
WINDOW = 2  # seconds: 200 log-mel frames, 100 encoder positions


@pytest.fixture(scope="module")
def whisper():
    return speech.build_whisper_torch("tiny", seed=0, window_s=WINDOW)


@pytest.fixture(scope="module")
def whisper_onnx(whisper, tmp_path_factory):
    from fwbench.families.web_audio.onnx_export import export_onnx

    folder = tmp_path_factory.mktemp("whisper")
    features = speech.log_mel(signals.synthetic_speech(1.0), WINDOW)
    return export_onnx(whisper, folder / "model.onnx", features, "whisper")


def test_the_log_mel_window_pads_the_audio_and_refuses_longer():
    short = speech.log_mel(signals.synthetic_speech(0.5), WINDOW)
    assert short.shape == (80, 200) and short.dtype == np.float32
    assert np.isfinite(short).all()
    # the padded half is silence, the spoken half is not
    assert short[:, :40].std() > 10 * short[:, 120:].std()
    longer = speech.log_mel(signals.synthetic_speech(1.5), WINDOW)
    assert not np.allclose(short, longer)
    with pytest.raises(ValueError, match="longer than Whisper's 2 s window"):
        speech.log_mel(signals.synthetic_speech(2.5), WINDOW)
    audio = signals.synthetic_speech(0.5)
    assert speech.model_input("wav2vec2", audio) is audio  # wav2vec2 hears the audio itself


def test_unknown_speech_models_and_sizes_are_named():
    assert speech.check_size("base", "whisper").d_model == 512
    with pytest.raises(ValueError, match="hubert"):
        speech.check_size("tiny", "hubert")
    with pytest.raises(ValueError, match="whisper size must be one of"):
        speech.check_size("large", "whisper")
    with pytest.raises(ValueError, match="whole seconds"):
        speech.whisper_config("tiny", 2.5)


def test_whisper_through_torchax_computes_the_encoder_in_float64(whisper):
    features = speech.log_mel(signals.synthetic_speech(1.0, seed=1), WINDOW)
    parity = native.torchax_parity(whisper, features)
    assert parity <= 1e-10
    # the proof ran in float64 and left the model as it found it: float32, for the timing
    assert {str(p.dtype) for p in whisper.parameters()} == {"torch.float32"}
    ours = native.run_torchax(whisper, features, QUICK)
    reference = native.torch_output(whisper, features)
    assert reference.shape == (WINDOW * 50, 384)
    assert ours.status == "ok" and ours.details["mode"] == "torchax"
    assert len(ours.latency_ms) >= 2 and ours.load_s > 0
    assert native.agreement(ours.output, reference)[1] <= FP32_BOUND
    # the function is not trivial: the output moves with the input
    other = native.torch_output(whisper, speech.log_mel(signals.synthetic_speech(1.0, 2), WINDOW))
    assert native.agreement(other, reference)[1] > 1e-2


def test_the_whisper_export_agrees_in_onnxruntime(whisper, whisper_onnx):
    features = speech.log_mel(signals.synthetic_speech(1.0, seed=3), WINDOW)
    ours = native.run_onnxruntime(whisper_onnx, features, 1, QUICK)
    assert ours.status == "ok"
    assert native.agreement(ours.output, native.torch_output(whisper, features))[1] <= FP32_BOUND


def test_a_browser_takes_whispers_three_axis_input(whisper, whisper_onnx):
    browser = _browser_or_skip()
    files = whisper_onnx.parent
    features = speech.log_mel(signals.synthetic_speech(1.0, seed=4), WINDOW)
    signals.write_f32(features, files / "mel.f32")
    runs = [("ort-web-wasm", 1, "mel.f32")]
    dims = {"mel.f32": (1, *features.shape)}
    dist = browser.ort_web_dist(REPO)
    (wasm,), _ = browser.bench(files, dist, runs, "model.onnx", 1, 0.0, dims=dims)
    assert wasm.status == "ok", wasm.reason
    assert wasm.output.shape == (WINDOW * 50, 384)
    assert native.agreement(wasm.output, native.torch_output(whisper, features))[1] <= FP32_BOUND
    # without its shape the page reads one row of audio, which the model refuses
    (flat,), _ = browser.bench(files, dist, runs, "model.onnx", 1, 0.0)
    assert flat.status == "failed"


@pytest.mark.slow
def test_the_notebook_runs_whisper_on_every_runtime(tmp_path):
    _browser_or_skip()
    campaign = tmp_path / "whisper.yaml"
    campaign.write_text(
        f"campaign: web_audio_test\nsteps:\n  - notebook: {REPO}/notebooks/14_web_audio\n"
        f"    params: {{model: whisper, model_size: tiny, whisper_window_s: {WINDOW},\n"
        "             audio_seconds: [1.0], min_iters: 2, min_seconds: 0.0, browsers: [chromium],\n"
        "             runtimes: [torch, jax, onnxruntime, ort-web-wasm]}\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _records(out)
    assert {r["model"] for r in records} == {f"whisper_tiny_{WINDOW}s"}
    (parity,) = [r for r in records if r["metric"] == "fp64_output_parity_max_rel"]
    assert parity["status"] == "ok" and parity["value"] <= 1e-10 and parity["mode"] == "torchax"
    agreement = {r["framework"]: r for r in records if r["metric"] == "max_rel_err_vs_torch"}
    assert set(agreement) == {"torch", "jax", "onnxruntime", "ort-web-wasm"}
    assert all(r["status"] == "ok" and r["value"] <= FP32_BOUND for r in agreement.values())
    assert agreement["jax"]["mode"] == "torchax"
    assert all(r["extra"]["window_s"] == WINDOW for r in records)
