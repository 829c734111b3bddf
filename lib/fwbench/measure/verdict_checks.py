"""Checks on the verdict estimator, and the simulations that show a correct machine passes them.

- **A/A** (``aa_false_winners``): duplicate arms (the same configuration as two cells) go through
  ``verdicts.estimate`` like any comparison; each 95% interval that excludes 1 is a false winner.
  Counted before Holm's adjustment, so the rate tests the interval itself.
- **Calibration** (``calibration_table``): runs 1..k give each comparison a 95% prediction interval
  for a new run's mean ratio; run k+1 must land inside for at least ``CALIBRATION_INSIDE`` of the
  comparisons, and no verdict decided on runs 1..k may turn to the other framework once run k+1 is
  pooled in. Simulated first, that rule fails a stable machine too often with few comparisons
  (at 12 comparisons, 3 runs × 6 rounds, it passes about 90% of stable machines: the run effect
  they share moves them in and out together), so the check allows as many comparisons outside as a
  stable machine with the fitted components leaves outside in 95% of simulations
  (``outside_allowance``), and states both.
- **The joint calibration test** (``joint_calibration``) replaces counting: the new run's mean
  log ratios less the estimates of runs 1..k, as one vector, against the covariance the fitted
  components predict for it (a run effect all comparisons share, plus each comparison's own
  run × comparison and round noise): ``T = d' S^-1 d``. Counting "at most one of 12 outside"
  passed a stable machine only 89-93% of the time and a run with every ratio 10% off still
  25-70% of the time (simulated at the headline's design); the quadratic form pools the
  evidence of every comparison. Its threshold is the 95% quantile of ``T`` over runs simulated
  from the fitted components at the same design (``null_threshold``), so a stable machine passes
  95% by construction; ``calibration_power`` reports how often it passes a stable machine and
  fails a uniform 10% shift and a 10% shift of one framework on half the comparisons.
- **Simulation** (``simulate_rounds`` and the ``*_rate`` functions): synthetic rounds with set run,
  run × comparison and round variances, at a stated design, through the same code; the tests and
  the campaign header quote what they give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fwbench.measure import verdicts

CALIBRATION_INSIDE = 0.90
A_A_GOAL = 0.05


@dataclass(frozen=True)
class Design:
    """What a campaign measures: comparisons × runs × rounds, and the true variance components
    (log scale) of the machine simulated."""

    comparisons: int
    runs: int
    rounds: int
    run_sd: float
    run_comparison_sd: float
    round_sd: float

    def label(self) -> str:
        return verdicts.design_label(self.runs, self.rounds)


def simulate_rounds(
    design: Design,
    rng: np.random.Generator,
    true_log_ratios=None,
    runs: int | None = None,
    shift: float = 0.0,
) -> pd.DataFrame:
    """Synthetic rounds (columns comparison, run, round, y) from the model the estimator fits.

    ``shift`` is added to every log ratio (a framework that became that much slower or faster in
    these runs), or one value per comparison."""
    runs = design.runs if runs is None else runs
    c = design.comparisons
    mu = np.zeros(c) if true_log_ratios is None else np.asarray(true_log_ratios, dtype=float)
    shift = np.asarray(shift, dtype=float)
    shift = shift[:, None, None] if shift.ndim == 1 else shift
    u = rng.normal(0.0, design.run_sd, size=runs)
    v = rng.normal(0.0, design.run_comparison_sd, size=(c, runs))
    e = rng.normal(0.0, design.round_sd, size=(c, runs, design.rounds))
    y = mu[:, None, None] + u[None, :, None] + v[:, :, None] + e + shift
    ci, ri, ki = np.meshgrid(np.arange(c), np.arange(runs), np.arange(design.rounds), indexing="ij")
    return pd.DataFrame(
        {"comparison": ci.ravel(), "run": ri.ravel(), "round": ki.ravel(), "y": y.ravel()}
    )


def _pooled_rounds(frame: pd.DataFrame) -> list[verdicts.Estimate]:
    """What the estimator becomes without its between-run term: every round of every run taken
    as an independent draw (the pseudo-replication this module exists to rule out)."""
    flat = frame.assign(run=0, round=frame.groupby("comparison").cumcount())
    return verdicts.estimate(
        flat, verdicts.fit(flat, imported=verdicts.Between(0.0, math.inf, "imported"))
    )


def coverage(
    design: Design,
    simulations: int = 400,
    seed: int = 0,
    between_term: bool = True,
) -> float:
    """How often the 95% interval covers the true ratio, over every comparison of every
    simulated campaign (true ratios spread over ±20%)."""
    rng = np.random.default_rng(seed)
    covered = total = 0
    for _ in range(simulations):
        mu = rng.uniform(-0.2, 0.2, size=design.comparisons)
        frame = simulate_rounds(design, rng, mu)
        found = verdicts.estimate(frame) if between_term else _pooled_rounds(frame)
        for e in found:
            truth = math.exp(mu[e.comparison])
            covered += e.low <= truth <= e.high
            total += 1
    return covered / total


def aa_false_winners(estimates: list[verdicts.Estimate]) -> tuple[int, int]:
    """(false winners, A/A comparisons): intervals that exclude 1 between identical arms."""
    decided = [e for e in estimates if e.between != "none"]
    return sum(e.low > 1 or e.high < 1 for e in decided), len(decided)


def aa_rate(
    design: Design, simulations: int = 400, seed: int = 0, between_term: bool = True
) -> float:
    """The false-winner rate of duplicate arms (true ratio 1) at ``design``."""
    rng = np.random.default_rng(seed)
    wins = total = 0
    for _ in range(simulations):
        frame = simulate_rounds(design, rng)
        found = verdicts.estimate(frame) if between_term else _pooled_rounds(frame)
        w, n = aa_false_winners(found)
        wins, total = wins + w, total + n
    return wins / total


def calibration_table(past: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Each comparison's 95% prediction interval from ``past`` (runs 1..k), the new run's mean
    ratio, whether it lies inside, and the verdict before and after pooling the new run in."""
    components = verdicts.fit(past)
    before = verdicts.estimate(past, components)
    decided_before = verdicts.decide(before)
    pooled = pd.concat([past, new], ignore_index=True)
    after = {e.comparison: (e, d) for e, d in zip(*_decided(pooled), strict=True)}
    grouped = verdicts._check(new).groupby("comparison").y
    new_means = dict(
        zip(grouped.mean().index, zip(grouped.mean(), grouped.count(), strict=True), strict=True)
    )
    rows = []
    for e, d in zip(before, decided_before, strict=True):
        if e.comparison not in new_means:
            continue
        mean, count = new_means[e.comparison]
        low, high = verdicts.prediction_interval(e, components, float(count))
        ratio = math.exp(mean)
        verdict_after = after[e.comparison][1].verdict
        rows.append(
            {
                "comparison": e.comparison,
                "predicted_ratio": e.ratio,
                "prediction_low": low,
                "prediction_high": high,
                "new_ratio": ratio,
                "inside": bool(low <= ratio <= high),
                "verdict_before": d.verdict,
                "verdict_after": verdict_after,
                "reversed": {d.verdict, verdict_after} == {verdicts.FASTER_A, verdicts.FASTER_B},
            }
        )
    return pd.DataFrame(rows)


