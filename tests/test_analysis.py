"""The analysis computations on a small synthetic index: ratios, ties, break-even, roofline, history.

The campaign comes from tests/synthetic_run.py, which tests/test_report.py also builds its report from.
"""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from fwbench import vocab
from fwbench.families.analysis import analysis_report
from fwbench.families.inference import inference_report
from fwbench.families.training import training_report
from fwbench.publish import outline
from fwbench.report import charts, regressions, roofline, sentences, tables
from fwbench.report.sections import ReportContent
from fwbench.results import db
from fwbench.results.records import Recorder
from tests.synthetic_run import (
    BASELINE_CENTER,
    BASELINE_RUN,
    CAMPAIGN,
    COMPILE_S,
    CURRENT_RUN,
    DEVICE_NAME,
    EARLIER_RUNS,
    FIGURES,
    PEAK_TFLOPS,
    TRAIN_FLOPS_PER_STEP,
    build_synthetic,
    expected_ratio,
)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("analysis")
    out, current = build_synthetic(tmp)
    db_path = tmp / "index.duckdb"
    db.ingest(out, db_path)
    con = db.connect(db_path, read_only=True)
    run_id, baseline_id = tables.resolve_runs(con, CAMPAIGN)
    data = {
        "db_path": db_path,
        "run_id": run_id,
        "baseline_id": baseline_id,
        "meas": tables.load_measurements(con, CAMPAIGN, run_id),
        "baseline": tables.load_measurements(con, CAMPAIGN, baseline_id),
        "cells": tables.load_cells(con, CAMPAIGN, run_id),
        "index_calibration": tables.load_calibration(con),
        "current": current,
    }
    con.close()
    data["matrix"] = tables.comparison_matrix(tables.throughput_samples(data["meas"]))
    return data


def matrix_row(matrix, model, batch_size, comparison):
    rows = matrix[
        (matrix.model == model)
        & (matrix.batch_size == batch_size)
        & (matrix.comparison == comparison)
    ]
    assert len(rows) == 1
    return rows.iloc[0]


def test_latest_run_and_previous_run_are_resolved(synthetic):
    assert (synthetic["run_id"], synthetic["baseline_id"]) == (CURRENT_RUN, BASELINE_RUN)


@pytest.mark.parametrize("comparison", ["best", "defaults"])
def test_ratio_and_sentence_match_numpy_medians(synthetic, comparison):
    row = matrix_row(synthetic["matrix"], "resnet50", 8, comparison)
    expected = expected_ratio(synthetic["current"], "resnet50", 8, comparison)
    assert row.ratio == pytest.approx(expected, rel=1e-9)
    # one run: no between-run term, so no winner is called
    assert row.ci_low < row.ratio < row.ci_high and row.winner == "within one run"
    assert row.torch_variant == ("compile" if comparison == "best" else "eager")
    sentence = sentences.ratio_sentence(row)
    assert sentence.startswith("Within one run on ResNet-50 at batch 8 in fp32 with 2 threads")
    assert f"JAX ÷ PyTorch throughput {expected:.2f}× [" in sentence
    decided = row.copy()
    decided["winner"] = "jax"
    assert sentences.ratio_sentence(decided).startswith(f"JAX is {expected:.2f}× [")


def test_pytorch_win_is_said_as_pytorch_faster(synthetic):
    row = matrix_row(synthetic["matrix"], "vit_b_16", 1, "best")
    expected = 1 / expected_ratio(synthetic["current"], "vit_b_16", 1, "best")
    assert row.winner == "within one run" and row.ratio < 1
    decided = row.copy()
    decided["winner"] = "torch"
    assert sentences.ratio_sentence(decided).startswith(f"PyTorch is {expected:.2f}× [")


def test_equivalent_and_inconclusive_ratios_say_so(synthetic):
    row = matrix_row(synthetic["matrix"], "vit_b_16", 8, "best")
    assert row.ratio == pytest.approx(1.0) and row.ci_low <= 1.0 <= row.ci_high
    same = row.copy()
    same["winner"], same["ci90_low"], same["ci90_high"] = "equivalent", 0.97, 1.03
    assert sentences.ratio_sentence(same).startswith(
        "JAX and PyTorch are equivalent within ±5% on ViT-B/16 at batch 8"
    )
    open_ = row.copy()
    open_["winner"], open_["runs_to_decide"] = "inconclusive", 7.0
    said = sentences.ratio_sentence(open_)
    assert said.startswith("Inconclusive on ViT-B/16 at batch 8") and "about 7 runs" in said


