"""A training step over a forward: pairs only like with like (setting, batch, image size, run and
trial), and the ratio, its range and the chart come from the paired records."""

import pandas as pd
import pytest

from fwbench.families.training import training_inference as ti


def _record(family, metric, value, *, trial=0, run="r1", batch=16, image=32, mode="eager", **kw):
    row = {
        "family": family,
        "metric": metric,
        "value": value,
        "status": "ok",
        "model": "resnet18",
        "framework": "torch",
        "mode": mode,
        "device_name": "cpu x",
        "precision": "fp32",
        "threads": 2,
        "batch_size": batch,
        "run_id": run,
        "trial": trial,
        "extra": {"image_size": image},
    }
    return {**row, **kw}


def _pair(step, forward, **kw):
    return [
        _record("training", ti.STEP, step, **kw),
        _record("inference", ti.FORWARD, forward, **kw),
    ]


def test_the_ratio_pairs_trials_and_gives_their_median_and_range():
    meas = pd.DataFrame(
        _pair(30.0, 10.0, trial=0)
        + _pair(40.0, 10.0, trial=1)
        + _pair(35.0, 10.0, trial=2)
        + _pair(60.0, 12.0, trial=0, framework="jax", mode="jit")
    )
    table = ti.step_over_forward(meas).set_index("framework")
    assert table.loc["torch", "step_over_forward"] == pytest.approx(3.5)
    assert (table.loc["torch", "ratio_low"], table.loc["torch", "ratio_high"]) == (3.0, 4.0)
    assert table.loc["torch", "trials"] == 3 and table.loc["torch", "image_size"] == 32
    assert table.loc["jax", "step_over_forward"] == pytest.approx(5.0)
    assert ti.sentence(table.reset_index()) == (
        "A training step takes JAX 5.0–5.0×, PyTorch 3.5–3.5× the time of a forward at its batch."
    )
    chart = ti.ratio_chart(table.reset_index()).to_dict()
    assert len(chart["layer"]) == 3


def test_the_sentence_names_the_mode_where_a_framework_ran_two():
    meas = pd.DataFrame(
        _pair(30.0, 10.0)
        + _pair(60.0, 12.0, framework="jax", mode="jit")
        + _pair(24.0, 8.0, framework="jax", mode="jit-expert")
    )
    assert ti.sentence(ti.step_over_forward(meas)) == (
        "A training step takes JAX jit 5.0–5.0×, JAX jit-expert 3.0–3.0×, PyTorch 3.0–3.0× the "
        "time of a forward at its batch."
    )


@pytest.mark.parametrize(
    "unlike",
    [
        {"batch": 8},
        {"image": 224},
        {"mode": "compile"},
        {"trial": 1},
        {"run": "r2"},
        {"precision": "bf16"},
    ],
)
def test_unlike_records_are_not_paired(unlike):
    meas = pd.DataFrame(
        [
            _record("training", ti.STEP, 30.0),
            _record("inference", ti.FORWARD, 10.0, **unlike),
        ]
    )
    assert ti.step_over_forward(meas).empty


def test_failed_records_and_text_inputs_stay_out():
    failed = _record("inference", ti.FORWARD, 10.0, status="failed")
    text = _pair(30.0, 10.0, extra={"seq_len": 128})
    # as 10_inference records a text model: its image size parameter beside its inputs
    bert = _pair(30.0, 10.0, model="hf_bert_base", extra={"image_size": 32, "inputs": "text"})
    meas = pd.DataFrame([_record("training", ti.STEP, 30.0), failed, *text, *bert])
    assert ti.step_over_forward(meas).empty
