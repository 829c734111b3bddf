"""The frozen test set: predicted before any of it is measured, scored once against its run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from fwbench import cli
from fwbench.families.prediction import dataset, frozen_score
from fwbench.measure.device import cpu_device_name
from fwbench.pipeline.campaign import load_campaign
from fwbench.results import db as fw_db
from tests.test_prediction_dataset import IMAGE, write_index

REPO = Path(__file__).resolve().parents[1]


def test_the_committed_set_asks_for_both_frameworks_at_each_batch_size():
    campaign = REPO / "params" / "frozen_test.yaml"
    if not campaign.is_file():
        pytest.skip("no frozen test set is committed")
    configs = frozen_score.configurations(load_campaign(campaign).cells)
    models = configs.model.nunique()
    assert models >= 12 and len(configs) == models * 2 * 2  # two frameworks, batch 1 and 8
    pairs = set(zip(configs.framework, configs["mode"], strict=True))
    assert pairs == {("torch", "eager"), ("jax", "torchax")}


def _row(model, framework, predicted, measured, trials):
    mode = "eager" if framework == "torch" else "torchax"
    key = {"model": model, "framework": framework, "mode": mode, "precision": "fp32"}
    key |= {"batch_size": 1, "threads": 2, "image_size": 224, "device_name": "cpu X"}
    guess = {**key, "predicted_s": predicted, "low_s": predicted / 1.5, "high_s": predicted * 1.5}
    seen = {**key, "campaign": "frozen_test", "run_id": "r1", "seconds": measured}
    return guess, {**seen, "trial_img_s": dict(enumerate(trials))}


def test_the_score_counts_errors_coverage_and_winners_on_decided_pairs_only():
    rows = [
        # a: JAX measured faster in every trial (decided), predicted faster: correct
        _row("a", "torch", 1.0, 1.0, [1.0, 1.01, 0.99]),
        _row("a", "jax", 0.6, 0.5, [2.0, 2.02, 1.98]),
        # b: PyTorch measured faster (decided), predicted slower: wrong; its error is 100%
        _row("b", "torch", 2.0, 1.0, [1.0, 1.01, 0.99]),
        _row("b", "jax", 1.5, 2.0, [0.5, 0.505, 0.495]),
        # c: trials that cross (undecided), so its winner is not judged
        _row("c", "torch", 1.0, 1.0, [1.0, 2.0, 1.0]),
        _row("c", "jax", 1.0, 1.0, [2.0, 1.0, 1.0]),
    ]
    predictions = pd.DataFrame([guess for guess, _ in rows])
    measured = pd.DataFrame([seen for _, seen in rows])
    unmeasured = {**rows[0][0], "model": "d"}
    predictions = pd.concat([predictions, pd.DataFrame([unmeasured])], ignore_index=True)

    scored, summary = frozen_score.score(predictions, measured)
    errors = [0.0, 20.0, 100.0, 25.0, 0.0, 0.0]
    assert summary["mape_pct"] == pytest.approx(sum(errors) / 6)
    assert summary["within_20pct"] == pytest.approx(4 / 6 * 100)
    assert (summary["predicted"], summary["measured"], summary["unmeasured"]) == (7, 6, 1)
    assert summary["decided_pairs"] == 2 and summary["correct_winner_pct"] == 50.0
    # b's PyTorch row (measured 1.0, interval [1.33, 3.0]) is the one outside its interval
    assert summary["coverage_pct"] == pytest.approx(5 / 6 * 100)
    assert summary["met"] == {
        "mape_pct": False,
        "within_20pct": False,
        "correct_winner_pct": False,
        "coverage_pct": False,
    }
    assert len(scored) == 6 and "trial_img_s" not in scored
    goals = frozen_score.goal_table(summary).set_index("figure")
    assert goals.loc["mape_pct", "goal"] == "≤ 15%" and goals.loc["mape_pct", "met"] is False
    assert goals.loc["coverage_pct", "goal"] == "85-95%"
    assert goals.loc["median_pct", "value"] == pytest.approx(10.0)

    assert "direct_ratio_mape_pct" not in summary  # predictions written without the column

    # the ratio predicted directly: a says 0.4 [0.3, 0.6] (measured 0.5: right, inside), b says
    # 0.5 [0.4, 0.6] (measured 2.0: wrong, outside), c is undecided
    direct = {"a": (0.4, 0.3, 0.6), "b": (0.5, 0.4, 0.6), "c": (1.0, 0.5, 2.0)}
    jax = predictions.framework == "jax"
    for column, at in (("direct_ratio", 0), ("direct_ratio_low", 1), ("direct_ratio_high", 2)):
        predictions[column] = [
            direct[m][at] if j else math.nan for m, j in zip(predictions.model, jax, strict=True)
        ]
    _, summary = frozen_score.score(predictions, measured)
    assert summary["direct_correct_winner_pct"] == 50.0
    assert summary["direct_ratio_coverage_pct"] == pytest.approx(2 / 3 * 100)
    assert summary["direct_ratio_mape_pct"] == pytest.approx((20 + 75 + 0) / 3)

    _, empty = frozen_score.score(predictions, measured.iloc[0:0])
    assert empty["mape_pct"] is None and set(empty["met"].values()) == {None}


def test_the_kernel_level_predictor_takes_the_settings_it_covers_and_both_are_scored():
    rows = [_row("a", "torch", 1.0, 1.0, [1.0] * 3), _row("a", "jax", 4.0, 2.0, [0.5] * 3)]
    predictions = pd.DataFrame([guess for guess, _ in rows])
    measured = pd.DataFrame([seen for _, seen in rows])
    # the kernel-level predictor covers torch eager only here; it says 1.1 s [1.0, 1.2]
    kernel = predictions.iloc[:1][["model", "framework", "mode", "batch_size", "image_size"]]
    kernel = kernel.assign(precision="fp32", threads=2, predicted_s=1.1, low_s=1.0, high_s=1.2)
    both = frozen_score.with_kernel_predictions(predictions, kernel)
    assert list(both.predictor) == ["kernels", "op categories"]
    assert list(both.predicted_s) == [1.1, 4.0] and list(both.low_s) == [1.0, 4.0 / 1.5]
    assert list(both.category_predicted_s) == [1.0, 4.0]
    _, summary = frozen_score.score(both, measured)
    assert summary["mape_pct"] == pytest.approx((10 + 100) / 2)
    assert summary["by_predictor"]["kernels"]["mape_pct"] == pytest.approx(10.0)
    assert summary["by_predictor"]["op categories"]["mape_pct"] == pytest.approx(100.0)
    assert summary["category_mape_pct"] == pytest.approx((0 + 100) / 2)
    # nothing covered: the op-category predictor's predictions, named so
    alone = frozen_score.with_kernel_predictions(predictions, pd.DataFrame())
    assert set(alone.predictor) == {"op categories"} and list(alone.predicted_s) == [1.0, 4.0]


def test_the_error_is_laid_on_the_kernel_kinds_the_predicted_time_sat_in():
    rows = pd.DataFrame(
        {
            # two convolution-bound rows 50% and 100% too slow, one matmul row exact, one split
            "seconds": [1.0, 1.0, 1.0, 1.0],
            "predicted_s": [1.5, 2.0, 1.0, 0.8],
            "share:conv": [1.0, 1.0, 0.0, 0.5],
            "share:matmul": [0.0, 0.0, 1.0, 0.5],
        }
    )
    by_kind = frozen_score.error_by_kind(rows).set_index("kind")
    # 170 points of error: 150 + 10 on convolutions, 10 on matmuls, although each holds half
    # of the predicted time over the rows
    assert by_kind.error_carried_pct.to_dict() == pytest.approx(
        {"conv": 160 / 170 * 100, "matmul": 10 / 170 * 100}
    )
    assert by_kind.time_share_pct.to_dict() == pytest.approx({"conv": 62.5, "matmul": 37.5})
    # the split row counts for the first kind holding its largest share
    assert by_kind.rows_led.to_dict() == {"conv": 3, "matmul": 1}
    assert by_kind.mape_pct["conv"] == pytest.approx((50 + 100 + 20) / 3)
    assert by_kind.median_signed_pct.to_dict() == pytest.approx({"conv": 50.0, "matmul": 0.0})


def test_a_test_rows_kernel_kinds_are_priced_from_its_own_cpus_micro_benchmarks(tmp_path):
    import duckdb

    from fwbench.families.prediction import kernel_model, kernel_prices
    from fwbench.families.prediction.kernels import CONV, MATMUL, Kernel

    conv, matmul = Kernel(CONV, (1, 64, 64, 3, 3, 1, 14, 14, 1)), Kernel(MATMUL, (1, 64, 64, 64))
    con = duckdb.connect(str(tmp_path / "i.duckdb"))
    con.execute(
        "create table measurements (family varchar, status varchar, metric varchar, "
        "value double, extra json, framework varchar, device_name varchar, threads integer)"
    )
    for kernel, seconds in ((conv, 3e-3), (matmul, 1e-3)):
        extra = json.dumps({"kind": kernel.kind, "shape": list(kernel.shape)})
        con.execute(
            "insert into measurements values ('prediction', 'ok', 'kernel_s', ?, ?, 'torch', 'cpu', 2)",
            [seconds, extra],
        )
    con.close()
    configs = pd.DataFrame(
        {"model": ["a", "a"], "framework": ["torch", "torch"], "mode": ["eager", "compile"],
         "batch_size": [1, 1], "image_size": [224, 224]}
    )  # fmt: skip
    found = kernel_model.shares_from_index(
        tmp_path / "i.duckdb", configs, "cpu", 2, kernels_of=lambda *_: [conv, matmul]
    )
    # a compiled mode is not priced from kernels; eager's time is 3 parts convolution to 1
    assert list(found["mode"]) == ["eager"]
    assert found["share:conv"].iloc[0] == pytest.approx(0.75)
    assert found["share:matmul"].iloc[0] == pytest.approx(0.25)
    assert found["share:memory"].iloc[0] == 0.0
    assert kernel_prices.kind_shares([conv, matmul], [3e-3, 1e-3]) == pytest.approx(
        {"conv": 0.75, "matmul": 0.25}
    )
    # another CPU has no micro-benchmarks: nothing to price
    assert kernel_model.shares_from_index(tmp_path / "i.duckdb", configs, "other", 2).empty


SET = """\
campaign: frozen_test
order: interleaved
steps:
  - notebook: 10_inference
    params: {{framework: torch, mode: eager, device: cpu, precision: fp32, threads: 1,
             image_size: {image}, batch_sizes: [1, 4], min_iters: 1, min_seconds: 0.1}}
    trials: 3
    grid:
      model: [resnet34, mnasnet0_5]
  - notebook: 10_inference
    params: {{framework: jax, mode: torchax, device: cpu, precision: fp32, threads: 1,
             image_size: {image}, batch_sizes: [1, 4], min_iters: 1, min_seconds: 0.1}}
    trials: 3
    grid:
      model: [resnet34, mnasnet0_5]