def test_an_architecture_without_a_winner_has_a_mean_not_a_lead():
    kinds = pd.DataFrame(
        {
            "comparison": ["best", "best", "best"],
            "kind": ["cnn", "transformer", "transformer"],
            "geomean_ratio": [0.25, 0.998, 0.997],
            "min_ratio": [0.1, 0.86, 0.85],
            "max_ratio": [0.5, 1.16, 1.16],
            "jax_wins": [0, 0, 1],
            "torch_wins": [6, 0, 1],
            "equivalent": [0, 0, 0],
            "undecided": [0, 3, 1],
        }
    )
    cnn, transformer, split = sentences.kind_sentences(kinds)
    assert "each framework is faster somewhere" in split and "leads" not in split
    assert "PyTorch leads by a geometric mean of 4.00×" in cnn
    assert "leads" not in transformer
    assert "no comparison has a faster framework" in transformer
    assert "ratios have a geometric mean of 1.00×" in transformer
    assert "undecided 3" in transformer


def test_the_detector_finds_the_regression_where_it_started(synthetic):
    con = db.connect(synthetic["db_path"], read_only=True)
    sql, params = regressions.histories_query(CAMPAIGN)
    histories = con.execute(sql, params).df()
    con.close()
    changes = regressions.find_regressions(histories)
    thr = changes[changes.metric == "throughput_img_s"]
    regressed = thr[
        thr.configuration.str.contains("family=inference model=resnet50 framework=jax mode=jit")
    ]
    regressed = regressed[regressed.configuration.str.endswith("batch_size=8")]
    assert regressed.run_id.tolist() == [BASELINE_RUN]
    assert regressed.direction.tolist() == ["regression"]
    assert regressed.change_pct.iloc[0] == pytest.approx(100 * (180.0 / BASELINE_CENTER - 1), abs=3)
    # every other throughput history is flat noise of 2% per sample
    assert len(thr) == 1
    text = sentences.history_sentence(changes, histories.run_id.nunique(), CURRENT_RUN)
    assert f"Over {len(EARLIER_RUNS) + 2} runs" in text
    assert "The largest regression is" in text and "from run " + BASELINE_RUN in text


def test_a_short_history_says_the_detector_needs_more_runs():
    text = sentences.history_sentence(pd.DataFrame(), 3, CURRENT_RUN)
    assert "needs at least 4 points" in text


def test_a_regression_from_zero_is_not_given_as_a_percentage():
    # a regret of 0 that becomes positive: the change has no relative size
    changes = pd.DataFrame(
        [
            {
                "metric": "regret_pct",
                "configuration": "model=m",
                "run_id": "r2",
                "change_pct": math.inf,
                "p_value": 0.001,
                "direction": "regression",
            }
        ]
    )
    text = sentences.history_sentence(changes, 4, "r4")
    assert "inf" not in text
    assert "(up from a level of 0 at run r2)" in text
    assert "1 regression and 0 improvements" in text


def test_history_direction_depends_on_the_metric():
    assert vocab.metric_direction("throughput_img_s", "img/s") == vocab.HIGHER_IS_BETTER
    assert vocab.metric_direction("latency_p50_ms", "ms") == vocab.LOWER_IS_BETTER


@pytest.mark.parametrize(
    "args, expected",
    [
        ((10.0, 0.0, 1 / 200, 1 / 100), 2000.0),  # 10 s paid back at 5 ms per image
        ((10.0, 4.0, 1 / 200, 1 / 100), 1200.0),  # only the extra 6 s needs paying back
        ((1.0, 5.0, 1 / 200, 1 / 100), 0.0),  # faster and compiles faster: ahead at once
        ((10.0, 0.0, 1 / 100, 1 / 200), math.inf),  # slower: never pays back
    ],
)
def test_break_even_images(args, expected):
    assert inference_report.break_even_images(*args) == pytest.approx(expected)


