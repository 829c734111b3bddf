"""A goal's verdict on one figure: within its bound, and better than what a user gets without
the predictor (its baseline, on the same rows) where there is one.

The prediction family states every goal this way (21_prediction's hold-outs, 22_recommend's
queries, the report's and the README's tables): a figure inside its bound that does no better
than the baseline does not meet its goal, since the rule without a model would have done as
well. One class says it, so every place says it alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Goal:
    value: float
    bound: float
    at_most: bool  # an error is held to at most its bound, a share to at least
    floor: float | None = None  # the baseline's figure on the same rows, if any

    # bool(): a numpy figure compares to numpy's bool, which `is False` would not recognise
    @property
    def within(self) -> bool:
        return bool(self.value <= self.bound if self.at_most else self.value >= self.bound)

    @property
    def beats(self) -> bool | None:
        """Whether the figure is better than the baseline's; None without a baseline."""
        if self.floor is None or math.isnan(self.floor):
            return None
        return bool(self.value < self.floor if self.at_most else self.value > self.floor)

    @property
    def met(self) -> bool:
        return self.within and self.beats is not False

    def words(self, baseline: str = "baseline") -> str:
        """ "met", "missed by 3.1 points", either with "; baseline 4.0%, beaten" (or "not
        beaten"), or "not met, no better than the baseline"; ``baseline`` names the rule."""
        if self.within and self.beats is False:
            return f"not met, no better than the {baseline}"
        said = "met" if self.within else f"missed by {abs(self.value - self.bound):.1f} points"
        if self.beats is not None:
            said += f"; {baseline} {self.floor:.1f}%, " + ("beaten" if self.beats else "not beaten")
        return said
