"""The verdict estimator: ratios from rounds nested in runs, with the between-run term.

Every framework comparison reads a log ratio per round (``y``: log of B ÷ A in a round where both
arms ran). Rounds nest in runs, and a run shifts every ratio it measures a little (the machine's
state, the process's layout, the compiler's choices), so the model of one campaign's rounds is

    y[c, r, k] = mu[c] + u[r] + v[r, c] + e[c, r, k]

with a random run effect ``u`` (variance ``run_var``), a run × comparison effect ``v``
(``run_comparison_var``) and round noise ``e`` with a variance of its own per comparison
(``round_var``). The components come from the closed form that REML reduces to for a balanced
design: the pooled within-run variance of each comparison for ``e``, and a two-way analysis of
variance of the run means (comparisons × runs) for ``u`` and ``v``, each truncated at zero. A
comparison's interval is ``exp(mu ± t·SE)``, its degrees of freedom from Satterthwaite's
approximation over the mean squares that make up ``SE``.

A single run has no between-run term of its own. It may import one (the CPU model's pooled
term, ``pooled_between``, at its upper 80% bound); without one its ratios are "within one run"
and call no winner.

With few runs the fitted term is often truncated to exactly 0 (the headline's four runs gave 0):
an interval of within-run noise only. Where that happens and the CPU model has a between-run
estimate pooled over every campaign made on it (``pooled_between``, at its upper 80% bound), the
pooled term is used instead (``fit(floor=...)``), and the estimate says so (``between:
"pooled"``). A comparison whose own run means scatter more than the pooled model allows (an F
test at ``OUT_OF_LINE_ALPHA``) gets its own two-stage interval: the t over its run means.

Verdicts (``decide``): *faster* when the Holm-adjusted two-sided test excludes 1 at 5% across
the comparisons decided together; *equivalent within ±5%* when the 90% interval lies inside
[1/1.05, 1.05] (two one-sided tests); otherwise *inconclusive*, with roughly how many runs of the
same size would decide it. The same functions simulate the design (``simulate``), so every check
built on them is shown to pass a correct machine before it is run on a real one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
_EQUIVALENCE_CONFIDENCE = 0.90
_EQUIVALENCE_MARGIN = 1.05  # equivalent within ±5%: the 90% interval inside [1/1.05, 1.05]
# A single run imports a CPU's between-run variance at this upper confidence bound, so that the
# interval it lends is, if anything, too wide.
_IMPORT_BOUND = 0.80
_MIN_RUNS_TO_LEND = 3
# a comparison whose run means scatter beyond the pooled model at this level gets its own interval
OUT_OF_LINE_ALPHA = 0.05
_OWN_RUNS_NOTE = ", t over its own run means (its runs scatter beyond the pooled model's)"

FASTER_A, FASTER_B = "a", "b"
EQUIVALENT = "equivalent"
INCONCLUSIVE = "inconclusive"
WITHIN_ONE_RUN = "within one run"
# A "best modes" comparison whose arm was chosen as the fastest of several modes on the very
# rounds it would judge: the pick favours that arm (the winner's curse), so no verdict is called.
# A tuned mode (vocab.TUNED_MODES), chosen on a tuning run apart, never is.
PICKED_ON_ROUNDS = "mode picked on these rounds"
_VERDICTS = (FASTER_A, FASTER_B, EQUIVALENT, INCONCLUSIVE, WITHIN_ONE_RUN, PICKED_ON_ROUNDS)
# The words every report, README block and sentence says for a verdict that names no faster side;
# spelled here once, so a margin or a word changed here changes everywhere.
EQUIVALENT_WORDS = f"equivalent within ±{round(100 * (_EQUIVALENCE_MARGIN - 1))}%"
WORDS = {
    EQUIVALENT: EQUIVALENT_WORDS,
    INCONCLUSIVE: "inconclusive",
    WITHIN_ONE_RUN: "within one run",
    PICKED_ON_ROUNDS: "no verdict: mode picked on these rounds",
}


def words(verdict: str, faster: dict[str, str] | None = None) -> str:
    """What a verdict says in a sentence: ``faster`` maps ``FASTER_A``/``FASTER_B`` to the
    caller's words for a winner ("the twin is faster"); the others are ``WORDS``."""
    return {**WORDS, **(faster or {})}.get(verdict, verdict)


COLUMNS = ("comparison", "run", "round", "y")