def test_break_even_table_uses_recorded_compile_times(synthetic):
    table = inference_report.break_even_table(synthetic["matrix"], synthetic["meas"])
    row = table[
        (table.model == "resnet50") & (table.batch_size == 8) & (table.comparison == "defaults")
    ].iloc[0]
    jax, torch = (
        np.median(synthetic["current"][("resnet50", f, m, 8)])
        for f, m in (("jax", "jit"), ("torch", "eager"))
    )
    assert row.faster == "JAX jit" and row.other == "PyTorch eager"
    assert row.break_even_images == pytest.approx(COMPILE_S["jit"] / (1 / torch - 1 / jax))


@pytest.mark.parametrize(
    "achieved, intensity, regime",
    [(0.05, 10.0, "overhead-bound"), (0.5, 10.0, "memory-bound"), (5.0, 1000.0, "compute-bound")],
)
def test_roofline_classification(achieved, intensity, regime):
    # peak 10 TFLOP/s, 100 GB/s: ridge at 100 FLOP/byte; bound(10) = 1 TFLOP/s
    assert roofline.classify(achieved, intensity, 10.0, 100.0)[0] == regime


def test_roofline_points_use_best_measured_ceilings(synthetic):
    points = roofline.roofline_points(synthetic["meas"])
    jax = points[
        (points.model == "resnet50") & (points.framework == "jax") & (points.batch_size == 8)
    ].iloc[0]
    torch = points[
        (points.model == "resnet50") & (points.variant == "eager") & (points.batch_size == 8)
    ].iloc[0]
    assert (jax.peak_tflops, jax.bandwidth_gbs) == (1.2, 20.0)
    assert jax.intensity == pytest.approx(82.0) and torch.intensity == pytest.approx(82.0)
    assert torch.intensity_source == "JAX program's bytes"
    assert jax.regime in {"memory-bound", "compute-bound", "overhead-bound"}


def test_failures_and_retries(synthetic):
    failures = analysis_report.failures_table(synthetic["meas"], synthetic["cells"])
    assert sorted(failures.status) == ["failed", "oom"]
    failed = failures[failures.status == "failed"].iloc[0]
    assert failed.error.startswith("XlaRuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS")
    assert failed.path.endswith("framework=jax__mode=jit__model=efficientnet_b0.ipynb")
    retries = analysis_report.retries_table(synthetic["cells"])
    assert retries[["changed", "final_status"]].values.tolist() == [
        ["XLA_FLAGS=--xla_gpu_autotune_level=0", "ok"]
    ]


def test_cells_run_on_a_shared_machine_are_listed_and_said_first(synthetic):
    cells = synthetic["cells"]
    shared = analysis_report.shared_machine_table(cells)
    assert shared[
        ["notebook", "other_cpu_frac", "steal_frac", "load_1m_before"]
    ].values.tolist() == [["12_memory", 0.31, 0.02, 0.5]]
    assert shared.path.iloc[0].endswith("12_memory/framework=torch__model=resnet50.ipynb")
    sentence = sentences.shared_machine_sentence(shared, cells)
    assert sentence.startswith(f"1 of {len(cells)} cells ran on a shared machine")
    assert "up to 33%" in sentence
    said = sentences.executive_summary(
        synthetic["matrix"],
        pd.DataFrame(),
        "No history.",
        pd.DataFrame(),
        pd.DataFrame(),
        shared_machine=sentence,
    )
    assert said[0] == sentence
    assert sentences.shared_machine_sentence(shared.iloc[0:0], cells) is None


def test_missing_family_gives_an_empty_table(synthetic):
    assert tables.family_table(synthetic["meas"], "validation").empty
    training = tables.family_table(synthetic["meas"], "training")
    assert training.step_time_p50_ms.dropna().tolist() == [80.0, 100.0]


