"""Memory prediction against the allocator: the position-by-position extrapolation of a training
step's memory, a real forward's peak against the meta device's prediction, and a traced step's
peak at an untraced batch size against the same step measured."""

import json

import numpy as np
import pytest

from fwbench.families.memory import footprint, tracer
from fwbench.families.memory.cases import build_case
from fwbench.families.prediction import features as fw_features
from fwbench.families.prediction import peaks
from fwbench.results import db as fw_db


def test_extrapolation_follows_each_position_not_the_peak():
    # position 0 is the optimizer update (fixed), position 1 the backward's activations (grow):
    # the peak sits at position 0 for batch 2 and 3 but at position 1 from batch 6 on
    memory = {2: np.array([100.0, 40.0]), 3: np.array([100.0, 60.0])}
    assert peaks.extrapolate(memory, 4) == 100.0
    assert peaks.extrapolate(memory, 8) == 160.0
    # a line through the two peaks would have said 100 at every batch size


def test_extrapolation_refuses_two_different_graphs():
    with pytest.raises(ValueError, match="not the same graph"):
        peaks.extrapolate({2: np.zeros(3), 3: np.zeros(4)}, 8)


def test_a_forward_peak_is_measured_and_close_to_the_shapes_prediction():
    predicted = fw_features.torch_features("squeezenet1_1", 4, 64).model_peak_bytes
    small = peaks.forward_peak_bytes("squeezenet1_1", 1, 64)
    measured = peaks.forward_peak_bytes("squeezenet1_1", 4, 64)
    params = fw_features.torch_features("squeezenet1_1", 1, 64).param_bytes
    assert params < small < measured  # the activations are counted and grow with the batch
    assert abs(peaks.error_pct(predicted, measured)) < 25


def _write_training_peak(path, model, batch_size, shape, value):
    con = fw_db.connect(path)
    cell = f"{model}-{batch_size}"
    con.execute(
        "insert into measurements (run_id, campaign, notebook, cell, trial, status, family, model, "
        "mode, device, device_name, precision, batch_size, metric, value, unit, extra) values "
        "('r1', 'memsynth', '12_memory', ?, 1, 'ok', 'memory', ?, 'graph', 'cpu', 'x', 'fp32', ?, "
        "'peak_mem_bytes', ?, 'bytes', '{}')",
        [cell, model, batch_size, value],
    )
    con.execute(
        "insert into cells (run_id, campaign, notebook, cell, trial, status, parameters) "
        "values ('r1', 'memsynth', '12_memory', ?, 1, 'ok', ?)",
        [cell, json.dumps({"model": model, "batch_sizes": [batch_size], **shape})],
    )
    con.close()


def test_a_training_peak_at_an_untraced_batch_size_matches_the_measured_step(tmp_path):
    shape = {"encoder_size": "tiny", "seq_len": 32}
    case = build_case("bert_encoder", 5, **shape)
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    step = lambda: traced.run(traced.inputs, traced.graph_module)  # noqa: E731
    measured = footprint.measure_peak(step, traced.inputs, "cpu")
    _write_training_peak(tmp_path / "i.duckdb", "bert_encoder", 5, shape, measured)
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    found = peaks.training_measurements(con)
    con.close()
    assert json.loads(found.case_shape.item()) == shape
    [row] = peaks.training_errors(found).itertuples()
    assert row.batch_size == 5 and row.measured_bytes == measured
    assert abs(row.error_pct) < 2.0
