"""The epoch forecast on a synthetic sweep whose law is known: a training step is a fixed multiple
of its forward, an epoch its steps times the step; the forecast recovers it, never learns a
held-out model's multiple from that model's own steps, and its interval widens with the spread."""

import numpy as np
import pandas as pd
import pytest

from fwbench.families.prediction import epochs
from tests.test_prediction_predictor import synthetic_sweep

MULTIPLE = {"torch": 3.0, "jax": 2.5}
STEPS = 40


def _training(frame: pd.DataFrame, multiple=MULTIPLE) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training steps and epochs of every model at batch 16 and two threads: the step is the
    framework's multiple of the forward's true seconds, the epoch ``STEPS`` of them."""
    rows = frame[(frame.batch_size == 16) & (frame.threads == 2)].copy()
    rows["step_s"] = rows.seconds * rows.framework.map(multiple)
    rows = rows.drop(columns="seconds").assign(
        run_id="r1", n_trials=3, device="cpu", image_size=224
    )
    epoch_rows = rows.assign(epoch_s=rows.step_s * STEPS, steps=STEPS, images=STEPS * 16)
    return rows.reset_index(drop=True), epoch_rows.reset_index(drop=True)


@pytest.fixture(scope="module")
def fitted():
    """The synthetic sweep and its fits without each trained model: the costly part, shared by the
    tests below, which change the steps and epochs but never the forward rows or the models."""
    frame = synthetic_sweep(seed=2, noise=0.02)
    steps, _ = _training(frame)
    return frame, epochs.fits_without(frame, steps.model)


def test_the_forecast_recovers_the_epoch_of_a_model_it_never_saw(fitted):
    frame, fits = fitted
    steps, measured = _training(frame)
    scored = epochs.epoch_errors(
        frame, epochs.with_forward(frame, steps, fits=fits), measured, fits=fits
    )
    assert len(scored) == len(measured) and (scored.multiple_rows > 0).all()
    # the learned multiples sit near the law's, each from the other models' steps
    for framework, multiple in MULTIPLE.items():
        learned = scored[scored.framework == framework].multiple
        assert learned.median() == pytest.approx(multiple, rel=0.25)
    assert scored.error_pct.abs().median() < 15
    # steps x measured step: the synthetic epoch adds nothing to its steps
    assert np.allclose(scored.steps_times_step_s, scored.epoch_s)
    assert ((scored.low < scored.predicted_s) & (scored.predicted_s < scored.high)).all()


def test_a_held_out_model_never_teaches_its_own_multiple(fitted):
    """One model's steps take 40x its forward: were they in its own fit, its forecast would move
    towards them; held out, it gets the other models' multiple and misses by far, as it should."""
    frame, fits = fitted
    odd = "vit_1"
    steps, measured = _training(frame)
    steps.loc[steps.model == odd, "step_s"] *= 40 / 3.0
    measured.loc[measured.model == odd, "epoch_s"] *= 40 / 3.0
    factor, _, rows = epochs.multiple_for(steps.assign(forward_s=steps.step_s / 3.0), "torch", odd)
    assert factor == pytest.approx(3.0) and rows == (steps.framework == "torch").sum() - 1
    with_forward = epochs.with_forward(frame, steps, fits=fits)
    scored = epochs.epoch_errors(frame, with_forward, measured, fits=fits)
    scored = scored.set_index(["model", "framework"])
    assert scored.loc[(odd, "torch")].error_pct < -80  # forecast from a multiple near 3, not 40
    others = scored.drop(index=odd, level="model").xs("torch", level="framework")
    # and the odd model's steps widen every other PyTorch interval, since they teach its spread
    assert (others.high / others.predicted_s).min() > 3


def test_no_other_model_of_the_framework_leaves_the_multiple_unknown():
    frame = synthetic_sweep(seed=2, noise=0.02)
    steps, measured = _training(frame)
    only = steps[steps.model == "resnet_0"]
    factor, spread, rows = epochs.multiple_for(only.assign(forward_s=1.0), "torch", "resnet_0")
    assert np.isnan(factor) and np.isnan(spread) and rows == 0