def test_training_ratio_parity_and_convergence_come_from_the_records(synthetic):
    meas = synthetic["meas"]
    matrix = tables.comparison_matrix(tables.throughput_samples(meas, "training"))
    best = matrix[matrix.comparison == "best"].iloc[0]
    assert best.ratio == pytest.approx(100.0 / 80.0, rel=1e-3)
    assert best.ci_low < best.ratio < best.ci_high and best.winner == "within one run"
    parity = training_report.parity_curves(meas)
    assert parity.groupby("framework").loss.apply(list).to_dict() == {
        "jax": [2.3, 2.1, 1.9000004],
        "torch": [2.3, 2.1, 1.9],
    }
    curves = training_report.convergence_curves(meas)
    loss = curves[(curves.curve == "train loss") & (curves.framework == "jax")]
    assert loss.epoch.tolist() == [0.5, 1.0, 1.5, 2.0]  # 2 steps per epoch
    checks = training_report.check_table(meas, training_report.CONVERGENCE_METRICS)
    assert checks[["framework", "val_top1", "status"]].values.tolist() == [
        ["jax", 90.0, "ok"],
        ["torch", 91.0, "ok"],
    ]


def test_memory_family_keeps_one_row_per_method(synthetic):
    table = tables.family_table(synthetic["meas"], "memory")
    assert table[["mode", "peak_mem_bytes", "iter_time_ms"]].values.tolist() == [
        ["checkpoint", 5e8, 380.0],
        ["none", 9e8, 300.0],
    ]


def test_training_summary_states_ratio_parity_and_convergence(synthetic):
    meas = synthetic["meas"]
    matrix = tables.comparison_matrix(tables.throughput_samples(meas, "training"))
    said = training_report.training_sentences(
        matrix,
        training_report.check_table(meas, training_report.PARITY_METRICS),
        training_report.check_table(meas, training_report.CONVERGENCE_METRICS),
    )
    assert said[0].startswith("Training: Within one run on ResNet-50") and "1.25×" in said[0]
    assert "best modes and defaults" in said[0] and len(said) == 3
    assert "at most 2.0e-07 relative (ResNet-50)" in said[1]
    assert said[2].endswith("ResNet-50 PyTorch 91.0%, JAX 90.0%.")


def test_training_summary_quotes_the_fp64_proof_and_the_fp32_measurement():
    parity = pd.DataFrame(
        [
            {
                "model": "resnet50",
                "status": "ok",
                "fp64_loss_parity_max_rel": 3e-15,
                "fp64_param_parity_max_rel": 2e-12,
                "fp64_bn_stats_parity_max_rel": 4e-11,
                "loss_parity_max_rel": 4.7e-3,
                "fp32_loss_divergence_step": 16.0,
            },
            {
                "model": "efficientnet_b0",
                "status": "failed",
                "fp64_loss_parity_max_rel": 2e-6,
                "fp64_param_parity_max_rel": 1e-5,
                "fp64_bn_stats_parity_max_rel": 1e-5,
                "loss_parity_max_rel": 2e-7,
                "fp32_loss_divergence_step": float("nan"),
            },
        ]
    )
    said = training_report.training_sentences(pd.DataFrame(), parity, pd.DataFrame())
    assert said[0] == (
        "Training parity is proven in float64 for ResNet-50 (same weights, same batches): the "
        "per-step losses of JAX and PyTorch differ by at most 3.0e-15 relative (gate 1e-9), "
        "parameters and BatchNorm statistics by at most 4.0e-11 (gate 1e-8)."
    )
    assert said[1].startswith("Training parity in float64 FAILED for EfficientNet-B0")
    assert said[2].endswith(
        "ResNet-50 4.7e-03, parting by more than 1e-3 at step 16; EfficientNet-B0 2.0e-07."
    )


def test_training_ratios_are_labelled_as_steps_and_inference_as_blocks(synthetic):
    meas = synthetic["meas"]
    train = tables.comparison_matrix(tables.throughput_samples(meas, "training"))
    assert set(train.sample_source) == {"steps"}
    assert set(synthetic["matrix"].sample_source) == {"blocks"}


