"""Trust in a comparison: trials paired by round, shared trials dropped and re-run, the A/A
control, stability between runs, and the detector's noise pool."""

import numpy as np
import pandas as pd
import pytest

from fwbench.pipeline import trial as one_trial
from fwbench.pipeline.campaign import Cell
from fwbench.report import sentences, tables, trust
from fwbench.results.records import Recorder

CONFIG_VALUES = {"device": "cpu", "device_name": "Test CPU", "precision": "fp32", "threads": 2}


def trial_records(model, framework, mode, values, batch_size=4, shared=()):
    """Throughput records of one arm, one per trial, as the loader returns them."""
    rows = []
    for trial, value in enumerate(values, start=1):
        rec = Recorder(
            "inference",
            model=model,
            framework=framework,
            mode=mode,
            batch_size=batch_size,
            **CONFIG_VALUES,
        )
        rec.add("throughput_img_s", value, "img/s", n=10)
        row = rec.rows[0]
        row.update(trial=trial, notebook="10_inference", cell=f"{framework}-{model}")
        row.update(shared_machine=trial in shared, reruns=int(trial in shared))
        rows.append(row)
    return rows


def frame(*arms) -> pd.DataFrame:
    rows = [row for arm in arms for row in arm]
    meas = pd.DataFrame(rows)
    meas["status"] = "ok"
    meas["extra"] = [{} for _ in range(len(meas))]
    meas["variant"] = meas["mode"]
    meas["batch_size"] = meas["batch_size"].astype("Int64")
    return meas


def rounds_with_effects(rng, n, scale, ratio=1.0, noise=0.01):
    """Per-round throughputs of two arms that share each round's machine state."""
    shared = np.exp(rng.normal(0.0, 0.25, n))  # the round effect: large, and the same for both
    torch = scale * shared * np.exp(rng.normal(0.0, noise, n))
    jax = ratio * scale * shared * np.exp(rng.normal(0.0, noise, n))
    return torch, jax


def pooled(*runs) -> pd.DataFrame:
    """``throughput_samples`` of several runs (each a list of record lists) in one frame."""
    return pd.concat(
        [
            tables.throughput_samples(frame(*arms)).assign(run_id=f"run{i}")
            for i, arms in enumerate(runs)
        ],
        ignore_index=True,
    )


def test_a_comparison_pairs_trials_by_round_and_its_interval_holds_the_true_ratio():
    rng = np.random.default_rng(3)
    runs = []
    for _ in range(3):
        shift = np.exp(rng.normal(0.0, 0.02))  # each run moves the ratio a little
        torch, jax = rounds_with_effects(rng, 6, 100.0, ratio=1.5 * shift)
        runs.append(
            [
                trial_records("resnet50", "torch", "eager", torch),
                trial_records("resnet50", "jax", "jit", jax),
            ]
        )
    matrix = tables.comparison_matrix(pooled(*runs))
    row = matrix[matrix.comparison == "defaults"].iloc[0]
    assert row.interval == "paired" and row.runs == 3 and row.rounds == 6
    assert row.design == "3 runs × 6 rounds" and row.between_term == "fitted"
    assert row.ci_low < 1.5 < row.ci_high and row.winner == "jax"
    # one of those runs alone has no between-run term and calls no winner
    alone = tables.comparison_matrix(pooled(runs[0])).iloc[0]
    assert alone.winner == "within one run" and alone.design == "1 run × 6 rounds"
    torch, jax = runs[0][0], runs[0][1]
    torch, jax = [r["value"] for r in torch], [r["value"] for r in jax]
    # pairing is what removes the round effect: the unpaired bootstrap over the same trials is
    # far wider, and here cannot even tell the sides apart
    _ratio, low, high = tables.ratio_ci(jax, torch)
    assert low < 1.0 < high
    assert np.log(high / low) > 3 * np.log(alone.ci_high / alone.ci_low)


def test_rounds_with_a_shared_arm_are_dropped_when_three_clean_ones_remain():
    rng = np.random.default_rng(4)
    torch, jax = rounds_with_effects(rng, 5, 100.0, ratio=1.0)
    jax_hit = jax.copy()
    jax_hit[1] *= 0.4  # round 2: a neighbour took the CPU from the JAX trial only
    meas = frame(
        trial_records("resnet50", "torch", "eager", torch),
        trial_records("resnet50", "jax", "jit", jax_hit, shared={2}),
    )
    row = tables.comparison_matrix(tables.throughput_samples(meas)).iloc[0]
    assert row.rounds == 4 and row.dropped_shared == 1
    assert row.ci_low < 1.0 < row.ci_high and row.winner == "within one run"
    # with only three rounds, two of them shared, every round is kept and nothing is dropped
    meas = frame(
        trial_records("resnet50", "torch", "eager", torch[:3], shared={1}),
        trial_records("resnet50", "jax", "jit", jax_hit[:3], shared={2}),
    )
    row = tables.comparison_matrix(tables.throughput_samples(meas)).iloc[0]
    assert row.rounds == 3 and row.dropped_shared == 0


def test_single_trials_fall_back_to_the_within_run_interval():
    meas = frame(
        trial_records("resnet50", "torch", "eager", [100.0]),
        trial_records("resnet50", "jax", "jit", [150.0]),
    )
    meas.loc[:, "trial"] = 0
    row = tables.comparison_matrix(tables.throughput_samples(meas)).iloc[0]
    assert row.interval == "within-run" and row.rounds == 1
    assert trust.trials_table(tables.throughput_samples(meas)).empty


