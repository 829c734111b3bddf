"""The memory family's verdicts on their unit of replication, the trial, with known answers: the
time model's error over trials, the three-way activation goal at its +33% threshold, and the
saving that sits on Adam's floor."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from fwbench.families.memory import memory_breakdown, memory_curve, memory_curve_words, memory_index
from tests.test_memory_seed import _curve_meas, _record, _timed_meas

# memory_timecheck's BERT-base batch 4 at budget 0.4 (run 20261127T194716Z): the three trials'
# own errors, each the median of its 30 rounds against that trial's prediction
TIMECHECK_ERRORS = [-5.94557, 1.64185, -0.40859]


def _rounds_for(errors, predicted=1.0):
    """Per trial, three rounds of a plan against a graph at 100 ms whose median puts the time
    model ``errors[t]`` percent off its prediction."""
    return {
        trial: [100.0 * predicted / (1 + e / 100)] * 3 for trial, e in enumerate(errors, start=1)
    }


def test_the_time_error_interval_is_over_trials_not_rounds():
    mean, low, high = memory_curve.mean_interval(TIMECHECK_ERRORS)
    # t(0.975, 2 df) = 4.303 on the standard error of three values
    assert (mean, low, high) == pytest.approx((-1.571, -11.32, 8.18), abs=0.01)

    meas = _timed_meas(1.0, _rounds_for(TIMECHECK_ERRORS))
    # trial 3 ran on a shared machine in _timed_meas; mark every trial quiet
    meas["shared_machine"] = False
    table = memory_curve.curve_table(meas)
    row = table.set_index("method").loc["mu_two@0.5"]
    assert json.loads(row.time_trial_errors_pct) == pytest.approx(TIMECHECK_ERRORS, abs=1e-4)
    assert row.time_error_trials == 3
    assert (row.time_error_low_pct, row.time_error_high_pct) == pytest.approx(
        (-11.32, 8.18), abs=0.01
    )
    assert memory_curve_words.time_bar(row) == "undecided"
    text = " ".join(memory_curve_words.sentences(table))
    assert "-1.6% [-11.3%, +8.2%] at mu_two@0.5 over 3 trials (-5.9%, +1.6%, -0.4%)" in text
    assert "each within 5%: not shown" in text
    # pooling the nine rounds as independent would have put a zero-width interval inside ±5%
    assert "each within 5%: yes" not in text


def test_the_time_bar_is_met_or_missed_only_by_the_whole_interval():
    inside = _timed_meas(1.0, _rounds_for([1.0, 2.0, 1.5])).assign(shared_machine=False)
    beyond = _timed_meas(1.0, _rounds_for([7.0, 8.0, 7.5])).assign(shared_machine=False)
    for meas, bar, verdict in ((inside, "inside", "yes"), (beyond, "beyond", "no")):
        table = memory_curve.curve_table(meas)
        row = table.set_index("method").loc["mu_two@0.5"]
        assert memory_curve_words.time_bar(row) == bar
        assert memory_curve_words.simulator_bars(table)["time_within"] == verdict


def test_one_trial_gives_no_interval_and_no_verdict_however_far_off():
    # a single quiet trial 20% off the prediction: one reading, no spread, no interval
    meas = _timed_meas(1.0, _rounds_for([20.0]))
    table = memory_curve.curve_table(meas)
    row = table.set_index("method").loc["mu_two@0.5"]
    assert row.time_error_trials == 1 and np.isnan(row.time_error_low_pct)
    bars = memory_curve_words.simulator_bars(table)
    assert bars["time_within"] == "not shown"
    assert "1 of 1 graphs have one quiet trial: no interval" in bars["time_words"]
    index = memory_index.cell_rows(table, "one", "run")[0]
    assert index["time_worst"] == "20.0% in its one trial: no interval"


def _arm(times) -> str:
    trials = list(range(1, len(times) + 1))
    return json.dumps({"trials": trials, "samples": list(times), "shared": [False] * len(times)})


def _goal_rows(*points):
    """One cell's curve rows: the plain step (``none``, 100 ms in each of 3 trials) and per
    point its kind, method, activation saved and overhead interval over trials (low, high), its
    3 trials' times placed so that their 95% t-interval is that one, or no interval (None: one
    trial)."""
    rows = [{"kind": "none", "method": "none", "measured": True, "activation_saved_pct": 0.0,
             "overhead_pct": np.nan, "overhead_low": np.nan, "overhead_high": np.nan,
             "on_floor": False, "trial_times_ms": _arm([100.0, 100.0, 100.0])}]  # fmt: skip
    for kind, method, saved, interval in points:
        low, high = interval if interval else (np.nan, np.nan)
        point = (low + high) / 2 if interval else 20.0
        times = [100.0 * (1 + point / 100)]
        if interval:
            lo, hi = np.log1p(low / 100), np.log1p(high / 100)
            spread = (hi - lo) / 2 / (scipy_stats.t.ppf(0.975, 2) / np.sqrt(3))
            times = list(100.0 * np.exp((lo + hi) / 2 + spread * np.array([-1.0, 0.0, 1.0])))
        rows.append(
            {
                "kind": kind,
                "method": method,
                "measured": True,
                "activation_saved_pct": saved,
                "overhead_pct": point,
                "overhead_low": low,
                "overhead_high": high,
                "on_floor": False,
                "trial_times_ms": _arm(times),
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("saved", "interval", "verdict"),
    [
        # memory_seq512's mu_two@0.3: the point +28.3% lies within, the interval does not
        (70.0, (23.6, 33.3), "undecided"),
        # its checkpoint_sqrt_n: the point +35.5% lies beyond, the interval does not
        (80.0, (32.3, 38.8), "undecided"),
        (60.4, (15.9, 27.5), "meets"),
        (60.0, (20.0, 33.0), "meets"),  # the bound at the goal itself counts as within
        (90.0, (33.1, 40.0), "misses"),
        (49.9, (0.0, 10.0), "misses"),  # the bytes decide alone: they have no spread
        (70.0, None, "undecided"),  # one trial
    ],
)
def test_the_activation_goal_is_decided_by_the_overhead_interval(saved, interval, verdict):
    row = _goal_rows(("mu_two", "mu_two@0.3", saved, interval)).iloc[-1]
    assert memory_curve.goal_verdict(row) == verdict


def test_each_kind_takes_its_best_decided_point_and_says_what_is_left_open():
    group = _goal_rows(
        ("mu_two", "mu_two@0.3", 70.0, (23.6, 33.3)),
        ("mu_two", "mu_two@0.4", 60.4, (15.9, 27.5)),
        ("checkpoint", "checkpoint_every_1", 90.0, (40.0, 50.0)),
        ("checkpoint", "checkpoint_sqrt_n", 80.0, (32.3, 38.8)),
    )
    points = memory_curve.goal_points(group)
    assert (points["mu_two"][0].method, points["mu_two"][1]) == ("mu_two@0.4", "meets")
    assert (points["checkpoint"][0].method, points["checkpoint"][1]) == (
        "checkpoint_sqrt_n",
        "undecided",
    )
    assert memory_curve_words._saves_more_undecided(group, points["mu_two"][0]) == (
        "; mu_two@0.3 saves more, 70.0%, at +28.4% [+23.6%, +33.3%] time: undecided"
    )
    # every point shown beyond the goal: no point is within
    beyond = _goal_rows(("checkpoint", "checkpoint_every_1", 90.0, (40.0, 50.0)))
    assert memory_curve.goal_points(beyond)["checkpoint"] == (None, memory_curve.NONE_WITHIN)
    # a point that saves too little misses, but only if its time is not shown beyond
    little = _goal_rows(
        ("mu_two", "mu_two@0.7", 30.0, (0.0, 10.0)),
        ("mu_two", "mu_two@0.5", 45.0, (35.0, 40.0)),
    )
    best, verdict = memory_curve.goal_points(little)["mu_two"]
    assert (best.method, verdict) == ("mu_two@0.7", "misses")


def _floor_meas(with_parts: bool, plan_activations: float = 0.0):
    """_curve_meas with the peaks of a cell on Adam's floor: our plan at 0.5 and checkpointing
    every block both end at 500 MiB; with parts, the plans' simulated activations at their
    peaks (the plan at 0.5's ``plan_activations`` MiB, the plan at 0.1's none)."""
    meas = _curve_meas()
    peaks = {"mu_two@0.5": 500, "mu_two@0.1": 500, "checkpoint_every_1": 500}
    hit = meas.metric.eq("peak_mem_bytes") & meas["mode"].isin(peaks)
    meas.loc[hit, "value"] = [peaks[m] * 2**20 for m in meas.loc[hit, "mode"]]
    saved = meas.metric.eq("activation_saved_pct") & meas["mode"].isin(peaks)
    meas.loc[saved, "value"] = 100.0
    if not with_parts:
        return meas
    rows = []
    for trial in (1, 2, 3):
        for mode, budget, acts in (("mu_two@0.5", 0.5, plan_activations), ("mu_two@0.1", 0.1, 0)):
            extra = {"method": "mu_two", "budget": budget, "part": "activations"}
            rows.append(_record(mode, trial, "peak_part_bytes", acts * 2**20, extra))
    return pd.concat([meas, pd.DataFrame(rows)], ignore_index=True)


def test_a_saving_on_adams_floor_is_labelled_as_such():
    table = memory_curve.curve_table(_floor_meas(with_parts=True))
    floor = table.set_index("method")
    assert floor.loc["mu_two@0.5", "on_floor"] and floor.loc["checkpoint_every_1", "on_floor"]
    assert not floor.loc["checkpoint_every_4", "on_floor"] and not floor.loc["none", "on_floor"]
    assert floor.loc["none", "optimizer_floor_bytes"] == 500 * 2**20
    text = " ".join(memory_curve_words.sentences(table))
    assert (
        "(mu_two@0.5; meets the 50% goal (Holm-adjusted p 0 across its 2 points); its budget "
        "sets the saving, so only the time is tested; on Adam's floor: every method that reaches "
        "it saves the same)" in text
    )
    assert (
        "checkpoint_every_1, mu_two@0.1, mu_two@0.5 end on Adam's floor, a peak of 500 MiB in "
        "the optimizer update" in text
    )
    assert "no method can save more than the floor's 100.0% of the activation memory" in text
    index = memory_index.cell_rows(table, "floor", "run")[0]
    assert index["ours"].endswith("(mu_two@0.5; meets, Holm p 0 of 2; on Adam's floor)")


def test_the_floor_needs_an_empty_peak_or_two_methods_at_one_lowest_peak():
    # runs before the peak parts: two methods with different activations at one lowest peak
    table = memory_curve.curve_table(_floor_meas(with_parts=False))
    assert table.on_floor.any()
    # with parts, they decide: activations alive at every plan's peak means no floor, however
    # the peaks coincide
    meas = _floor_meas(with_parts=True, plan_activations=40.0)
    hit = meas.metric.eq("peak_part_bytes") & meas["mode"].eq("mu_two@0.1")
    meas.loc[hit, "value"] = 40.0 * 2**20
    table = memory_curve.curve_table(meas)
    assert not table.on_floor.any()
    text = " ".join(memory_curve_words.sentences(table))
    assert "Adam's floor" not in text
    # one method alone at the lowest peak, without parts, shows nothing
    assert not memory_curve.curve_table(_curve_meas()).on_floor.any()


def test_the_breakdown_labels_a_tightest_plan_without_activations_at_its_peak():
    rows = []
    for mode, budget, acts in (("graph", None, 500.0), ("mu_two@0.3", 0.3, 0.0)):
        kind = "graph" if budget is None else "mu_two"
        extra = {"method": kind} | ({"budget": budget} if budget else {})
        parts = {"params": 400, "gradients": 400, "optimizer state": 800, "activations": acts}
        for part, mib in (parts | {"other": 50}).items():
            record = _record(mode, 1, "peak_part_bytes", mib * 2**20, extra | {"part": part})
            rows.append(record | {"model": "bert", "batch_size": 4})
    table = memory_breakdown.breakdown_table(pd.DataFrame(rows))
    text = " ".join(memory_breakdown.breakdown_sentences(table))
    assert (
        "the tightest μ-TWO plan (mu_two@0.3) peaks at 1,650 MiB, 0 MiB of it activations (on Adam's "
        "floor: the peak is the optimizer update's)" in text
    )