def test_methodology_quotes_the_resample_count_and_the_samples_the_ratios_used(
    synthetic, monkeypatch
):
    meas, cells = synthetic["meas"], synthetic["cells"]
    run = {"run_id": CURRENT_RUN}
    monkeypatch.setattr(vocab, "BOOTSTRAP_RESAMPLES", 3000)
    inference = tables.throughput_samples(meas)
    training = tables.throughput_samples(meas, "training")
    both = sentences.methodology(run, meas, cells, [inference, training])[-1]
    assert "(3,000 resamples, fixed seed)" in both
    assert "per-block throughputs" in both and "per-step throughputs" in both
    only_training = sentences.methodology(run, meas, cells, [training])[-1]
    assert "per-step throughputs" in only_training and "per-block" not in only_training


def test_mfu_divides_achieved_flops_by_the_devices_ceiling_for_every_family(synthetic):
    meas = synthetic["meas"]
    mfu = roofline.mfu_table(meas, meas)
    assert set(mfu.family) == {"inference", "training"}
    training = mfu[mfu.family == "training"].set_index("framework")
    for framework, step_ms in (("torch", 100.0), ("jax", 80.0)):
        achieved = TRAIN_FLOPS_PER_STEP / (step_ms / 1e3) / 1e12
        row = training.loc[framework]
        # one ceiling per device, precision and threads: the best any framework reached there
        assert row.device_peak_tflops == max(PEAK_TFLOPS.values()) and row.batch_size == 8
        assert row.mfu == pytest.approx(achieved / max(PEAK_TFLOPS.values()))
        assert row.framework_efficiency == pytest.approx(achieved / PEAK_TFLOPS[framework])
        assert row.ceiling_run_id == CURRENT_RUN
    jax = mfu[(mfu.family == "inference") & (mfu.framework == "jax") & (mfu.batch_size == 8)]
    resnet = jax[jax.model == "resnet50"].iloc[0]
    assert resnet.mfu == pytest.approx(resnet.achieved_tflops / max(PEAK_TFLOPS.values()))
    # every ceiling is this run's own: the only note is the one per device for rows above 1
    assert (mfu.mfu > 1).any()
    notes = roofline.mfu_notes(mfu, CURRENT_RUN)
    assert [n[:30] for n in notes if n.startswith("MFU above 1")] == [
        "MFU above 1 on Test CPU 9000 a"
    ]

    rec = Recorder("analysis")
    roofline.add_mfu_records(rec, mfu)
    frame = rec.frame()
    assert (frame.metric == "mfu").all() and len(frame) == len(mfu)
    torch_train = frame[(frame.family == "training") & (frame.framework == "torch")].iloc[0]
    assert torch_train[["model", "mode", "precision"]].tolist() == ["resnet50", "eager", "fp32"]
    assert torch_train.batch_size == 8 and torch_train.device_name == DEVICE_NAME
    assert torch_train.value == pytest.approx(training.loc["torch"].mfu)
    assert torch_train.extra["ceiling_run_id"] == CURRENT_RUN
    assert torch_train.extra["framework_peak_tflops"] == PEAK_TFLOPS["torch"]
    assert torch_train.extra["device_peak_tflops"] == max(PEAK_TFLOPS.values())
    points = roofline.roofline_points(meas)
    point = points[(points.framework == "jax") & (points.model == "resnet50")]
    assert point[point.batch_size == 8].mfu.iloc[0] == pytest.approx(resnet.mfu)


def test_a_run_without_calibration_borrows_the_latest_in_the_index_and_names_it(synthetic):
    meas = synthetic["meas"]
    uncalibrated = meas[meas.family != "calibration"]
    index = synthetic["index_calibration"].copy()
    assert set(index.run_id) == {*EARLIER_RUNS, BASELINE_RUN, CURRENT_RUN}
    # the earlier run measured a higher peak: "latest" must win over "best"
    earlier_peak = (index.run_id == BASELINE_RUN) & (index.metric == "peak_matmul_tflops")
    index.loc[earlier_peak, "value"] = 50.0
    calibration = roofline.calibration_with_fallback(uncalibrated, index)
    assert set(calibration.run_id) == {CURRENT_RUN}
    mfu = roofline.mfu_table(uncalibrated, calibration)
    assert set(mfu.ceiling_run_id) == {CURRENT_RUN} and mfu.mfu.notna().all()
    notes = roofline.mfu_notes(mfu, "20260103T000000Z")
    borrowed = [n for n in notes if not n.startswith("MFU above 1")]
    assert len(borrowed) == 2
    assert all(f"run {CURRENT_RUN} of campaign {CAMPAIGN}" in n for n in borrowed)
    # the run's own calibration, where it has one, comes before anything in the index
    own = roofline.calibration_with_fallback(meas, index)
    assert len(own) == len(meas[meas.family == "calibration"])


