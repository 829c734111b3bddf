"""The cross-framework memory sentence: each framework's plan that saves the most with its time
shown within the goal, chosen with Holm's adjustment across the plans it chose among."""

import json

import numpy as np
import pandas as pd

from fwbench.families.memory import memory_curve, memory_frameworks

# five trials' log time ratios around a mean, with a standard deviation of 0.05
SPREAD = np.array([-1.0, -0.5, 0.0, 0.5, 1.0]) / np.std([-1.0, -0.5, 0.0, 0.5, 1.0], ddof=1)


def _row(method: str, saved: float, mean_log: float | None) -> dict:
    trials = [1, 2, 3, 4, 5]
    times = 100.0 * np.exp(mean_log + 0.05 * SPREAD) if mean_log is not None else [100.0] * 5
    arm = {"trials": trials, "samples": [float(t) for t in times], "shared": [False] * 5}
    return {"model": "resnet152", "batch_size": 4, "framework": "JAX", "method": method,
            "kind": method.rsplit("_", 1)[0] if method != "jax_none" else method,
            "memory_saved_pct": saved, "overhead_pct": 100 * np.expm1(mean_log or 0.0),
            "overhead_low": 0.0, "overhead_high": 0.0, "trials": 5,
            "trial_times_ms": json.dumps(arm)}  # fmt: skip


def test_the_best_plan_within_the_goal_is_chosen_after_holm_across_the_plans():
    group = pd.DataFrame([
        _row("jax_none", 0.0, None),
        _row("jax_remat_every_2", 30.0, 0.05),  # p about 0.0002: within, after any adjustment
        _row("jax_remat_every_1", 60.0, 0.2136),  # p about 0.015: within alone, not after Holm
        _row("jax_policy_nothing_saveable", 70.0, 0.5),  # clearly beyond +33%
    ])  # fmt: skip
    raw = {
        r.method: memory_curve.within_goal_p(memory_curve.log_time_ratios(r, group.iloc[0]))
        for r in group.iloc[1:].itertuples()
    }
    alpha = memory_curve.ALPHA
    assert raw["jax_remat_every_1"] < alpha < 2 * raw["jax_remat_every_1"]
    assert raw["jax_policy_nothing_saveable"] > alpha
    # without the adjustment the largest saving within would be every_1; with it, every_2
    found = memory_frameworks.best_within(group, "JAX")
    assert found["plans"] == 3
    assert found["row"].method == "jax_remat_every_2"
    assert np.isclose(found["p_holm"], raw["jax_remat_every_2"] * 3)
    # no plan within: the sentence's words say so
    beyond = group[group.method.isin(["jax_none", "jax_policy_nothing_saveable"])]
    nothing = memory_frameworks.best_within(beyond, "JAX")
    assert nothing["row"] is None
    assert "none of its 1 plans" in memory_frameworks._plan_words(nothing, "JAX")

    # a plan that saves next to nothing is no saving, and one that adds memory is named
    found["row"] = found["row"].copy()
    found["row"]["memory_saved_pct"] = 0.1
    assert "lowers the peak by 1% or more" in memory_frameworks._plan_words(found, "JAX")
    grown = pd.DataFrame([
        _row("jax_none", 0.0, None) | {"peak_MB": 100.0, "iter_time_ms": 100.0},
        _row("jax_policy_dots_saveable", -20.0, 0.01) | {"peak_MB": 120.0, "iter_time_ms": 101.0},
    ])  # fmt: skip
    torch_plain = grown.iloc[[0]].assign(framework="PyTorch", method="none", kind="none")
    said = memory_frameworks.sentences(pd.concat([torch_plain, grown], ignore_index=True))
    assert said[-1] == (
        "ResNet-152 at batch 4: JAX's jax_policy_dots_saveable raises the peak by 20.0%."
    )


def _point(method: str, saved: float, mean_log: float | None) -> dict:
    """A curve row of the μ-TWO study (PyTorch, against ``none``) with its interval over the five
    trials, as ``curve_table`` gives it."""
    row = _row(method, saved, mean_log)
    logs = (mean_log or 0.0) + 0.05 * SPREAD
    half = 2.776 * logs.std(ddof=1) / np.sqrt(len(logs))  # t(0.975, 4)
    kind = "none" if method == "none" else method.split("@")[0]
    return row | {
        "kind": kind, "measured": True, "activation_saved_pct": saved,
        "overhead_low": 100 * np.expm1(logs.mean() - half),
        "overhead_high": 100 * np.expm1(logs.mean() + half),
    }  # fmt: skip


def test_the_activation_goal_is_met_only_after_holm_across_the_budgets_chosen_among():
    # mu_two@0.5 saves enough and its own interval lies within +33% (one-sided p about 0.02),
    # but it was chosen among three budgets: after Holm its p is about 0.06, so the goal stays
    # undecided; read alone (the verdict before the adjustment) it met the goal
    group = pd.DataFrame([
        _point("none", 0.0, None),
        _point("mu_two@0.3", 70.0, 0.5),
        _point("mu_two@0.5", 50.2, 0.2181),
        _point("mu_two@0.7", 30.0, 0.4),
    ])  # fmt: skip
    alone = group[group.method == "mu_two@0.5"].iloc[0]
    assert memory_curve.goal_verdict(alone) == "meets"
    best, verdict = memory_curve.goal_points(group, ("mu_two",))["mu_two"]
    assert (best.method, verdict) == ("mu_two@0.5", "undecided")
    assert 0.05 < best.p_holm < 0.07 and best.points == 3
    # the same point alone among its kind: nothing to adjust for, and it meets
    one = group[group.method.isin(["none", "mu_two@0.5"])]
    best, verdict = memory_curve.goal_points(one, ("mu_two",))["mu_two"]
    assert (best.method, verdict) == ("mu_two@0.5", "meets")


def test_planners_given_the_same_budget_are_put_side_by_side():
    def plan(method, kind, framework, budget, saved, overhead):
        return {
            "model": "bert",
            "batch_size": 8,
            "framework": framework,
            "method": method,
            "kind": kind,
            "budget": budget,
            "memory_saved_pct": saved,
            "overhead_pct": overhead,
            "overhead_low": overhead - 2,
            "overhead_high": overhead + 2,
        }

    table = pd.DataFrame([
        plan("mu_two@0.5", "mu_two", "PyTorch", 0.5, 48.0, 12.0),
        plan("compile_budget_0.5", "compile_budget", "PyTorch", 0.5, 30.0, -20.0),
        plan("compiled_graph", "compiled_graph", "PyTorch", None, 0.0, -25.0),
        plan("jax_budget@0.5", "jax_budget", "JAX", 0.5, 0.2, 1.0),
        plan("mu_two@0.3", "mu_two", "PyTorch", 0.3, 66.0, 20.0),  # no other planner at 0.3
    ])  # fmt: skip
    (said,) = memory_frameworks.budget_sentences(table)
    assert said.startswith("BERT (masked LM) at batch 8, budget 0.5: fwbench's μ-TWO plan saves")
    mu, torch_budget, jax_budget = said.split(" (each against")[0].split("; ")
    assert "48.0% of the peak at +12.0% [+10.0, +14.0]" in mu
    assert "-20.0% [-22.0, -18.0] step time (compiled without a budget: -25.0%)" in torch_budget
    assert "JAX's budget policy saves 0.2%" in jax_budget
    assert memory_frameworks.budget_sentences(table[table.budget != 0.5]) == []
    empty = memory_frameworks.frameworks_table(pd.DataFrame())  # no cell ran JAX's planners
    assert memory_frameworks.budget_sentences(empty) == []
