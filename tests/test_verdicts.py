"""The verdict estimator with known answers: synthetic rounds with set run, run × comparison and
round variances, at the headline's design (12 comparisons, 3 runs × 6 rounds)."""

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from fwbench.measure import verdict_checks, verdicts
from fwbench.measure.verdict_checks import Design

HEADLINE = Design(
    comparisons=12, runs=3, rounds=6, run_sd=0.02, run_comparison_sd=0.028, round_sd=0.05
)


def test_the_closed_form_components_are_remls_on_a_balanced_design():
    rng = np.random.default_rng(0)
    design = Design(6, 5, 8, 0.05, 0.04, 0.05)
    frame = verdict_checks.simulate_rounds(design, rng, rng.uniform(-0.2, 0.2, 6))
    fitted = verdicts.fit(frame)
    data = frame.assign(c=frame.comparison.astype(str), r=frame.run.astype(str), one=1)
    data["rc"] = data.r + ":" + data.c
    model = smf.mixedlm(
        "y ~ 0 + C(c)", data, groups="one", vc_formula={"r": "0 + C(r)", "rc": "0 + C(rc)"}
    ).fit(reml=True)
    vc = dict(zip(model.model.exog_vc.names, model.vcomp, strict=True))
    assert fitted.run_var == pytest.approx(vc["r"], rel=0.02, abs=1e-5)
    assert fitted.run_comparison_var == pytest.approx(vc["rc"], rel=0.02, abs=1e-5)
    pooled_round = np.mean(list(fitted.round_var.values()))
    assert pooled_round == pytest.approx(model.scale, rel=0.02)


def test_the_interval_covers_the_true_ratio_and_fails_without_the_between_run_term():
    covered = verdict_checks.coverage(HEADLINE, simulations=250, seed=1)
    assert covered >= 0.93
    # pooling every round as independent: the pseudo-replication the estimator rules out
    assert verdict_checks.coverage(HEADLINE, simulations=100, seed=1, between_term=False) < 0.88


def test_duplicate_arms_call_few_false_winners_and_many_without_the_between_run_term():
    assert verdict_checks.aa_rate(HEADLINE, simulations=250, seed=2) <= 0.05
    assert verdict_checks.aa_rate(HEADLINE, simulations=100, seed=2, between_term=False) > 0.10


def test_a_single_run_imports_a_wider_between_run_term_or_calls_no_winner():
    rng = np.random.default_rng(3)
    frame = verdict_checks.simulate_rounds(HEADLINE, rng, np.full(12, 0.3), runs=1)
    alone = verdicts.estimate(frame)
    assert {e.between for e in alone} == {"none"}
    assert {v.verdict for v in verdicts.decide(alone)} == {verdicts.WITHIN_ONE_RUN}
    lent = verdicts.Between(0.035**2, 10.0, "fitted", 4).upper()
    assert lent.var > 0.035**2 and lent.source == "imported"
    found = verdicts.estimate(frame, verdicts.fit(frame, imported=lent))
    assert all(e.between == "imported" and e.design == "1 run × 6 rounds" for e in found)
    assert all(v.verdict == verdicts.FASTER_B for v in verdicts.decide(found))  # 1.35×


def test_three_verdicts_with_holm_and_a_tost():
    rng = np.random.default_rng(4)
    design = Design(3, 4, 8, 0.005, 0.005, 0.02)
    frame = verdict_checks.simulate_rounds(design, rng, [math.log(1.3), 0.0, math.log(1.04)])
    found = verdicts.estimate(frame)
    words = [v.verdict for v in verdicts.decide(found)]
    assert words[0] == verdicts.FASTER_B and words[1] == verdicts.EQUIVALENT
    noisy = verdict_checks.simulate_rounds(Design(2, 3, 4, 0.05, 0.05, 0.1), rng, [0.03, -0.03])
    decided = verdicts.decide(verdicts.estimate(noisy))
    assert all(v.verdict == verdicts.INCONCLUSIVE and v.more_runs > 3 for v in decided)


def test_the_calibration_check_passes_a_stable_machine_and_fails_a_ten_percent_shift():
    design = Design(12, 3, 6, 0.02, 0.028, 0.05)
    allowed = verdict_checks.outside_allowance(design, simulations=120, seed=5)
    stable = verdict_checks.calibration_pass_rate(design, 100, seed=6, allowed_outside=allowed)
    shifted = verdict_checks.calibration_pass_rate(
        design, 60, seed=7, shift=math.log(1.1), allowed_outside=allowed
    )
    assert stable >= 0.93 and shifted <= 0.5


def test_rounds_need_their_columns():
    with pytest.raises(ValueError, match="rounds need columns"):
        verdicts.fit(pd.DataFrame({"run": [0], "y": [0.1]}))


def test_an_undecided_verdict_asks_for_more_runs_than_it_has():
    """The normal-quantile count ignores Holm and the t's few degrees of freedom; left alone it
    said "about 1 runs would decide it" of a ratio measured in 2."""
    from fwbench.measure import verdicts

    nan = float("nan")
    e = verdicts.Estimate("c", 0.86, 0.03, 1.0, nan, nan, nan, nan, 2, 6.0, "fitted", 0.2, "")
    assert verdicts._runs_to_decide(e) == 3.0
    wide = verdicts.Estimate("c", 0.86, 0.3, 1.0, nan, nan, nan, nan, 2, 6.0, "fitted", 0.2, "")
    assert verdicts._runs_to_decide(wide) > 3.0


def test_a_between_run_term_on_almost_no_degrees_of_freedom_gives_an_unbounded_interval():
    # what the headline's A/A control met at 3 runs: a between-run term fitted as a small
    # difference of mean squares (df 0.04), lent to a run whose own rounds barely vary
    rounds = [0.0, 0.001, -0.001, 0.0005, -0.0005, 0.0]
    frame = pd.DataFrame(
        {"comparison": "aa", "run": "r1", "round": range(len(rounds)), "y": rounds}
    )
    lent = verdicts.Between(1.3e-4, 0.038, "fitted", 3)
    (found,) = verdicts.estimate(frame, verdicts.fit(frame, imported=lent))
    assert found.df < 1 and found.low == 0.0 and found.high == math.inf
    assert found.ratio == pytest.approx(1.0)
    (verdict,) = verdicts.decide([found])
    assert verdict.verdict == verdicts.INCONCLUSIVE


def test_holm_is_statsmodels_holm():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 12, 40):
        p = rng.uniform(0, 0.2, n) ** 2
        want = multipletests(p, alpha=0.05, method="holm")[1]
        np.testing.assert_allclose(verdicts.holm_adjusted(p), want, rtol=0, atol=1e-15)


def test_the_design_names_runs_and_rounds_in_the_singular_where_there_is_one():
    design_label = verdicts.design_label
    assert design_label(1, 1) == "1 run × 1 round"
    assert design_label(4, 6) == "4 runs × 6 rounds"
    assert design_label(3, 2.5) == "3 runs × 2.5 rounds"
