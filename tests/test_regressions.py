import json

import nbformat
import numpy as np
import pandas as pd
import pytest

from fwbench.report import regressions
from fwbench.results import db
from fwbench.results.records import RECORDS_MIME, Recorder
from tests.conftest import run_cli

# The noise of the tests is this machine's: 34 per-call latencies (ms) of mobilenet_v3_small,
# torch eager, batch 1, in the smoke run 20261121T233432Z on a 2-core VM (coefficient of
# variation 6.9%, a tight core and a few slow calls). The detector meets issue 13's goals on it
# from 7 trials per point.
MEASURED = np.array(
    [
        14.436,
        13.867,
        13.603,
        13.931,
        15.048,
        15.215,
        14.704,
        14.282,
        14.586,
        13.730,
        14.377,
        15.366,
        14.834,
        14.981,
        14.664,
        14.475,
        14.911,
        14.001,
        15.159,
        15.344,
        15.004,
        14.376,
        14.081,
        14.427,
        16.683,
        15.996,
        14.788,
        14.983,
        14.929,
        15.390,
        18.731,
        17.424,
        15.188,
        14.159,
    ]
)
TRIALS = 7


def history_with_step(step, *, trials=TRIALS, seed=1, points=10, at=5):
    rng = np.random.default_rng(seed)
    return regressions.synthetic_history(MEASURED, trials, step, rng, points=points, change_at=at)


# --------------------------------------------------------------------------- the detector


@pytest.mark.parametrize("step", [0.20, -0.20])
def test_a_20pct_step_is_found_at_its_run_with_its_size(step):
    changes = regressions.detect(history_with_step(step))
    assert len(changes) == 1
    change = changes[0]
    assert change.index == 5
    assert change.change_pct == pytest.approx(100 * step, abs=4)
    assert change.p_value < regressions.ALPHA
    assert change.after / change.before == pytest.approx(1 + step, abs=0.04)


def test_two_steps_are_both_found_and_measured_against_their_own_segments():
    rng = np.random.default_rng(3)
    history = regressions.synthetic_history(MEASURED, TRIALS, 0.0, rng, points=12)
    history[4:] *= 1.25
    history[8:] /= 1.25
    changes = regressions.detect(history)
    assert [c.index for c in changes] == [4, 8]
    # against the level between the two changes, not the whole history's
    assert changes[0].change_pct == pytest.approx(25, abs=7)
    assert changes[1].change_pct == pytest.approx(-20, abs=7)


def test_a_step_below_the_minimum_effect_is_not_reported_however_certain():
    history = np.r_[np.full(5, 100.0), np.full(5, 103.0)] + np.tile([0.01, -0.01], 5)
    assert regressions.detect(history, min_change=0.05) == []
    assert [c.index for c in regressions.detect(history, min_change=0.02)] == [5]


def test_exact_values_and_non_positive_values():
    assert regressions.detect([1.0] * 8) == []
    (flip,) = regressions.detect([1, 1, 1, 1, 0, 0, 0, 0])
    assert (flip.index, flip.change_pct, flip.p_value) == (4, -100.0, 0.0)
    with pytest.raises(ValueError):
        regressions.detect([1.0, float("nan"), 1.0, 1.0])


def test_flat_noise_stays_silent_as_each_run_arrives():
    # 400 A/A histories, re-read at every new run as a CI job would: the promise is at most one
    # false alert per 100 histories at the noise of this machine and 7 trials per point.
    rng = np.random.default_rng(11)
    alerts = sum(
        len(regressions.alerts_changepoint(regressions.synthetic_history(MEASURED, TRIALS, 0, rng)))
        for _ in range(400)
    )
    assert alerts <= 4, f"{alerts} false alerts in 400 A/A histories"


def test_synthetic_points_are_medians_of_jittered_draws_that_never_tie():
    rng = np.random.default_rng(0)
    flat = regressions.synthetic_history(MEASURED, 5, 0.0, rng, points=200)
    assert len(np.unique(flat)) == 200
    # the median of 5 draws is tighter than one draw, and centred on the pool's median
    assert np.std(flat) / np.median(flat) < np.std(MEASURED) / np.median(MEASURED)
    assert np.median(flat) == pytest.approx(np.median(MEASURED), rel=0.01)
    slowed = regressions.synthetic_history(MEASURED, 5, 0.2, np.random.default_rng(0), points=200)
    assert slowed[:5] == pytest.approx(flat[:5])
    assert slowed[5:] == pytest.approx(1.2 * flat[5:])


# --------------------------------------------------------------------------- the evaluation