"""


def _measure_the_set(path: Path, models: list[str]):
    """The set's run in the index: the synthetic rows of two measured models, renamed."""
    con = fw_db.connect(path)
    for new, old in zip(models, ("resnet18", "mobilenet_v3_small"), strict=True):
        for table in ("measurements", "cells"):
            con.execute(
                f"insert into {table} by name select * replace (?::varchar as campaign, "
                f"'r2' as run_id, cell || '-set' as cell) from {table} where campaign = 'synth' "
                "and cell like ?",
                ["frozen_test", f"{old}-%"],
            )
        con.execute(
            "update measurements set model = ? where run_id = 'r2' and model = ?", [new, old]
        )
    con.execute("update measurements set mode = 'torchax' where run_id = 'r2' and mode = 'jit'")
    con.close()


def test_a_set_is_predicted_before_it_is_measured_and_scored_once(tmp_path, capsys):
    name = cpu_device_name()
    if not dataset.identified("cpu", name):
        pytest.skip(f"this CPU ({name}) reports no family and model")
    index = tmp_path / "i.duckdb"
    write_index(index, device_name=name, threads=1)
    campaign = tmp_path / "frozen_test.yaml"
    campaign.write_text(SET.format(image=IMAGE))
    predictions, score = frozen_score.paths(campaign)
    common = ["freeze-test", "--out", str(campaign), "--db", str(index)]
    common += ["--executed", str(tmp_path / "executed")]

    assert cli.main([*common, "--score"]) == 2  # nothing predicted yet
    assert cli.main([*common, "--predict", "--dry-run"]) == 0
    assert not predictions.exists()
    assert cli.main([*common, "--predict"]) == 0
    found = pd.read_csv(predictions)
    assert len(found) == 2 * 2 * 2 and (found.device_name == name).all()
    assert found.predicted_s.map(math.isfinite).all()
    assert (found.low_s <= found.predicted_s).all() and (found.predicted_s <= found.high_s).all()
    written = predictions.read_bytes()
    assert cli.main([*common, "--predict"]) == 2  # predicted once
    assert predictions.read_bytes() == written
    assert cli.main([*common, "--score"]) == 2 and not score.exists()  # no run of the set yet

    _measure_the_set(index, ["resnet34", "mnasnet0_5"])
    late = tmp_path / "late" / "frozen_test.yaml"
    late.parent.mkdir()
    late.write_text(campaign.read_text())
    capsys.readouterr()
    assert cli.main(["freeze-test", "--out", str(late), "--db", str(index), "--predict"]) == 2
    assert "too late to predict" in capsys.readouterr().err
    assert not frozen_score.paths(late)[0].exists()

    assert cli.main([*common, "--score"]) == 0
    record = json.loads(score.read_text())
    assert record["times_scored"] == 1 and record["run_id"] == "r2"
    # resnet34: PyTorch at batch 1 and 4, JAX at 1; mnasnet0_5: both at batch 1
    assert (record["measured"], record["unmeasured"]) == (5, 3)
    scored = score.read_bytes()
    assert cli.main([*common, "--score"]) == 2  # scored once
    assert score.read_bytes() == scored