def test_no_calibration_anywhere_leaves_mfu_and_roofline_empty_and_says_why(synthetic):
    meas = synthetic["meas"]
    uncalibrated = meas[meas.family != "calibration"]
    nothing = synthetic["index_calibration"].iloc[0:0]
    calibration = roofline.calibration_with_fallback(uncalibrated, nothing)
    ceilings = roofline.device_ceilings(calibration)
    assert ceilings.empty and "ridge_flop_per_byte" in ceilings
    points = roofline.roofline_points(uncalibrated, calibration)
    assert set(points.regime) == {"unclassified"} and points.mfu.isna().all()
    mfu = roofline.mfu_table(uncalibrated, calibration)
    assert mfu.mfu.isna().all() and not mfu.empty
    notes = roofline.mfu_notes(mfu, CURRENT_RUN)
    assert notes and all(n.startswith("No MFU for") for n in notes)
    rec = Recorder("analysis")
    roofline.add_mfu_records(rec, mfu)
    assert all(r["value"] is None and "no peak matmul" in r["extra"]["reason"] for r in rec.rows)


def test_contention_sentence_reads_the_cells(synthetic):
    cells = synthetic["cells"]
    sentence = sentences.contention_sentence(cells)
    assert sentence.startswith(f"Over the {len(cells)} cells with a contention reading")
    assert "up to 31% and the hypervisor up to 2%" in sentence
    assert sentence.endswith("1 ran on a shared machine (above 10%).")
    unread = cells.assign(other_cpu_frac=None, steal_frac=None)
    assert "predates the contention meter" in sentences.contention_sentence(unread)


KINDS = {"resnet50": "cnn", "vit_b_16": "transformer"}


def build_outline(analysis, tmp_path, monkeypatch):
    """Every section of the outline into a fresh content; figures are not exported (slow, and
    tests/test_report.py exports them)."""
    monkeypatch.setattr(charts, "save", lambda *args, **kwargs: {})
    content = ReportContent(
        CAMPAIGN,
        analysis.run_id,
        analysis.baseline_run_id,
        figures_dir=tmp_path / "figures",
        report_dir=tmp_path / "report",
    )
    shown = []
    for section in outline.SECTIONS:
        outline.add_section(content, analysis, section, shown.append)
    # a section with a ``when`` that is false is left out whole (the published GPU figures on
    # a CPU run)
    present = [s for s in outline.SECTIONS if s.when is None or s.when(analysis)]
    assert [s["title"] for s in content.sections] == [s.title for s in present]
    assert "Beside published figures" not in [s["title"] for s in content.sections]
    return content, shown, present


def kinds_of(section):
    return [item["kind"] for item in section["items"]]