def _decided(frame: pd.DataFrame):
    found = verdicts.estimate(frame)
    return found, verdicts.decide(found)


def _calibration_passes(table: pd.DataFrame, allowed_outside: int | None = None) -> bool:
    """The old counting rule, kept to show what the joint test replaces: no decided verdict
    reversed, and at most ``allowed_outside`` comparisons outside their prediction intervals
    (None: the ``CALIBRATION_INSIDE`` share)."""
    if table.empty or table.reversed.any():
        return False
    if allowed_outside is None:
        return bool(table.inside.mean() >= CALIBRATION_INSIDE)
    return int((~table.inside).sum()) <= allowed_outside


def _simulated_checks(design: Design, simulations: int, seed: int, shift: float):
    rng = np.random.default_rng(seed)
    for _ in range(simulations):
        mu = rng.uniform(-0.2, 0.2, size=design.comparisons)
        past = simulate_rounds(design, rng, mu)
        new = simulate_rounds(design, rng, mu, runs=1, shift=shift).assign(run=design.runs)
        yield calibration_table(past, new)


def outside_allowance(design: Design, simulations: int = 200, seed: int = 0) -> int:
    """The fewest comparisons outside their prediction intervals that a stable machine at
    ``design`` stays within in 97.5% of simulated checks (a margin over the 95% goal, which a
    second simulation with other seeds must still show)."""
    outside = [int((~t.inside).sum()) for t in _simulated_checks(design, simulations, seed, 0.0)]
    return int(np.ceil(np.quantile(outside, 0.975)))