@dataclass(frozen=True)
class Between:
    """A between-run variance (of one run's mean log ratio, round noise excluded) and its
    degrees of freedom; ``source`` says where it came from."""

    var: float
    df: float
    source: str  # "fitted", "imported", "pooled" or "none"
    runs: int = 0
    # (variance, df) of a run mean's whole run-to-run spread, round noise included: what bounds
    # the term from above where its point estimate is truncated to 0 (and its df undefined)
    ceiling: tuple | None = None

    def upper(self, bound: float = _IMPORT_BOUND) -> Between:
        """The one-sided upper ``bound`` of the variance (chi-square), to lend to other runs.

        A term fitted as 0 has no chi-square bound of its own; its ceiling (the run means' whole
        spread) bounds it instead, and without one nothing is lent: 0 would read as certainty."""
        source = "pooled" if self.source == "pooled" else "imported"
        bounds = []
        if self.var > 0 and math.isfinite(self.df) and self.df > 0:
            bounds.append((self.df * self.var / scipy_stats.chi2.ppf(1 - bound, self.df), self.df))
        if self.ceiling is not None and self.ceiling[1] > 0:
            # the ceiling bounds the term too: the tighter of the two is kept, which matters
            # where the term is a small difference of mean squares on a fraction of one df
            var, df = self.ceiling
            bounds.append((df * var / scipy_stats.chi2.ppf(1 - bound, df), df))
        if not bounds:
            return _NO_BETWEEN
        var, df = min(bounds)
        return Between(float(var), float(df), source, self.runs)


_NO_BETWEEN = Between(float("nan"), 0.0, "none")


@dataclass(frozen=True)
class Components:
    """The variance components of one group of comparisons, with the mean squares behind them."""

    run_var: float
    run_comparison_var: float
    round_var: dict  # comparison -> pooled within-run variance of a round's log ratio
    round_df: dict  # comparison -> its degrees of freedom
    runs: int
    comparisons: int  # comparisons present in every run (the ones the run terms are fitted on)
    ms_run: float = float("nan")
    ms_error: float = float("nan")
    df_run: float = 0.0
    df_error: float = 0.0
    mean_round_term: float = 0.0  # mean over comparisons of round_var / rounds per run
    imported: Between | None = None
    notes: tuple = field(default=())

    @property
    def between_var(self) -> float:
        if self.imported is not None:
            return self.imported.var
        return self.run_var + self.run_comparison_var

    @property
    def between(self) -> Between:
        """The fitted between-run variance (u + v) with Satterthwaite's degrees of freedom."""
        if self.imported is not None:
            return self.imported
        if self.runs < 2:
            return _NO_BETWEEN
        terms = self._between_terms()
        var = self.between_var
        return Between(var, _satterthwaite(var, terms), "fitted", self.runs, self._ceiling())

    def _ceiling(self) -> tuple | None:
        """(variance, df) of one comparison's run mean from run to run, round noise included."""
        if self.runs < 2 or not self.df_run:
            return None
        terms = _ceiling_terms(self)
        var = sum(a * ms for a, ms, _ in terms)
        return (var, _satterthwaite(var, terms))

    def _between_terms(self) -> list[tuple[float, float, float]]:
        """(coefficient, mean square, df) terms whose sum is ``between_var``."""
        if self.imported is not None:
            return [(1.0, self.imported.var, self.imported.df)]
        if self.runs < 2:
            return []
        c = max(self.comparisons, 1)
        round_terms = [
            (-1.0 / (c * n), self.round_var[k], self.round_df[k], ("round", k))
            for k, n in self._rounds.items()
            if self.round_df.get(k, 0) > 0
        ]
        if c == 1:
            if self.run_var + self.run_comparison_var <= 0:
                return []
            return [(1.0, self.ms_run, self.df_run), *round_terms]
        u, v = self.run_var > 0, self.run_comparison_var > 0
        if u and v:
            return [
                (1.0 / c, self.ms_run, self.df_run),
                (1 - 1.0 / c, self.ms_error, self.df_error),
                *round_terms,
            ]
        if v:
            return [(1.0, self.ms_error, self.df_error), *round_terms]
        if u:
            return [(1.0 / c, self.ms_run, self.df_run), (-1.0 / c, self.ms_error, self.df_error)]
        return []

    _rounds: dict = field(default_factory=dict)  # comparison -> harmonic mean rounds per run


def _merged(terms) -> list[tuple[float, float, float]]:
    """Terms as (coefficient, mean square, df), one per mean square: a term keyed like another
    (a comparison's round mean square, which both the between-run term and the comparison's own
    round term use) has its coefficient added to it rather than counted as independent."""
    merged: dict = {}
    for term in terms:
        a, ms, df = term[:3]
        key = term[3] if len(term) > 3 else object()
        if key in merged:
            merged[key] = (merged[key][0] + a, ms, df)
        else:
            merged[key] = (a, ms, df)
    return list(merged.values())