def test_every_section_shows_its_figures_and_tables_or_its_empty_note(
    synthetic, tmp_path, monkeypatch
):
    con = db.connect(synthetic["db_path"], read_only=True)
    analysis = outline.load(con, CAMPAIGN, "", "", KINDS)
    con.close()
    content, shown, present = build_outline(analysis, tmp_path, monkeypatch)
    for spec, section in zip(present, content.sections, strict=True):
        if spec.empty is not None and spec.empty(analysis):
            note = outline.fill(spec.empty_note, analysis)
            assert section["items"] == [{"kind": "note", "text": note}], spec.title
        else:
            assert section["items"], spec.title
    # the synthetic run has one trial per cell, no energy reading (RAPL refused), no
    # validation, no distributed, web-audio or prediction records, all else
    empty = [s["title"] for s in content.sections if kinds_of(s) == ["note"]]
    assert empty == [
        "Trust: trials, A/A control and calibration",
        "Energy per image",
        "Validation",
        "Distributed training",
        "Web audio",
        "Prediction",
    ]
    energy = content.sections[[s.title for s in present].index("Energy per image")]
    assert energy["items"][0]["text"] == "No energy was measured in this run (no RAPL access)."
    figures = [i["name"] for s in content.sections for i in s["items"] if i["kind"] == "figure"]
    assert figures == FIGURES
    written = [i["name"] for s in content.sections for i in s["items"] if i["kind"] == "table"]
    assert "history" in written and "shared_machine" in written
    for name in written:
        assert (tmp_path / "report" / "tables" / f"{name}.csv").is_file()
    # the notebook displays each figure and table, and each heading and note as markdown
    assert sum(not isinstance(x, str) for x in shown) == len(figures) + len(written)
    history = content.sections[[s.title for s in present].index("History")]
    assert history["items"][0]["caption"] == (
        f"Level changes in this campaign's histories up to run {CURRENT_RUN}: the metric and "
        "configuration, the run where the new level starts, the change and its p-value."
    )


def test_a_run_without_records_states_each_sections_empty_note(synthetic, tmp_path, monkeypatch):
    con = db.connect(synthetic["db_path"], read_only=True)
    full = outline.load(con, CAMPAIGN, "", "", KINDS)
    con.close()
    analysis = dataclasses.replace(
        full,
        baseline_run_id="",
        meas=full.meas.iloc[0:0],
        baseline=full.meas.iloc[0:0],
        cells=full.cells.iloc[0:0],
        index_calibration=full.index_calibration.iloc[0:0],
        pool_samples=full.pool_samples.iloc[0:0],
    )
    content, shown, present = build_outline(analysis, tmp_path, monkeypatch)
    assert all(not s["items"] or set(kinds_of(s)) == {"note"} for s in content.sections)
    assert all(isinstance(x, str) for x in shown)
    for spec, section in zip(present, content.sections, strict=True):
        if spec.empty is not None:
            assert spec.empty(analysis), spec.title
            note = outline.fill(spec.empty_note, analysis)
            assert section["items"] == [{"kind": "note", "text": note}], spec.title
    notes = {s["title"]: [i["text"] for i in s["items"]] for s in content.sections}
    assert notes["Roofline and MFU"] == [
        "No FLOP counts were recorded in this run, so there is no roofline."
    ]
    assert notes["MFU"] == ["No achieved FLOP/s was recorded in this run, so there is no MFU."]
    assert notes["Training"] == ["No training records in this run."]
    assert len(notes["Cells run on a shared machine"]) == 1


def _ceiling_and_flop_rows(threads_peaks: dict, achieved: dict) -> pd.DataFrame:
    """Calibration records of one device at several thread counts, and one inference
    configuration's achieved TFLOP/s at each, as the loader returns them."""
    rows = []
    for threads, peak in threads_peaks.items():
        for metric, value in (("peak_matmul_tflops", peak), ("copy_bandwidth_gbs", 10.0 * peak)):
            rec = Recorder("calibration", framework="torch", mode="eager", device="cpu")
            rec.add(metric, value, "TFLOP/s", device_name=DEVICE_NAME, precision="fp32")
            rows.append({**rec.rows[0], "threads": threads, "cell": f"t{threads}"})
    for threads, value in achieved.items():
        rec = Recorder("inference", model="resnet50", framework="torch", mode="eager")
        rec.add("achieved_tflops", value, "TFLOP/s", device="cpu", device_name=DEVICE_NAME)
        rows.append({**rec.rows[0], "threads": threads, "precision": "fp32", "batch_size": 8})
    meas = pd.DataFrame(rows).assign(run_id=CURRENT_RUN, campaign=CAMPAIGN, status="ok")
    meas["extra"] = [{"flops_per_img": 8.2e9, "bytes_per_img": 1e8} for _ in range(len(meas))]
    meas["variant"] = meas["mode"]
    meas["batch_size"] = meas["batch_size"].astype("Int64")
    return meas