def test_the_evaluation_scores_alerts_by_where_and_when_they_are_raised():
    """Hand-made methods whose scores can be worked out: one flags the first slow run as soon as
    two slow runs are in; the other flags a run before the change, which is always wrong."""
    right = {"right": lambda h: {regressions.CHANGE_AT: regressions.CHANGE_AT + 2}}
    wrong = {"wrong": lambda h: {2: 4}}
    scores = regressions.evaluate(MEASURED, series=10, methods={**right, **wrong})
    r, w = scores.set_index("method").loc["right"], scores.set_index("method").loc["wrong"]
    assert [r[f"recall_{s:g}"] for s in regressions.SIZES] == [1.0, 1.0, 1.0]
    assert r.false_per_100 == 100.0  # it flags every A/A history once
    assert (r.delay_median, r.within_3) == (2.0, 1.0)
    assert r.precision == pytest.approx(30 / 40)
    assert r.f1 == pytest.approx(2 * 0.75 / 1.75)
    assert (w.recall, w.false_per_100, w.precision, w.f1) == (0.0, 100.0, 0.0, 0.0)


def test_the_detector_against_the_baselines_on_a_seeded_synthetic_set():
    scores = regressions.evaluate(MEASURED, trials=TRIALS, series=100, seed=5)
    by = scores.set_index("method")
    cp, fixed, plain = by.loc["changepoint"], by.loc["fixed_7pct"], by.loc["plain_ttest"]
    assert cp["recall_0.2"] >= 0.99
    assert cp["recall_0.1"] >= regressions.GOAL_RECALL_10PCT
    assert cp.false_per_100 <= regressions.GOAL_FALSE_PER_100
    assert cp.delay_median <= regressions.GOAL_DELAY_RUNS
    # the baselines buy their recall with false alerts on flat histories
    assert fixed.false_per_100 >= 3 and plain.false_per_100 >= 20
    assert cp.precision > max(fixed.precision, plain.precision)


def test_the_goals_need_every_one_of_them_and_the_best_f1():
    base = {"recall_0.1": 0.95, "false_per_100": 0.5, "delay_median": 2.0, "f1": 0.9}
    other = {"method": "fixed_7pct", "recall_0.1": 1.0, "false_per_100": 9, "delay_median": 1}

    def frame(**change):
        rows = [{"method": "changepoint", **base, **change}, {**other, "f1": 0.85}]
        return pd.DataFrame(rows)

    assert regressions.meets_goals(frame())
    assert not regressions.meets_goals(frame(**{"recall_0.1": 0.89}))
    assert not regressions.meets_goals(frame(false_per_100=1.5))
    assert not regressions.meets_goals(frame(delay_median=4.0))
    assert not regressions.meets_goals(frame(f1=0.85))


# --------------------------------------------------------------------------- the command

STEADY = [100.0, 101.0, 99.5, 100.5, 99.0, 100.2, 100.8, 99.4]
STEP = [100.0, 101.0, 99.5, 100.5, 120.0, 121.5, 119.0, 120.6]


def write_run(root, index, values, settings=None):
    """One run of campaign ``demo`` holding one latency point per configuration in ``values``;
    ``settings``: more of its cells' parameters (a design of the campaign)."""
    run_id = f"2026010{index}T000000Z"
    run_dir = root / "demo" / run_id
    (run_dir / "10_inference").mkdir(parents=True)
    (run_dir / "manifest.json").write_text(
        json.dumps(
            {
                "campaign": "demo",
                "run_id": run_id,
                "started_at": f"2026-01-0{index}T00:00:00Z",
                "environment": {"host": "h"},
                "cells": {},
            }
        )
    )
    for framework, value in values.items():
        rec = Recorder(
            "inference",
            model="resnet50",
            framework=framework,
            mode="eager" if framework == "torch" else "jit",
            device="cpu",
            device_name="Test CPU",
            precision="fp32",
            threads=2,
            batch_size=8,
        )
        # two trials around the point: the history takes their median
        rec.add("latency_p50_ms", value * 0.99, "ms", trial=1)
        rec.add("latency_p50_ms", value * 1.01, "ms", trial=2)
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", data={RECORDS_MIME: rec.rows})]
        nb.cells = [cell]
        nb.metadata["fwbench"] = {
            "run_id": run_id,
            "campaign": "demo",
            "notebook": "10_inference",
            "cell": f"framework={framework}",
            "trial": 0,
            "status": "ok",
            "error": None,
            "parameters": {"model": "resnet50", "framework": framework, **(settings or {})},
        }
        nbformat.write(nb, str(run_dir / "10_inference" / f"framework={framework}.ipynb"))
    return run_id


@pytest.fixture
def index(tmp_path):
    runs = tmp_path / "runs"
    ids = [write_run(runs, i + 1, {"jax": STEADY[i], "torch": STEP[i]}) for i in range(len(STEP))]
    dbp = tmp_path / "x.duckdb"
    db.ingest(runs, dbp)
    return dbp, ids