def _satterthwaite(total: float, terms) -> float:
    terms = _merged(terms)
    denominator = sum((a * ms) ** 2 / df for a, ms, df in terms if df and df > 0)
    if total <= 0 or denominator <= 0:
        return float("inf")
    return float(total**2 / denominator)


def _check(frame: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in frame]
    if missing:
        raise ValueError(f"rounds need columns {COLUMNS}; missing {missing}")
    frame = frame[np.isfinite(frame.y.astype(float))]
    return frame.assign(y=frame.y.astype(float))


def fit(
    frame: pd.DataFrame, imported: Between | None = None, floor: Between | None = None
) -> Components:
    """The variance components of ``frame`` (columns comparison, run, round, y), one group.

    With ``imported``, the between-run term is the imported one; with one run and none, it is
    absent (and ``between`` says so). ``floor`` (a CPU model's pooled term, ``pooled_between``
    at its upper bound) replaces a fitted term that came out as exactly 0."""
    fitted = _fit(frame, imported)
    if floor is None or imported is not None or fitted.runs < 2 or fitted.between_var > 0:
        return fitted
    return dataclasses.replace(
        fitted,
        imported=floor,
        notes=(*fitted.notes, "own runs fit no between-run term: the CPU model's pooled one"),
    )


def pooled_between(frames: list[pd.DataFrame]) -> Between:
    """One CPU model's between-run variance from every campaign made on it (each frame: one
    campaign's rounds, two or more runs): the moment estimate of u + v of each campaign, weighted
    by its runs less one, with the campaigns' ceilings pooled the same way for where it is 0.
    Its ``upper()`` is what ``fit(floor=...)`` takes."""
    parts = []
    for frame in frames:
        c = fit(frame)
        ceiling = c._ceiling()
        if c.runs < 2 or ceiling is None:
            continue
        parts.append((float(c.runs - 1), c, ceiling))
    if not parts:
        return _NO_BETWEEN
    total = sum(w for w, *_ in parts)
    point_terms, ceiling_terms = [], []
    for w, c, ceiling in parts:
        share = w / total
        ceiling_terms.append((share, ceiling[0], ceiling[1]))
        k = max(c.comparisons, 1)
        point_terms += [(share * a, ms, df) for a, ms, df in _ceiling_terms(c)]
        point_terms += [
            (-share / (k * n), c.round_var[key], c.round_df[key])
            for key, n in c._rounds.items()
            if c.round_df.get(key, 0) > 0
        ]
    point = max(0.0, sum(a * ms for a, ms, _ in point_terms))
    ceiling_var = sum(a * ms for a, ms, _ in ceiling_terms)
    ceiling = (ceiling_var, _satterthwaite(ceiling_var, ceiling_terms))
    runs = sum(c.runs for _, c, _ in parts)
    return Between(point, _satterthwaite(point, point_terms), "pooled", runs, ceiling)


def _ceiling_terms(c: Components) -> list[tuple[float, float, float]]:
    k = max(c.comparisons, 1)
    if k == 1 or not c.df_error:
        return [(1.0, c.ms_run, c.df_run)]
    return [(1.0 / k, c.ms_run, c.df_run), (1 - 1.0 / k, c.ms_error, c.df_error)]