def test_a_one_core_configuration_divides_by_the_one_core_peak():
    meas = _ceiling_and_flop_rows({1: 0.05, 2: 0.1}, {1: 0.04, 2: 0.06})
    mfu = roofline.mfu_table(meas, meas).set_index("threads")
    assert mfu.loc[1].mfu == pytest.approx(0.8) and mfu.loc[2].mfu == pytest.approx(0.6)
    ceilings = roofline.device_ceilings(meas).set_index("threads")
    assert ceilings.peak_tflops.to_dict() == {1: 0.05, 2: 0.1}
    points = roofline.roofline_points(meas).set_index("threads")
    # intensity 82 FLOP/byte against each count's own bandwidth (0.5 and 1 GB/s): memory-bound
    assert points.bound_tflops.to_dict() == pytest.approx({1: 0.041, 2: 0.082})
    # a thread count nobody calibrated gets no ceiling, rather than another count's
    alone = _ceiling_and_flop_rows({2: 0.1}, {1: 0.04})
    assert roofline.mfu_table(alone, alone).mfu.isna().all()
    notes = roofline.mfu_notes(roofline.mfu_table(alone, alone), CURRENT_RUN)
    assert notes and "at fp32 with 1 thread:" in notes[0]


def _bound_inputs(share: float, ops: dict):
    key = {"model": "resnet50", "device": "cpu", "device_name": DEVICE_NAME, "precision": "fp32"}
    key |= {"threads": 2, "batch_size": 8}
    points = pd.DataFrame(
        [
            {**key, "framework": "torch", "variant": "compile", "share_of_bound": share},
            {**key, "framework": "jax", "variant": "jit", "share_of_bound": 0.9},
            {
                **key,
                "model": "mobilenet_v3_small",
                "framework": "jax",
                "variant": "jit",
                "share_of_bound": 0.1,
            },
        ]
    ).assign(achieved_tflops=lambda f: f.share_of_bound * 0.1, bound_tflops=0.1)
    points["regime"] = "compute-bound"
    matrix = pd.DataFrame(
        [
            {**key, "comparison": c, "jax_variant": "jit", "torch_variant": v}
            for c, v in (("best", "compile"), ("defaults", "eager"))
        ]
        + [
            {
                **key,
                "model": "mobilenet_v3_small",
                "comparison": "best",
                "jax_variant": "jit",
                "torch_variant": "eager",
            }
        ]
    )
    breakdown = pd.DataFrame(
        [
            {**key, "framework": "torch", "variant": "compile", "category": c, "ms": ms}
            for c, ms in ops.items()
        ]
    )
    return points, matrix, breakdown


def test_the_share_of_the_bound_is_said_for_each_best_mode_and_what_holds_it_back():
    # 60 of 100 ms in convolution and matmul at a share of 0.45: they reach 0.75 while they run
    ops = {
        "convolution": 50.0,
        "matmul/linear": 10.0,
        "framework overhead": 25.0,
        "elementwise/activation": 10.0,
        "normalisation": 5.0,
    }
    lines = roofline.bound_share_sentences(*_bound_inputs(0.45, ops))
    assert len(lines) == 2  # PyTorch's and JAX's best modes on ResNet-50; not MobileNetV3-S
    torch, jax = lines
    assert torch.startswith(
        f"PyTorch's best mode on ResNet-50 at batch 8 in fp32 with 2 threads on {DEVICE_NAME}, "
        "compile, reaches 0.45 of its roofline bound (0.045 of 0.100 TFLOP/s, compute-bound)."
    )
    assert "take 60% of the time and, while they run, reach about 0.75 of the bound" in torch
    # the other 40 ms: overhead and elementwise hold 35 of them (>= 80%), normalisation is left
    assert "framework overhead 25.00 ms (25%), elementwise/activation 10.00 ms (10%)." in torch
    assert "normalisation" not in torch
    assert jax.startswith("JAX's best mode on ResNet-50") and "holds it back" not in jax
    unprofiled = roofline.bound_share_sentences(*_bound_inputs(0.45, {}))
    assert "No per-op profile" in unprofiled[0]
    at_bound = roofline.bound_share_sentences(*_bound_inputs(0.7, ops))
    assert "holds it back" not in at_bound[0]
