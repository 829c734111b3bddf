"""The regression detector scored with run-level noise: the run effect in the synthetic histories,
the between-run SD estimated from a campaign's history, and the runs per point that reach the
goals where trials cannot."""

import numpy as np
import pandas as pd
import pytest

from fwbench.report import regressions, sentences, trust
from tests.test_regressions import MEASURED

# The pool's own shape (a tight core and a few slow calls) as log deviations from its median:
# trial noise with the heavy tail of real timings, which a normal-theory shortcut gets wrong.
SHAPE = np.log(MEASURED / np.median(MEASURED))


def history_frame(
    run_sd, *, configurations=40, runs=6, trials=8, seed=0, metric="throughput_img_s"
):
    """``load_histories``' frame for a campaign whose runs each shift by exp(N(0, run_sd)) and
    whose trials scatter around their run with the pool's shape, doubled."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(configurations):
        for r in range(runs):
            logs = 4.0 + rng.normal(0.0, run_sd) + 2.0 * rng.choice(SHAPE, size=trials)
            rows.append(
                {
                    "campaign": "demo",
                    "metric": metric,
                    "family": "inference",
                    "model": f"model{c}",
                    "framework": "torch",
                    "mode": "eager",
                    "device_name": "Test CPU",
                    "precision": "fp32",
                    "threads": 2,
                    "batch_size": 1,
                    "run_id": f"run{r}",
                    "value": float(np.exp(np.median(logs))),
                    "unit": "img/s",
                    "n_values": trials,
                    "log_mean": float(logs.mean()),
                    "log_var": float(logs.var(ddof=1)),
                    "run_order": f"run{r}",
                }
            )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the histories


def test_a_run_effect_shifts_each_point_by_a_draw_of_the_set_sd():
    # the run effect is drawn after the trials, so with one seed the two histories differ by it
    # alone: their log ratio is the run effects themselves
    quiet = regressions.synthetic_history(MEASURED, 5, 0.0, np.random.default_rng(2), points=4000)
    noisy = regressions.synthetic_history(
        MEASURED, 5, 0.0, np.random.default_rng(2), points=4000, run_sd=0.05
    )
    effects = np.log(noisy / quiet)
    assert effects.std() == pytest.approx(0.05, abs=0.002)
    assert abs(effects.mean()) < 0.003
    # the trial noise of a median stays what it was; the run's adds to it
    added = np.log(noisy).var() - np.log(quiet).var()
    assert added == pytest.approx(0.05**2, rel=0.15)


def test_a_point_of_several_runs_divides_both_levels_of_noise():
    one = regressions.synthetic_history(
        MEASURED, 5, 0.0, np.random.default_rng(3), points=4000, run_sd=0.035
    )
    four = regressions.synthetic_history(
        MEASURED, 5, 0.0, np.random.default_rng(4), points=4000, run_sd=0.035, runs_per_point=4
    )
    assert np.log(four).var() == pytest.approx(np.log(one).var() / 4, rel=0.15)
    slowed = regressions.synthetic_history(
        MEASURED, 5, 0.2, np.random.default_rng(4), points=4000, run_sd=0.035, runs_per_point=4
    )
    assert slowed[:5] == pytest.approx(four[:5])
    assert slowed[5:] == pytest.approx(1.2 * four[5:])


# --------------------------------------------------------------------------- the evaluation


def test_run_noise_raises_the_false_alerts_the_detector_is_scored_with():
    """Fails if the evaluation drops the run effect: same seed, same trials, more alerts."""
    methods = {"changepoint": regressions.alerts_changepoint}
    options = {"trials": 5, "series": 100, "seed": 0, "methods": methods}
    without = regressions.evaluate(MEASURED, **options).iloc[0]
    with_runs = regressions.evaluate(MEASURED, run_sd=0.035, **options).iloc[0]
    assert (without.run_sd, with_runs.run_sd) == (0.0, 0.035)
    assert with_runs.false_per_100 >= without.false_per_100 + 5
    assert with_runs["recall_0.1"] < without["recall_0.1"]


def test_runs_per_point_reach_the_goals_that_trials_cannot_beat_run_noise_to():
    options = {"series": 100, "seed": 0, "run_sd": 0.035, "versus_baselines": False}
    trials, by_trials = regressions.trials_needed(MEASURED, (30,), **options)
    assert trials is None
    cp = by_trials.set_index("method").loc["changepoint"]
    assert cp.false_per_100 > regressions.GOAL_FALSE_PER_100
    runs, by_runs = regressions.runs_needed(MEASURED, (2, 6), trials=5, **options)
    assert runs == 6
    assert by_runs.runs_per_point.tolist() == [2, 2, 2, 6, 6, 6]
    cp = by_runs[by_runs.method == "changepoint"].set_index("runs_per_point")
    assert cp.loc[2].false_per_100 > regressions.GOAL_FALSE_PER_100
    assert cp.loc[6].false_per_100 <= regressions.GOAL_FALSE_PER_100
    assert cp.loc[6]["recall_0.1"] >= regressions.GOAL_RECALL_10PCT


def test_the_trust_evaluation_scores_with_the_history_run_sd_and_says_where_it_came_from(
    monkeypatch,
):
    monkeypatch.setattr(trust, "EVAL_SERIES", 60)
    monkeypatch.setattr(trust, "TRIAL_CANDIDATES", (5, 10))
    monkeypatch.setattr(trust, "RUN_CANDIDATES", (4,))
    histories = history_frame(0.05, configurations=12)
    noise = regressions.run_noise(histories)
    scores, needed = trust.regression_scores(MEASURED, histories)
    assert (
        scores.scenario.tolist()
        == ["current"] * 3 + ["more_trials"] * 3 + ["more_runs"] * 3 + ["no_run_noise"] * 3
    )
    current = scores.iloc[0]
    assert (current.method, current.trials, current.runs_per_point) == ("changepoint", 5, 1)
    assert current.run_sd == noise.sd and current.run_sd_runs == 6
    assert current.run_sd_source.startswith("estimated from 6 runs (12 configurations")
    reference = scores[(scores.scenario == "no_run_noise") & (scores.method == "changepoint")]
    assert reference.run_sd.iloc[0] == 0.0
    assert current.false_per_100 > reference.false_per_100.iloc[0]
    assert needed is None
    needs = trust.regression_needs(scores)
    assert needs["run_sd"] == noise.sd and needs["run_sd_runs"] == 6
    assert needs["trials_needed"] is None and needs["runs_needed"] == 4
    # the sentence says where the run SD came from: here, the history's six runs
    said = sentences.regression_evaluation_sentence(scores, needed)
    assert f"SD {noise.sd:.3f} on the log scale (estimated from the campaign's 6 runs)" in said
    assert "a default" not in said


def test_without_a_history_the_evaluation_uses_the_default_and_says_so(monkeypatch):
    monkeypatch.setattr(trust, "EVAL_SERIES", 20)
    monkeypatch.setattr(trust, "TRIAL_CANDIDATES", (5,))
    monkeypatch.setattr(trust, "RUN_CANDIDATES", ())
    scores, _needed = trust.regression_scores(MEASURED)
    current = scores.iloc[0]
    assert current.run_sd == regressions.DEFAULT_RUN_SD
    assert current.run_sd_source == "default (no run history)"
    assert "(a default, since" in sentences.regression_evaluation_sentence(scores, _needed)
    assert trust.regression_needs(pd.DataFrame())["run_sd"] is None


# --------------------------------------------------------------------------- the run SD


@pytest.mark.parametrize("run_sd", [0.02, 0.035])
def test_the_run_sd_estimate_recovers_a_set_sd_under_heavy_tailed_trials(run_sd):
    noise = regressions.run_noise(history_frame(run_sd))
    assert noise.sd == pytest.approx(run_sd, abs=0.008)
    assert (noise.source, noise.runs, noise.configurations) == ("estimated", 6, 40)


def test_trial_noise_alone_is_not_taken_for_run_noise():
    histories = history_frame(0.0)
    assert regressions.run_noise(histories).sd < 0.01
    # the points scatter far more than that: what the trials explain is taken out
    points = np.log(histories.value).groupby(histories.model).std().mean()
    assert points > 0.02


def test_fewer_than_three_runs_or_no_trials_fall_back_to_the_default():
    two = history_frame(0.05, runs=2)
    noise = regressions.run_noise(two)
    assert (noise.sd, noise.source) == (regressions.DEFAULT_RUN_SD, "default")
    assert "fewer than 3 runs" in noise.describe() and "has 2 such runs" in noise.describe()
    single = history_frame(0.05).assign(n_values=1, log_var=np.nan)
    assert regressions.run_noise(single).source == "default"
    bare = history_frame(0.05).drop(columns=["n_values", "log_mean", "log_var"])
    assert "no within-run spread" in regressions.run_noise(bare).describe()
    assert regressions.run_noise(None).describe() == "default (no run history)"
    # another metric's history says nothing about this one's
    other = history_frame(0.05, metric="latency_p50_ms")
    assert regressions.run_noise(other).source == "default"