def _fit(frame: pd.DataFrame, imported: Between | None) -> Components:
    frame = _check(frame)
    cells = frame.groupby(["comparison", "run"], sort=True).y.agg(["mean", "count", "var"])
    cells["ss"] = cells["var"].fillna(0.0) * (cells["count"] - 1)
    per = cells.groupby(level="comparison")
    df_within = per.apply(lambda g: float((g["count"] - 1).sum()))
    ss_within = per.ss.sum()
    round_var = {
        k: float(ss_within[k] / df_within[k]) if df_within[k] > 0 else 0.0 for k in ss_within.index
    }
    round_df = {k: float(df_within[k]) for k in df_within.index}
    rounds = per.apply(lambda g: float(len(g) / (1.0 / g["count"]).sum()))
    rounds = {k: float(rounds[k]) for k in rounds.index}
    means = cells["mean"].unstack("run")
    runs = int(means.shape[1])

    def without_run_terms(comparisons: int, **given) -> Components:
        return Components(0.0, 0.0, round_var, round_df, runs, comparisons, _rounds=rounds, **given)

    if imported is not None or runs < 2:
        return without_run_terms(int(means.shape[0]), imported=imported)
    complete = means.dropna()
    c, r = complete.shape
    if c == 0:
        return without_run_terms(0, notes=("no comparison ran in every run",))
    mean_round_term = float(np.mean([round_var[k] / rounds[k] for k in complete.index]))
    grand = complete.values.mean()
    run_means = complete.mean(axis=0).values
    comparison_means = complete.mean(axis=1).values
    if c == 1:
        ms_run = float(np.var(complete.values[0], ddof=1))
        between = max(0.0, ms_run - mean_round_term)
        return Components(
            0.0,
            between,
            round_var,
            round_df,
            runs,
            1,
            ms_run=ms_run,
            df_run=r - 1,
            mean_round_term=mean_round_term,
            _rounds={complete.index[0]: rounds[complete.index[0]]},
        )
    ms_run = float(c * np.sum((run_means - grand) ** 2) / (r - 1))
    residual = complete.values - comparison_means[:, None] - run_means[None, :] + grand
    ms_error = float(np.sum(residual**2) / ((c - 1) * (r - 1)))
    run_var = max(0.0, (ms_run - ms_error) / c)
    run_comparison_var = max(0.0, ms_error - mean_round_term)
    return Components(
        run_var, run_comparison_var, round_var, round_df, runs, c,
        ms_run=ms_run, ms_error=ms_error, df_run=r - 1, df_error=(c - 1) * (r - 1),
        mean_round_term=mean_round_term, _rounds={k: rounds[k] for k in complete.index},
    )  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """One comparison's ratio (B ÷ A) with its intervals and what they rest on."""

    comparison: object
    ratio: float
    se: float  # of the mean log ratio
    df: float
    low: float  # 95% interval
    high: float
    low90: float
    high90: float
    runs: int
    rounds: float  # rounds per run (harmonic mean)
    between: str  # "fitted", "imported", "pooled" or "none"
    p_value: float
    design: str
    # "pooled": the variance components of the whole group; "own runs": its own run means (its
    # run-to-run spread was out of line with the pool)
    basis: str = "pooled"

    @property
    def log_ratio(self) -> float:
        return math.log(self.ratio)


def _exp(log_value: float) -> float:
    """A ratio from its log, infinite past float range: Satterthwaite's degrees of freedom fall
    below 1 where a between-run term is a small difference of mean squares, and the t quantile
    then puts an interval's end beyond what ``math.exp`` can hold. Such an interval is unbounded,
    and calls no winner."""
    return math.exp(log_value) if log_value < 709.0 else math.inf


def design_label(runs: int, rounds: float) -> str:
    rounds_text = f"{rounds:.0f}" if abs(rounds - round(rounds)) < 0.05 else f"{rounds:.1f}"
    return f"{runs} run{'s' if runs != 1 else ''} × {rounds_text} round{'' if rounds_text == '1' else 's'}"


def estimate(frame: pd.DataFrame, components: Components | None = None) -> list[Estimate]:
    """Each comparison's ratio with intervals that carry the between-run term."""
    frame = _check(frame)
    components = components or fit(frame)
    between = components.between
    out = []
    for key, group in frame.groupby("comparison", sort=True):
        run_means = group.groupby("run").y.mean()
        counts = group.groupby("run").y.count()
        runs = len(run_means)
        rounds = float(runs / (1.0 / counts).sum())
        mean = float(run_means.mean())
        s2, s2_df = components.round_var.get(key, 0.0), components.round_df.get(key, 0.0)
        own = (1.0 / rounds, s2, s2_df, ("round", key))
        if between.source == "none":
            terms = [own] if s2_df > 0 else []
            var_run_mean = s2 / rounds
        else:
            terms = (
                [*components._between_terms(), own] if s2_df > 0 else components._between_terms()
            )
            var_run_mean = between.var + s2 / rounds
        se = math.sqrt(max(var_run_mean, 0.0) / runs)
        df = _satterthwaite(var_run_mean, terms) if terms else float("inf")
        basis = "pooled"
        if between.source != "none" and _out_of_line(run_means, var_run_mean, df):
            se, df, basis = math.sqrt(float(run_means.var(ddof=1)) / runs), runs - 1.0, "own runs"
        if se == 0:
            p = 0.0 if mean != 0 else 1.0
            lo = hi = lo90 = hi90 = mean
        else:
            p = float(2 * scipy_stats.t.sf(abs(mean) / se, df))
            half = scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df) * se
            half90 = scipy_stats.t.ppf(0.5 + _EQUIVALENCE_CONFIDENCE / 2, df) * se
            lo, hi, lo90, hi90 = mean - half, mean + half, mean - half90, mean + half90
        out.append(
            Estimate(
                key,
                _exp(mean),
                se,
                df,
                _exp(lo),
                _exp(hi),
                _exp(lo90),
                _exp(hi90),
                runs,
                rounds,
                between.source,
                p,
                design_label(runs, rounds) + (_OWN_RUNS_NOTE if basis == "own runs" else ""),
                basis,
            )  # fmt: skip
        )
    return out