def test_trials_table_counts_reruns_and_trials_still_shared():
    samples = tables.throughput_samples(
        frame(trial_records("resnet50", "torch", "eager", [1.0, 2.0, 3.0, 4.0], shared={1, 3}))
    )
    row = trust.trials_table(samples).iloc[0]
    assert (row.trials, row.reruns, row.still_shared, row.used) == (4, 2, 2, 4)


def aa_runs(rng, configurations: int, runs: int, offset: float = 0.0):
    """Runs of duplicate arms: each configuration's original and its copy (variant ``#copy``),
    the copy ``offset`` slower in log terms in every run."""
    out = []
    for _ in range(runs):
        arms = []
        for i in range(configurations):
            torch, copy = rounds_with_effects(rng, 6, 100.0, ratio=np.exp(-offset))
            arms.append(trial_records(f"m{i}", "torch", "eager", torch))
            arms.append(trial_records(f"m{i}", "torch", "eager#copy", copy))
        out.append(arms)
    return out


def test_the_aa_control_judges_duplicate_arms_with_the_verdicts_estimator():
    rng = np.random.default_rng(5)
    aa = trust.aa_control(pooled(*aa_runs(rng, 14, 3)))
    assert len(aa) == 42 and aa.run_id.nunique() == 3  # comparisons count across runs
    assert trust.aa_rate(aa) <= 0.10
    assert set(aa.variant) == {"eager"}
    # a copy 15% slower in every run is no longer the same configuration twice
    aa = trust.aa_control(pooled(*aa_runs(rng, 6, 3, offset=0.15)))
    assert aa.false_winner.sum() > 0
    # one run has no between-run term: no A/A rate
    assert trust.aa_control(pooled(*aa_runs(rng, 6, 1))).empty


def test_calibration_checks_the_latest_run_against_the_earlier_runs():
    rng = np.random.default_rng(6)
    runs = []
    for _ in range(4):
        arms = []
        for model, ratio in (("a", 1.5), ("b", 0.8), ("c", 1.0), ("d", 2.0)):
            torch, jax = rounds_with_effects(rng, 6, 100.0, ratio=ratio)
            arms += [
                trial_records(model, "torch", "eager", torch),
                trial_records(model, "jax", "jit", jax),
            ]
        runs.append(arms)
    table = trust.calibration(pooled(*runs), "run3")
    summary = trust.calibration_summary(table)
    assert summary["comparisons"] == 4 and summary["earlier_runs"] == 3
    assert summary["inside"] >= 3 and summary["reversed"] == 0
    assert trust.calibration(pooled(*runs[:2]), "run1").empty  # one earlier run is too few


def test_the_noise_pool_is_each_arms_trials_over_its_median():
    meas = frame(
        trial_records("a", "torch", "eager", [10.0, 11.0, 9.0, 10.0, 12.0]),
        trial_records("b", "torch", "eager", [100.0, 90.0, 110.0, 100.0, 100.0]),
        trial_records("c", "torch", "eager", [1.0, 2.0, 3.0]),  # too few for a point of 5
    )
    pool = trust.noise_pool(tables.throughput_samples(meas))
    assert len(pool) == 10
    assert sorted(pool[:5]) == pytest.approx([0.9, 1.0, 1.0, 1.1, 1.2])


def test_a_shared_trial_runs_again_up_to_the_bound_and_keeps_each_reading(monkeypatch, tmp_path):
    readings = iter([0.4, 0.3, 0.2, 0.0])
    calls = []

    def fake_execute(cell, run_dir, context, timeout, reruns=None):
        calls.append(list(reruns or []))
        other = next(readings)
        contention = {"other_cpu_frac": other, "steal_frac": 0.0, "shared": other > 0.1}
        return one_trial.CellResult(
            "ok", None, 1.0, contention=contention, reruns=list(reruns or [])
        )

    monkeypatch.setattr(one_trial, "execute_cell", fake_execute)
    cell = Cell("standin", tmp_path / "standin.py", "x=1__trial=1", {}, trial=1, interleaved=True)
    result = one_trial.run_trial(cell, tmp_path, {}, None, rerun_shared=2)
    # three attempts: the first two shared and discarded, the third kept though still shared
    assert len(calls) == 3 and [len(c) for c in calls] == [0, 1, 2]
    assert [r["contention"]["other_cpu_frac"] for r in result.reruns] == [0.4, 0.3]
    assert result.contention["other_cpu_frac"] == 0.2
    # a cell outside the rounds is never re-run
    readings = iter([0.4])
    calls.clear()
    single = Cell("standin", tmp_path / "standin.py", "x=1", {}, trial=0, interleaved=False)
    assert one_trial.run_trial(single, tmp_path, {}, None, rerun_shared=2).reruns == []
    assert len(calls) == 1


def test_one_core_and_two_are_two_configurations_and_are_never_pooled():
    rng = np.random.default_rng(5)
    arms = []
    for threads, ratio in ((1, 2.0), (2, 0.5)):
        torch, jax = rounds_with_effects(rng, 5, 100.0, ratio=ratio)
        for arm in (
            trial_records("resnet50", "torch", "eager", torch),
            trial_records("resnet50", "jax", "jit", jax),
        ):
            arms.append([{**row, "threads": threads} for row in arm])
    matrix = tables.comparison_matrix(tables.throughput_samples(frame(*arms)))
    best = matrix[matrix.comparison == "best"].set_index("threads")
    assert sorted(best.index) == [1, 2] and (best.rounds == 5).all()
    assert best.loc[1].ratio == pytest.approx(2.0, rel=0.05)
    assert best.loc[2].ratio == pytest.approx(0.5, rel=0.05)
    one = matrix[(matrix.threads == 1) & (matrix.comparison == "best")].iloc[0]
    assert "at batch 4 in fp32 with 1 thread on Test CPU" in sentences.ratio_sentence(one)