def calibration_pass_rate(
    design: Design,
    simulations: int = 200,
    seed: int = 0,
    shift: float = 0.0,
    allowed_outside: int | None = None,
) -> float:
    """How often the calibration check passes when run ``design.runs + 1`` carries ``shift``
    (0: a stable machine, which should pass; log(1.1): one framework 10% slower, which should
    fail). True ratios are spread over ±20%, so some verdicts are decided."""
    checks = _simulated_checks(design, simulations, seed, shift)
    return float(np.mean([_calibration_passes(t, allowed_outside) for t in checks]))


# a margin under 5%: the threshold is itself a quantile of a finite simulation
CALIBRATION_ALPHA = 0.04
_CALIBRATION_SHIFT = math.log(1.10)  # the shifts the test must catch: 10% on a framework
_NULL_SIMULATIONS = 400


def shift_statistic(past: pd.DataFrame, new: pd.DataFrame, floor=None) -> tuple:
    """(common, rest, comparisons): the new run's deviations from runs 1..k's estimates, read
    in two parts against the covariance the components of ``past`` predict for them.

    With k past runs and n rounds, comparison c's deviation d_c is a shared part with variance
    a = u (1 + 1/k) (the new run's own effect, and the past runs' effect both estimates carry)
    plus its own, with variance b_c = v (1 + 1/k) + s2_c (1/n_new + 1/(k n_c)). ``common`` is the
    squared z of their mean (a shift of every ratio), ``rest`` the sum of (d_c - mean)^2 / b_c
    (a shift of some). One quadratic form over all comparisons spread its power over every
    direction and caught a uniform 10% shift in only 60-70% of runs at a relay's noise."""
    components = verdicts.fit(past, floor=floor)
    estimates = {e.comparison: e for e in verdicts.estimate(past, components)}
    grouped = verdicts._check(new).groupby("comparison").y
    # plain dicts: comparison labels are tuples, which .loc would read as (row, column)
    means, counts = grouped.mean().to_dict(), grouped.count().to_dict()
    keys = [k for k in means if k in estimates]
    if not keys:
        return float("nan"), float("nan"), 0
    k_runs = components.runs
    u, v = _run_terms(components, floor)
    d = np.array([means[k] - estimates[k].log_ratio for k in keys])
    own = np.array(
        [
            v * (1 + 1 / k_runs)
            + components.round_var.get(k, 0.0)
            * (1 / counts[k] + 1 / (k_runs * estimates[k].rounds))
            for k in keys
        ]
    )
    n = len(keys)
    mean_var = u * (1 + 1 / k_runs) + own.sum() / n**2
    common = float(d.mean() ** 2 / mean_var) if mean_var > 0 else float("inf")
    rest = float(np.sum((d - d.mean()) ** 2 / own)) if n > 1 and (own > 0).all() else 0.0
    return common, rest, n


def _run_terms(components: verdicts.Components, floor=None) -> tuple[float, float]:
    """(u, v) for the joint test. A few runs estimate u on a degree of freedom or two, often
    as 0, and a covariance that small makes ``T`` heavy-tailed, its simulated threshold high
    and the test weak; where the CPU model's pooled term is known (``floor``), half of it
    bounds each from below. A pooled number alone (``imported``) is split the same way."""
    if components.imported is not None:
        u = v = max(components.between_var, 0.0) / 2
    else:
        u, v = components.run_var, components.run_comparison_var
    if floor is not None and floor.source != "none":
        u, v = floor.var / 2, floor.var / 2
    return u, v


def design_of(past: pd.DataFrame, floor=None) -> Design:
    """The design and the fitted components of ``past``, as a ``Design`` to simulate."""
    c = verdicts.fit(past, floor=floor)
    u, v = _run_terms(c, floor)
    rounds = int(round(np.mean(list(c._rounds.values())))) if c._rounds else 1
    round_sd = math.sqrt(float(np.mean(list(c.round_var.values())))) if c.round_var else 0.0
    return Design(len(c.round_var), c.runs, max(rounds, 2), math.sqrt(u), math.sqrt(v), round_sd)


