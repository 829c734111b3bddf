"""A goal is met only within its bound and ahead of its baseline (measure/goals.py), and every
place that states a prediction goal says so in the same words."""

import math

import pytest

from fwbench.measure.goals import Goal


@pytest.mark.parametrize(
    "goal, met, words",
    [
        (Goal(12.0, 15.0, True), True, "met"),
        (Goal(24.3, 10.0, True), False, "missed by 14.3 points"),
        (Goal(12.0, 15.0, True, 20.0), True, "met; baseline 20.0%, beaten"),
        (Goal(24.3, 10.0, True, 96.3), False, "missed by 14.3 points; baseline 96.3%, beaten"),
        # within the bound, but the rule without a model did as well: not met
        (Goal(12.0, 15.0, True, 12.0), False, "not met, no better than the baseline"),
        # a share is held to at least its bound, and must beat the baseline's share
        (Goal(92.9, 90.0, False, 100.0), False, "not met, no better than the baseline"),
        (
            Goal(85.0, 90.0, False, 100.0),
            False,
            "missed by 5.0 points; baseline 100.0%, not beaten",
        ),
        (Goal(95.0, 90.0, False, math.nan), True, "met"),
    ],
)
def test_a_goal_is_met_within_its_bound_and_ahead_of_its_baseline(goal, met, words):
    assert goal.met is met
    assert goal.words() == words


def test_numpy_figures_read_as_plain_ones():
    # a table's figures are numpy floats; their comparisons must still say "not met"
    import numpy as np

    goal = Goal(np.float64(8.0), 10.0, True, np.float64(6.0))
    assert goal.beats is False and goal.met is False
    assert goal.words() == "not met, no better than the baseline"


def test_the_baseline_is_named_as_the_caller_names_it():
    said = Goal(80.0, 90.0, False, 85.0).words("constant rule (no model)")
    assert said == "missed by 10.0 points; constant rule (no model) 85.0%, not beaten"


def test_no_place_states_the_goal_rule_by_hand():
    # the rule lives in Goal alone: a second spelling of its verdict would drift from it
    from tests.conftest import REPO

    places = [REPO / "notebooks" / "21_prediction.py", REPO / "notebooks" / "22_recommend.py"]
    places += [REPO / "lib" / "fwbench" / "families" / "prediction" / "prediction_report.py"]
    for path in places:
        text = path.read_text()
        assert "not beaten" not in text and "no better than the" not in text, path