def test_a_change_of_design_is_two_histories_not_a_regression(tmp_path):
    # the same step as the fixture's, where the campaign's design changed: half the runs at one
    # target, half at another (an A/A copy's flag is no design: it measures the same cell)
    runs = tmp_path / "runs"
    for i in range(len(STEP)):
        design = {"target": 97.0 if i < 4 else 98.0, "aa_copy": i % 2}
        write_run(runs, i + 1, {"jax": STEADY[i], "torch": STEP[i]}, design)
    dbp = tmp_path / "x.duckdb"
    db.ingest(runs, dbp)
    histories = regressions.load_histories(dbp, "demo")
    assert (histories.groupby("framework").design.nunique() == 2).all()
    assert regressions.find_regressions(histories).empty
    # one design throughout: the step is found, as in the fixture's index
    runs = tmp_path / "same"
    for i in range(len(STEP)):
        write_run(runs, i + 1, {"jax": STEADY[i], "torch": STEP[i]}, {"aa_copy": i % 2})
    db.ingest(runs, tmp_path / "y.duckdb")
    found = regressions.find_regressions(regressions.load_histories(tmp_path / "y.duckdb", "demo"))
    assert found.run_id.tolist() == ["20260105T000000Z"]


def test_histories_hold_one_point_per_run_in_run_order(index):
    dbp, ids = index
    histories = regressions.load_histories(dbp, "demo")
    torch = histories[histories.framework == "torch"]
    assert torch.run_id.tolist() == ids
    assert torch.value.to_numpy() == pytest.approx(STEP)


def test_histories_carry_each_points_spread_and_the_run_sd_follows_from_it(index):
    dbp, _ids = index
    histories = regressions.load_histories(dbp, "demo")
    trials = np.log([0.99, 1.01])  # each run's two trials around its point
    assert (histories.n_values == 2).all()
    torch = histories[histories.framework == "torch"]
    assert torch.log_mean.to_numpy() == pytest.approx(np.log(STEP) + trials.mean())
    assert torch.log_var.to_numpy() == pytest.approx(np.full(len(STEP), trials.var(ddof=1)))
    # one-way random effects over both configurations' 8 runs: the spread of the runs' means
    # less what two trials explain (the step counts as run noise: it is no flat history)
    between = [np.var(np.log(h), ddof=1) - trials.var(ddof=1) / 2 for h in (STEADY, STEP)]
    noise = regressions.run_noise(histories, metric="latency_p50_ms")
    assert noise.sd == pytest.approx(np.sqrt(np.mean(between)))
    assert noise.describe().startswith("estimated from 8 runs (2 configurations")


def test_the_command_prints_the_run_where_the_level_moved(index):
    dbp, ids = index
    proc = run_cli("regressions", "--campaign", "demo", "--db", dbp)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "metric,configuration,run_id,change_pct,p_value,direction"
    assert len(lines) == 2, lines
    metric, configuration, run_id, change_pct, p_value, direction = lines[1].split(",")
    assert metric == "latency_p50_ms"
    assert configuration == (
        "family=inference model=resnet50 framework=torch mode=eager device_name=Test CPU "
        "precision=fp32 threads=2 batch_size=8"
    )
    assert direction == "regression"  # a latency that went up
    assert run_id == ids[4]
    assert float(change_pct) == pytest.approx(20.0, abs=1.0)
    assert float(p_value) < regressions.ALPHA


def test_without_a_campaign_the_configuration_names_it(index):
    dbp, _ids = index
    proc = run_cli("regressions", "--db", dbp)
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.splitlines()[1]
        .split(",")[1]
        .startswith("campaign=demo family=inference model=resnet50")
    )


def test_a_quiet_history_prints_only_the_header(tmp_path):
    for i in range(6):
        write_run(tmp_path / "runs", i + 1, {"jax": STEADY[i]})
    db.ingest(tmp_path / "runs", tmp_path / "x.duckdb")
    proc = run_cli("regressions", "--db", tmp_path / "x.duckdb")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["metric,configuration,run_id,change_pct,p_value,direction"]


def test_an_unknown_campaign_or_a_missing_index_is_bad_input(index, tmp_path):
    dbp, _ids = index
    proc = run_cli("regressions", "--campaign", "nope", "--db", dbp)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "'nope'" in proc.stderr and "demo" in proc.stderr
    missing = run_cli("regressions", "--db", tmp_path / "absent.duckdb")
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "absent.duckdb" in missing.stderr
    assert not (tmp_path / "absent.duckdb").exists()


def test_the_help_states_the_thresholds_the_detector_uses():
    proc = run_cli("regressions", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert f"p < {regressions.ALPHA:g}" in text
    assert f"at least {100 * regressions.MIN_CHANGE:g}%" in text
    assert f"needs {2 * regressions.MIN_SIZE} runs" in text


def test_paired_reads_no_history_where_no_run_records_its_cpu_model(tmp_path):
    # these runs record no CPU family, so no series can pool them: the header and nothing more
    for i in range(6):
        write_run(tmp_path / "runs", i + 1, {"jax": STEADY[i]})
    db.ingest(tmp_path / "runs", tmp_path / "x.duckdb")
    proc = run_cli("regressions", "--paired", "--db", tmp_path / "x.duckdb")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "campaign,cpu,comparison,slower,run_id,change_pct,statistic,threshold,runs"
    ]
    assert "--paired" in run_cli("regressions", "--help").stdout