def _simulated_statistics(
    design: Design, simulations: int, seed: int, shift, floor=None
) -> np.ndarray:
    """(common, rest) of ``shift_statistic`` over simulated campaigns, one row each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(simulations):
        mu = rng.uniform(-0.2, 0.2, size=design.comparisons)
        past = simulate_rounds(design, rng, mu)
        new = simulate_rounds(design, rng, mu, runs=1, shift=shift).assign(run=design.runs)
        out.append(shift_statistic(past, new, floor)[:2])
    return np.asarray(out)


def null_threshold(
    design: Design, simulations: int = _NULL_SIMULATIONS, seed: int = 0, floor=None
) -> tuple[float, float]:
    """Thresholds of (common, rest): each the (1 - ``CALIBRATION_ALPHA`` / 2) quantile over
    stable runs simulated at ``design``, each judged as the real run is (with the same
    ``floor``), so that a stable run fails either at most ``CALIBRATION_ALPHA`` of the time."""
    t = _simulated_statistics(design, simulations, seed, 0.0, floor)
    q = 1 - CALIBRATION_ALPHA / 2
    return float(np.quantile(t[:, 0], q)), float(np.quantile(t[:, 1], q))


def _passes(statistics: np.ndarray, threshold) -> np.ndarray:
    statistics = np.atleast_2d(statistics)
    return (statistics[:, 0] <= threshold[0]) & (statistics[:, 1] <= threshold[1])


def calibration_power(
    design: Design, threshold, simulations: int = 200, seed: int = 1, floor=None
) -> dict:
    """How often the joint test passes a stable machine and fails each shifted one, at
    ``design`` (seeds apart from the threshold's)."""
    half = np.where(np.arange(design.comparisons) % 2 == 0, _CALIBRATION_SHIFT, 0.0)
    rates = {}
    for name, shift in (("stable_passes", 0.0), ("uniform_fails", _CALIBRATION_SHIFT),
                        ("half_fails", half)):  # fmt: skip
        t = _simulated_statistics(design, simulations, seed, shift, floor)
        passes = float(np.mean(_passes(t, threshold)))
        rates[name] = passes if name == "stable_passes" else 1 - passes
    return rates


def joint_calibration(
    past: pd.DataFrame, new: pd.DataFrame, floor=None, simulations: int = _NULL_SIMULATIONS
) -> dict:
    """The joint test of run k+1 against runs 1..k: its statistic, the threshold simulated at
    the fitted design, whether it passes, and the test's simulated power at that design."""
    common, rest, n = shift_statistic(past, new, floor)
    design = design_of(past, floor)
    threshold = null_threshold(design, simulations, floor=floor)
    return {
        "common": common,
        "rest": rest,
        "comparisons": n,
        "common_threshold": threshold[0],
        "rest_threshold": threshold[1],
        "passes_test": bool(_passes(np.array([common, rest]), threshold)[0]),
        "design": design,
        **calibration_power(design, threshold, simulations // 2, floor=floor),
    }


EQUIVALENCE_GOAL = 0.80  # share of truly equal pairs a design should call equivalent
ROUND_CANDIDATES = (6, 8, 12, 16, 24, 32)


def equivalence_rate(design: Design, simulations: int = 200, seed: int = 2, floor=None) -> float:
    """The share of truly equal pairs (ratio 1) called *equivalent* at ``design``."""
    rng = np.random.default_rng(seed)
    said = total = 0
    for _ in range(simulations):
        frame = simulate_rounds(design, rng)
        decided = verdicts.decide(verdicts.estimate(frame, verdicts.fit(frame, floor=floor)))
        said += sum(v.verdict == verdicts.EQUIVALENT for v in decided)
        total += len(decided)
    return said / total if total else float("nan")


def rounds_for_equivalence(design: Design, simulations: int = 100, floor=None) -> int | None:
    """The fewest rounds per run (of ``ROUND_CANDIDATES``, at the design's runs) at which truly
    equal pairs are called equivalent at least ``EQUIVALENCE_GOAL`` of the time; None if none."""
    for rounds in ROUND_CANDIDATES:
        at = Design(design.comparisons, design.runs, rounds, design.run_sd,
                    design.run_comparison_sd, design.round_sd)  # fmt: skip
        if equivalence_rate(at, simulations, floor=floor) >= EQUIVALENCE_GOAL:
            return rounds
    return None
