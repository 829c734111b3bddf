"""MFU against one ceiling per device, precision and thread count: the best any framework reached.

The numbers are the CPU study's bf16 round on a Zen 3 without AVX-512 BF16, where PyTorch's own
bf16 matmul reached 0.0013 TFLOP/s and JAX's 0.113: divided by its own peak, PyTorch's ResNet-50
read an MFU of 1.45.
"""

from __future__ import annotations

import pandas as pd
import pytest

from fwbench.report import roofline
from fwbench.results.records import Recorder

RUN, EARLIER = "20260102T000000Z", "20251231T000000Z"
DEVICE = "AMD EPYC"
PEAKS = {"jax": 0.1134, "torch": 0.0013}
ACHIEVED = {("resnet50", "jax"): 0.0355, ("resnet50", "torch"): 0.0019}
ZEN3_ISA = ["avx2", "fma"]


def _calibration(framework, peak, run_id=RUN, campaign="study", shared=False):
    common = {
        "family": "calibration",
        "status": "ok",
        "framework": framework,
        "device": "cpu",
        "device_name": DEVICE,
        "precision": "bf16",
        "threads": 2,
        "run_id": run_id,
        "campaign": campaign,
        "cell": f"framework={framework}",
        "extra": {},
        "shared_machine": shared,
    }
    return [
        {**common, "metric": "peak_matmul_tflops", "value": peak},
        {**common, "metric": "copy_bandwidth_gbs", "value": 28.0},
    ]


def _achieved(model, framework, value):
    return {
        "family": "inference",
        "metric": "achieved_tflops",
        "status": "ok",
        "value": value,
        "model": model,
        "framework": framework,
        "mode": "jit" if framework == "jax" else "eager",
        "variant": "jit" if framework == "jax" else "eager",
        "device": "cpu",
        "device_name": DEVICE,
        "precision": "bf16",
        "threads": 2,
        "batch_size": 1,
        "run_id": RUN,
        "campaign": "study",
        "extra": {},
    }


def _meas(calibration=None):
    rows = [_achieved(m, f, v) for (m, f), v in ACHIEVED.items()]
    if calibration is None:
        calibration = [r for f, p in PEAKS.items() for r in _calibration(f, p)]
    return pd.DataFrame(rows + calibration)


def test_mfu_divides_by_the_devices_ceiling_and_efficiency_by_the_frameworks_own():
    meas = _meas()
    mfu = roofline.mfu_table(meas, meas).set_index("framework")
    for framework in ("jax", "torch"):
        row = mfu.loc[framework]
        achieved = ACHIEVED[("resnet50", framework)]
        assert row.device_peak_tflops == PEAKS["jax"] and row.device_peak_framework == "jax"
        assert row.mfu == pytest.approx(achieved / PEAKS["jax"])
        assert row.framework_peak_tflops == PEAKS[framework]
        assert row.framework_efficiency == pytest.approx(achieved / PEAKS[framework])
    assert mfu.loc["torch"].framework_efficiency > 1 > mfu.loc["torch"].mfu
    # the roofline's points carry both
    ceilings = roofline.device_ceilings(meas)
    assert ceilings.peak_tflops.tolist() == [PEAKS["jax"]]