def _out_of_line(run_means: pd.Series, expected: float, df: float) -> bool:
    """Whether a comparison's run means scatter more than the pooled model's run-mean variance
    ``expected`` allows (one-sided F test at ``OUT_OF_LINE_ALPHA``)."""
    if len(run_means) < 3 or expected <= 0:
        return False
    ratio = float(run_means.var(ddof=1)) / expected
    df2 = df if math.isfinite(df) else 1e6
    return bool(scipy_stats.f.sf(ratio, len(run_means) - 1, df2) < OUT_OF_LINE_ALPHA)


@dataclass(frozen=True)
class Verdict:
    verdict: str  # one of _VERDICTS
    p_holm: float
    more_runs: float  # roughly how many runs in all would decide an inconclusive one (nan: none)


def _runs_to_decide(e: Estimate) -> float:
    """Roughly how many runs in all, of the same size, would decide ``e``: enough for the 95% interval to
    exclude 1 at the present ratio, or for the 90% interval to fit inside ±5%, whichever is
    fewer (normal quantiles; the present estimates taken as true)."""
    if not math.isfinite(e.se) or e.se == 0:
        return float("nan")
    var_run = e.se**2 * e.runs
    m = abs(e.log_ratio)
    margin = math.log(_EQUIVALENCE_MARGIN)
    needs = []
    if m > 0:
        needs.append(var_run * (scipy_stats.norm.ppf(0.5 + CONFIDENCE / 2) / m) ** 2)
    if m < margin:
        needs.append(
            var_run * (scipy_stats.norm.ppf(0.5 + _EQUIVALENCE_CONFIDENCE / 2) / (margin - m)) ** 2
        )
    # the normal-quantile count ignores Holm's adjustment and the t's few degrees of freedom, so
    # it can fall below the runs already made; an undecided verdict needs one more at the least
    return float(max(math.ceil(min(needs)), e.runs + 1)) if needs else float("nan")


def holm_adjusted(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values, as statsmodels' ``multipletests(method="holm")``
    gives them (a test holds the two equal). Not called through statsmodels: its Holm path runs
    a full ``gc.collect()`` on every call, which in a process holding torch and JAX cost more
    than the fit itself (the calibration simulations spent most of their 6 minutes there)."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p)
    steps = np.arange(len(p), 0, -1) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(steps), 1.0)
    return adjusted


def decide(estimates: list[Estimate]) -> list[Verdict]:
    """The three-way verdict of each estimate, Holm-adjusted across all of them.

    A ratio whose between-run term is absent calls no winner and is not counted in Holm's family.
    """
    decidable = [i for i, e in enumerate(estimates) if e.between != "none"]
    adjusted = {}
    if decidable:
        pvalues = [estimates[i].p_value for i in decidable]
        holm = holm_adjusted(pvalues)
        adjusted = dict(zip(decidable, holm, strict=True))
    out = []
    for i, e in enumerate(estimates):
        if i not in adjusted:
            out.append(Verdict(WITHIN_ONE_RUN, float("nan"), float("nan")))
            continue
        p = float(adjusted[i])
        if p < 1 - CONFIDENCE:
            out.append(Verdict(FASTER_B if e.ratio > 1 else FASTER_A, p, float("nan")))
        elif e.low90 >= 1 / _EQUIVALENCE_MARGIN and e.high90 <= _EQUIVALENCE_MARGIN:
            out.append(Verdict(EQUIVALENT, p, float("nan")))
        else:
            out.append(Verdict(INCONCLUSIVE, p, _runs_to_decide(e)))
    return out


def prediction_interval(
    e: Estimate, components: Components, rounds: float, confidence: float = CONFIDENCE
):
    """The interval a new run's mean ratio (at ``rounds`` rounds) should fall in, given runs
    1..k: the estimate's own uncertainty, the between-run term and the new run's round noise."""
    s2 = components.round_var.get(e.comparison, 0.0)
    var = e.se**2 + max(components.between_var, 0.0) + s2 / rounds
    half = scipy_stats.t.ppf(0.5 + confidence / 2, e.df) * math.sqrt(var)
    return math.exp(e.log_ratio - half), math.exp(e.log_ratio + half)
