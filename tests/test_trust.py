"""Trust in a comparison: trials paired by round, shared trials dropped and re-run, the A/A
control, stability between runs, and the detector's noise pool."""

import numpy as np
import pandas as pd
import pytest

from fwbench.pipeline import runner
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


def test_a_comparison_pairs_trials_by_round_and_its_interval_holds_the_true_ratio():
    rng = np.random.default_rng(3)
    torch, jax = rounds_with_effects(rng, 6, 100.0, ratio=1.5)
    meas = frame(
        trial_records("resnet50", "torch", "eager", torch),
        trial_records("resnet50", "jax", "jit", jax),
    )
    matrix = tables.comparison_matrix(tables.throughput_samples(meas))
    row = matrix[matrix.comparison == "defaults"].iloc[0]
    assert row.interval == "paired" and row.rounds == 6 and row.dropped_shared == 0
    assert row.ci_low < 1.5 < row.ci_high and row.winner == "jax"
    # pairing is what removes the round effect: the unpaired bootstrap over the same trials is
    # far wider, and here cannot even tell the sides apart
    _ratio, low, high = tables.ratio_ci(jax, torch)
    assert low < 1.0 < high
    assert np.log(high / low) > 10 * np.log(row.ci_high / row.ci_low)


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
    assert row.ci_low < 1.0 < row.ci_high and row.winner == "tie"
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


def test_aa_splits_are_every_distinct_pair_of_disjoint_halves():
    values = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    splits = list(trust.aa_splits(values))
    assert len(splits) == 10  # C(6, 3) / 2: a split and its mirror are one comparison
    seen = set()
    for left, right in splits:
        assert len(left) == len(right) == 3 and not set(left) & set(right)
        assert left == sorted(left) and right == sorted(right)  # time order kept
        key = frozenset([tuple(left), tuple(right)])
        assert key not in seen
        seen.add(key)


def test_the_aa_control_rarely_calls_a_winner_between_halves_of_one_arm():
    rng = np.random.default_rng(5)
    arms = []
    for i in range(40):
        values = 100.0 * np.exp(rng.normal(0.0, 0.05, 6))
        arms.append(trial_records(f"m{i}", "torch", "eager", values))
    aa = trust.aa_control(tables.throughput_samples(frame(*arms)))
    assert len(aa) == 40 and (aa.splits == 10).all()
    assert trust.aa_rate(aa) <= 0.10
    # an arm that drifts steadily is no longer the same configuration twice: the control sees it
    drifting = trial_records("drift", "torch", "eager", 100.0 * 1.08 ** np.arange(6))
    aa = trust.aa_control(tables.throughput_samples(frame(drifting)))
    assert aa.false_winners.iloc[0] > 0


def matrix_rows(values: dict) -> pd.DataFrame:
    rows = []
    for (model, batch), (ratio, low, high) in values.items():
        rows.append(
            {
                "model": model,
                "batch_size": batch,
                **CONFIG_VALUES,
                "comparison": "defaults",
                "jax_variant": "jit",
                "torch_variant": "eager",
                "ratio": ratio,
                "ci_low": low,
                "ci_high": high,
                "winner": tables.verdict(ratio, low, high),
            }
        )
    return pd.DataFrame(rows)


def test_stability_names_contradictions_changes_and_kendall_tau():
    first = matrix_rows(
        {
            ("a", 1): (1.5, 1.4, 1.6),
            ("a", 4): (0.8, 0.7, 0.9),
            ("b", 1): (1.02, 0.95, 1.1),
            ("b", 4): (2.0, 1.9, 2.1),
        }
    )
    same = matrix_rows(
        {
            ("a", 1): (1.45, 1.3, 1.6),
            ("a", 4): (0.82, 0.7, 0.95),
            ("b", 1): (1.08, 1.01, 1.15),  # a win against a tie is not a contradiction
            ("b", 4): (2.1, 1.9, 2.3),
        }
    )
    table = trust.stability_table(same, first)
    summary = trust.stability_summary(table)
    assert summary["comparisons"] == 4 and summary["contradictions"] == 0
    assert summary["within_10pct"] == 4 and summary["kendall_tau"] == pytest.approx(1.0)
    assert summary["stable"]
    flipped = matrix_rows(
        {
            ("a", 1): (0.8, 0.7, 0.9),  # torch now wins where jax did
            ("a", 4): (0.8, 0.7, 0.9),
            ("b", 1): (1.02, 0.95, 1.1),
            ("b", 4): (2.0, 1.9, 2.1),
        }
    )
    summary = trust.stability_summary(trust.stability_table(flipped, first))
    assert summary["contradictions"] == 1 and summary["within_10pct"] == 3
    assert not summary["stable"]


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
        return runner.CellResult("ok", None, 1.0, contention=contention, reruns=list(reruns or []))

    monkeypatch.setattr(runner, "execute_cell", fake_execute)
    cell = Cell("standin", tmp_path / "standin.py", "x=1__trial=1", {}, trial=1, interleaved=True)
    result = runner.run_trial(cell, tmp_path, {}, None, rerun_shared=2)
    # three attempts: the first two shared and discarded, the third kept though still shared
    assert len(calls) == 3 and [len(c) for c in calls] == [0, 1, 2]
    assert [r["contention"]["other_cpu_frac"] for r in result.reruns] == [0.4, 0.3]
    assert result.contention["other_cpu_frac"] == 0.2
    # a cell outside the rounds is never re-run
    readings = iter([0.4])
    calls.clear()
    single = Cell("standin", tmp_path / "standin.py", "x=1", {}, trial=0, interleaved=False)
    assert runner.run_trial(single, tmp_path, {}, None, rerun_shared=2).reruns == []
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
    assert best.loc[1].ratio == pytest.approx(2.0, rel=0.05) and best.loc[1].winner == "jax"
    assert best.loc[2].ratio == pytest.approx(0.5, rel=0.05) and best.loc[2].winner == "torch"
    one = matrix[(matrix.threads == 1) & (matrix.comparison == "best")].iloc[0]
    assert "at batch 4 in fp32 with 1 thread on Test CPU" in sentences.ratio_sentence(one)