def test_a_framework_far_below_the_devices_ceiling_is_said_to_run_a_slow_path():
    meas = _meas()
    mfu = roofline.mfu_table(meas, meas)
    notes = roofline.mfu_notes(mfu, RUN, ZEN3_ISA)
    (slow,) = [n for n in notes if "kernel path is slow" in n]
    assert slow.startswith("PyTorch's bf16 kernel path is slow on AMD EPYC")
    assert "1.1% of the device's ceiling there, 0.113 (JAX's)" in slow
    assert "whose ISA list (avx2, fma) has no AVX-512 BF16" in slow
    assert "any JAX ÷ PyTorch ratio at bf16" in slow
    # the framework's own ceiling, beaten by its model, is a lower bound and a note says so
    (own,) = [n for n in notes if n.startswith("Framework efficiency above 1")]
    assert "PyTorch on AMD EPYC at bf16 with 2 threads (resnet50 eager inference" in own
    assert not any(n.startswith("MFU above 1") for n in notes)
    unrecorded = roofline.mfu_notes(mfu, RUN, None)
    assert any("did not record whether the CPU has AVX-512 BF16" in n for n in unrecorded)
    native = roofline.mfu_notes(mfu, RUN, [*ZEN3_ISA, "avx512f", "avx512_bf16"])
    assert any("although the CPU has AVX-512 BF16" in n for n in native)


@pytest.mark.parametrize("shared", [False, True])
def test_an_mfu_above_one_names_its_cause(shared):
    calibration = [r for f, p in PEAKS.items() for r in _calibration(f, p / 100, shared=shared)]
    meas = _meas(calibration)
    mfu = roofline.mfu_table(meas, meas)
    assert (mfu.mfu > 1).all()
    (note,) = [n for n in roofline.mfu_notes(mfu, RUN, ZEN3_ISA) if n.startswith("MFU above 1")]
    assert "resnet50 eager inference at batch 1" in note and "resnet50 jit" in note
    if shared:
        assert "ran on a shared machine, so it reads low" in note
    else:
        assert (
            "the calibration's matmul did not reach what the model did: the ceiling is a " in note
        )


def test_the_devices_ceiling_is_borrowed_from_a_framework_this_run_did_not_calibrate():
    # this run calibrated PyTorch only; JAX's ceiling comes from the latest run that measured it
    meas = _meas(_calibration("torch", PEAKS["torch"]))
    index = pd.DataFrame(
        _calibration("jax", 0.05, run_id="20251201T000000Z", campaign="old")
        + _calibration("jax", PEAKS["jax"], run_id=EARLIER, campaign="old")
    )
    calibration = roofline.calibration_with_fallback(meas, index)
    assert set(calibration.run_id) == {RUN, EARLIER}
    mfu = roofline.mfu_table(meas, calibration).set_index("framework")
    assert (mfu.ceiling_run_id == EARLIER).all() and (mfu.device_peak_framework == "jax").all()
    assert mfu.loc["torch"].framework_ceiling_run_id == RUN
    notes = roofline.mfu_notes(mfu.reset_index(), RUN, ZEN3_ISA)
    (borrowed,) = [n for n in notes if n.startswith("This run did not calibrate")]
    assert f"run {EARLIER} of campaign old" in borrowed
    assert borrowed.endswith("is the device's ceiling every framework's MFU there divides by.")


def test_the_mfu_records_carry_the_devices_ceiling_and_the_framework_efficiency():
    meas = _meas()
    mfu = roofline.mfu_table(meas, meas)
    rec = Recorder("analysis")
    roofline.add_mfu_records(rec, mfu)
    frame = rec.frame().set_index("framework")
    torch = frame.loc["torch"]
    assert torch.value == pytest.approx(ACHIEVED[("resnet50", "torch")] / PEAKS["jax"])
    assert torch.extra["device_peak_tflops"] == PEAKS["jax"]
    assert torch.extra["device_peak_framework"] == "jax"
    assert torch.extra["framework_peak_tflops"] == PEAKS["torch"]
    assert torch.extra["framework_efficiency"] == pytest.approx(0.0019 / 0.0013)
    assert torch.extra["ceiling_run_id"] == RUN and "peak_matmul_tflops" not in torch.extra
    # no ceiling anywhere: no value, and the reason
    nothing = meas[meas.family != "calibration"]
    rec = Recorder("analysis")
    roofline.add_mfu_records(rec, roofline.mfu_table(nothing, nothing))
    assert all(r["value"] is None and "of any framework" in r["extra"]["reason"] for r in rec.rows)
