"""How far a run's comparisons can be trusted: its trials, an A/A control on duplicate arms,
calibration against the campaign's earlier runs, and the regression detector scored on the run's
between-trial noise together with the campaign's between-run noise.

Everything here reads ``tables.throughput_samples`` rows with trials (``trials``, ``shared`` and
``reruns`` per arm) and ``tables.comparison_matrix`` frames, so it measures exactly the method the
report's comparisons use, on this machine's noise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.measure import verdict_checks, verdicts
from fwbench.measure.stats import paired_ratio_interval
from fwbench.report import regressions, sequential
from fwbench.report.arms import COPY_SUFFIX
from fwbench.report.tables import (
    CONFIG,
    SERIES,
    best_rounds,
    cpu_identity,
    kept_rounds,
    log_ratio_rounds,
    parse_json,
    samples_on_cpu,
    winner_word,
)

AA_GOAL = verdict_checks.A_A_GOAL
# The A/A rate is read against its goal only over this many comparisons (counted across runs).
AA_MIN_COMPARISONS = 40
# The regression detector's evaluation: points are medians of this many trials (issue 13), and
# the histories per slowdown size.
POINT_TRIALS = 5
EVAL_SERIES = 200
_EVAL_SEED = 0
TRIAL_CANDIDATES = (5, 7, 10, 15, 20, 30)
# Trials shrink only a point's trial noise, never its run effect; runs per point (a point the
# mean of that many runs' medians) shrink both. The noisiest pool here (the trust campaign's
# trials) with a run SD of 0.035 needs 8.
RUN_CANDIDATES = (2, 3, 4, 6, 8, 12)
# The goals a design is searched for: recall at 10%, false alerts and delay. The F1 against the
# baselines compares methods and, on quiet points, a fixed 7% rule ties it
# (``regressions.meets_goals``); the scores still carry every F1.
GOALS_VERSUS_BASELINES = False

# fewer run-to-run residuals than this say too little about the tails the threshold sits in
MIN_RESIDUALS = 20

_TRIAL_COLUMNS = [*CONFIG, *SERIES, "trials", "reruns", "still_shared", "used"]


def _with_trials(samples: pd.DataFrame) -> pd.DataFrame:
    if samples.empty or "trials" not in samples:
        return samples.iloc[0:0]
    return samples[samples.trials.notna()]


def _used_values(row) -> list[float]:
    """An arm's trial values, without the ones run on a shared machine when enough are left."""
    return kept_rounds(row.samples, row.shared)


def trials_table(samples: pd.DataFrame) -> pd.DataFrame:
    """Per arm with trials: how many ran, how many attempts were discarded and run again because
    the machine was shared, how many stayed shared after that, and how many the A/A control and
    the detector's noise pool use."""
    rows = []
    for r in _with_trials(samples).itertuples():
        rows.append(
            {
                **{k: getattr(r, k) for k in CONFIG + SERIES},
                "trials": len(r.trials),
                "reruns": int(sum(r.reruns)),
                "still_shared": int(sum(r.shared)),
                "used": len(_used_values(r)),
            }
        )
    return pd.DataFrame(rows, columns=_TRIAL_COLUMNS)


def _copy_pairs(samples: pd.DataFrame) -> list[tuple[dict, str, str]]:
    """Each A/A pair of the pooled runs: (configuration, framework, variant) of an arm that ran
    a duplicate cell (variant ``…#copy``) beside it."""
    pairs = set()
    copies = samples[samples.variant.str.endswith(COPY_SUFFIX)] if not samples.empty else samples
    for r in copies.itertuples():
        key = tuple(getattr(r, k) for k in CONFIG)
        pairs.add((key, r.framework, r.variant[: -len(COPY_SUFFIX)]))
    return [(dict(zip(CONFIG, key, strict=True)), fw, v) for key, fw, v in sorted(pairs)]


def aa_control(samples: pd.DataFrame, floor=None) -> pd.DataFrame:
    """The A/A control: each duplicate arm against its original, through the verdicts' own
    estimator. The variance components are fitted on every pooled run's A/A rounds; each run's
    A/A ratio is then judged alone with that between-run term (so comparisons count across
    runs), and every 95% interval that excludes 1 is a false winner. A term fitted as 0 gives
    way to ``floor`` (the CPU model's shared term), as it does in the comparisons themselves,
    so the control tests the interval the comparisons publish. With one run there is no
    between-run term and no rate."""
    columns = [*CONFIG, "framework", "variant", "run_id", "rounds", "ratio", "ci_low"]
    columns += ["ci_high", "df", "false_winner", "design"]
    if samples.empty or "variant" not in samples:
        return pd.DataFrame(columns=columns)
    if "run_id" not in samples:
        samples = samples.assign(run_id="run")
    parts = []
    for key, framework, variant in _copy_pairs(samples):
        ident = (*key.values(), framework, variant)
        frame, _ = log_ratio_rounds(
            samples, key, (framework, variant), (framework, variant + COPY_SUFFIX), ident
        )
        parts.append(frame)
    rounds = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if rounds.empty or rounds.run.nunique() < 2:
        return pd.DataFrame(columns=columns)
    between = verdicts.fit(rounds).between
    if between.var <= 0 and floor is not None:
        between = floor
    rows = []
    for run, frame in rounds.groupby("run", sort=True):
        found = verdicts.estimate(frame, verdicts.fit(frame, imported=between))
        for e in found:
            *config, framework, variant = e.comparison
            rows.append(
                {
                    **dict(zip(CONFIG, config, strict=True)),
                    "framework": framework,
                    "variant": variant,
                    "run_id": run,
                    "rounds": e.rounds,
                    "ratio": e.ratio,
                    "ci_low": e.low,
                    "ci_high": e.high,
                    "df": e.df,
                    "false_winner": bool(e.low > 1 or e.high < 1),
                    "design": f"1 run × {e.rounds:.0f} rounds, between-run term from {between.runs} runs",
                }
            )
    return pd.DataFrame(rows, columns=columns)


def aa_rate(aa: pd.DataFrame) -> float:
    return float(aa.false_winner.mean()) if not aa.empty else float("nan")


def distinct(matrix: pd.DataFrame) -> pd.DataFrame:
    """The matrix without repeats: "best" and "defaults" are one comparison where each framework
    ran one variant."""
    keys = [*CONFIG, "jax_variant", "torch_variant"]
    return matrix.sort_values("comparison", ascending=False).drop_duplicates(keys)


def _past_and_new(samples: pd.DataFrame, run_id: str):
    """The best-mode rounds of the pooled runs before ``run_id`` and of ``run_id`` itself; None
    with fewer than two earlier runs."""
    if samples.empty or "run_id" not in samples or samples.run_id.nunique() < 3:
        return None
    earlier = sorted(r for r in set(samples.run_id) if r < run_id)
    if len(earlier) < 2:
        return None
    rounds = best_rounds(samples, run_id)
    if rounds.empty:
        return None
    past, new = rounds[rounds.run != run_id], rounds[rounds.run == run_id]
    if past.run.nunique() < 2 or new.empty:
        return None
    return past, new


def calibration(samples: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """Stability as calibration, for reading: the pooled runs before ``run_id`` give each
    comparison a 95% prediction interval for a new run's ratio, and ``run_id``'s own ratio is
    set against it (``verdict_checks.calibration_table``). Empty with fewer than two earlier
    runs. The check itself is ``calibration_check``."""
    parts = _past_and_new(samples, run_id)
    if parts is None:
        return pd.DataFrame()
    past, new = parts
    table = verdict_checks.calibration_table(past, new)
    labels = pd.DataFrame(
        [(*c[:-2], c[-2], c[-1]) for c in table.comparison],
        columns=[*CONFIG, "jax_variant", "torch_variant"],
    )
    table = pd.concat([labels, table.drop(columns="comparison")], axis=1)
    for column in ("verdict_before", "verdict_after"):
        table[column] = table[column].map(winner_word)
    return table.assign(earlier_runs=len(set(past.run)))


def calibration_summary(
    table: pd.DataFrame, samples: pd.DataFrame | None = None, run_id: str | None = None,
    floor=None,
) -> dict:  # fmt: skip
    """The calibration check's figures: the joint test of run ``run_id`` against the earlier
    runs (``verdict_checks.joint_calibration``: its statistic, threshold and simulated power),
    verdicts reversed, and, for reading, comparisons inside their prediction intervals. It
    passes when the joint test passes and no decided verdict reversed."""
    n = len(table)
    if not n:
        return {"comparisons": 0, "inside": 0, "reversed": 0, "passes": False}
    parts = _past_and_new(samples, run_id) if samples is not None else None
    joint = verdict_checks.joint_calibration(*parts, floor=floor) if parts else {}
    reversed_ = int(table.reversed.sum())
    return {
        "comparisons": n,
        "inside": int(table.inside.sum()),
        "reversed": reversed_,
        "earlier_runs": int(table.earlier_runs.iloc[0]),
        **{k: v for k, v in joint.items() if k != "design"},
        "passes": bool(joint.get("passes_test")) and reversed_ == 0,
    }


def noise_pool(samples: pd.DataFrame, min_trials: int = POINT_TRIALS) -> np.ndarray:
    """This run's between-trial noise: each arm's used trial values over the arm's median, pooled
    over the arms with at least ``min_trials`` of them. It is the noise within a run only; the
    run effect on top comes from the campaign's history (``regressions.run_noise``)."""
    parts = []
    for r in _with_trials(samples).itertuples():
        values = np.asarray(_used_values(r), dtype=float)
        if values.size >= min_trials:
            parts.append(values / np.median(values))
    return np.concatenate(parts) if parts else np.array([])


def regression_scores(
    pool: np.ndarray, histories: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, int | None]:
    """The detector and its two baselines scored on 10-run histories whose points are medians of
    ``POINT_TRIALS`` trials drawn from ``pool``, each shifted by a run effect of the between-run
    SD that ``histories`` (the campaign's ``regressions.load_histories`` frame up to this run)
    shows (``regressions.run_noise``; its default where it cannot say).

    Returns the scores and the trials per point at which the detector meets the goals
    (``POINT_TRIALS`` where it does as run; None where no count of ``TRIAL_CANDIDATES`` does):
    recall at 10%, false alerts and delay (``GOALS_VERSUS_BASELINES``). The scores are
    ``regressions.evaluate``'s rows (``run_sd`` among them), three per evaluation, with
    ``run_sd_source`` (how the run SD was had: ``regressions.RunNoise.describe``),
    ``run_sd_runs`` (the runs behind an estimate, 0 for the default), ``meets_goals`` (whether
    the detector met the goals in that evaluation) and ``scenario``, in this order:

    - ``current``: ``POINT_TRIALS`` trials, one run per point, the run SD (first, the row the
      records and sentences quote);
    - where ``current`` misses a goal, ``more_trials``: each larger count of ``TRIAL_CANDIDATES``
      until one meets them all, and ``more_runs``: each count of ``RUN_CANDIDATES`` runs per point
      until one does (``regression_needs`` reads both answers);
    - ``no_run_noise``: ``current`` without the run effect, the figures before run noise was
      modelled, so that the report can say what it costs (absent when the run SD is 0).

    On the test suite's 2-core pool (34 latencies, CV 6.9%) run noise moves the detector from
    1.0 false alerts per 100 and 92.0% recall at 10% to 6.0 and 86.5% at a run SD of 0.02 and
    15.0 and 70.0% at 0.035; at 0.035, 30 trials per point still give 8.5 and 84.5%, and 3 runs
    per point give 1.0 and 94.0%, which meets the goals.
    """
    noise = regressions.run_noise(histories)
    options = {"series": EVAL_SERIES, "seed": _EVAL_SEED, "run_sd": noise.sd}
    goals = {"versus_baselines": GOALS_VERSUS_BASELINES}
    current = regressions.evaluate(pool, trials=POINT_TRIALS, **options)
    parts = [("current", current)]
    needed = POINT_TRIALS if regressions.meets_goals(current, **goals) else None
    if needed is None:
        larger = [t for t in TRIAL_CANDIDATES if t > POINT_TRIALS]
        needed, by_trials = regressions.trials_needed(pool, larger, **goals, **options)
        _runs, by_runs = regressions.runs_needed(
            pool, RUN_CANDIDATES, trials=POINT_TRIALS, **goals, **options
        )
        parts += [("more_trials", by_trials), ("more_runs", by_runs)]
    if noise.sd > 0:
        reference = regressions.evaluate(
            pool, trials=POINT_TRIALS, series=EVAL_SERIES, seed=_EVAL_SEED
        )
        parts.append(("no_run_noise", reference))
    frames = []
    for scenario, scores in parts:
        if scores.empty:  # a search with no candidate left to try
            continue
        for _design, evaluation in scores.groupby(["trials", "runs_per_point"], sort=False):
            reference = scenario == "no_run_noise"
            frames.append(
                evaluation.assign(
                    run_sd_source="none" if reference else noise.describe(),
                    run_sd_runs=0 if reference else noise.runs,
                    meets_goals=regressions.meets_goals(evaluation, **goals),
                    scenario=scenario,
                )
            )
    return pd.concat(frames, ignore_index=True), needed


def regression_needs(scores: pd.DataFrame) -> dict:
    """What ``regression_scores``' frame says, for a sentence: the run SD and its source, and
    the fewest trials per point (at one run per point) and runs per point (at ``POINT_TRIALS``
    trials) at which the detector meets the goals (None: no candidate did, or none was tried)."""
    if scores.empty:
        return dict.fromkeys(
            ["run_sd", "run_sd_source", "run_sd_runs", "trials_needed", "runs_needed"]
        )
    detector = scores[scores.method == "changepoint"]
    current = detector[detector.scenario == "current"].iloc[0]

    def fewest(scenario: str, column: str):
        met = detector[(detector.scenario == scenario) & detector.meets_goals]
        return int(met[column].min()) if not met.empty else None

    ok = bool(current.meets_goals)
    return {
        "run_sd": float(current.run_sd),
        "run_sd_source": current.run_sd_source,
        "run_sd_runs": int(current.run_sd_runs),
        "trials_needed": POINT_TRIALS if ok else fewest("more_trials", "trials"),
        "runs_needed": 1 if ok else fewest("more_runs", "runs_per_point"),
    }


def _finite(row: dict) -> dict:
    # a record's extra is JSON, which has no NaN
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in row.items()}


def add_records(
    rec,
    aa: pd.DataFrame,
    stability: dict,
    baseline_run_id: str,
    scores: pd.DataFrame,
    needed: int | None,
) -> None:
    """The trust figures as records (family ``analysis``), so that the index, the README and the
    next run's history can cite them: the A/A false-winner rate, the stability figures against
    the baseline run, and the regression detector's recall at 10% and false alerts per 100."""
    if not aa.empty:
        rec.add(
            "aa_false_winner_rate",
            aa_rate(aa),
            "ratio",
            n=len(aa),
            extra={"runs": int(aa.run_id.nunique()), "false_winners": int(aa.false_winner.sum())},
        )
    if stability["comparisons"]:
        rec.add(
            "calibration_inside_share",
            stability["inside"] / stability["comparisons"],
            "ratio",
            n=stability["comparisons"],
            extra=_finite({"run_id": baseline_run_id, **stability}),
        )
    if scores.empty:
        return
    row = scores[(scores.method == "changepoint") & (scores.scenario == "current")].iloc[0]
    extra = {
        "trials_per_point": POINT_TRIALS,
        "series_per_size": EVAL_SERIES,
        "seed": _EVAL_SEED,
        "trials_needed_for_goals": needed,
        **_finite(regression_needs(scores)),
        "scores": [_finite(r) for r in scores.to_dict(orient="records")],
    }
    rec.add("regression_recall_10pct", float(row["recall_0.1"]), "ratio", extra=extra)
    rec.add("regression_false_alerts_per_100", float(row.false_per_100), "count", extra=extra)


def arm_spread(meas: pd.DataFrame, cells: pd.DataFrame, arm: str) -> pd.DataFrame:
    """An A/A experiment's spread: two arms of one campaign run that differ only in the cell
    parameter ``arm`` (e.g. the seed), compared round by round with the report's method.

    One row per configuration (``CONFIG``): the rounds both arms have, the standard deviation of
    the per-round log ratio (the noise a paired comparison sees), the paired ratio and its 95%
    interval, whether that interval wrongly calls a winner, and each arm's coefficient of
    variation over rounds (the noise an unpaired comparison would see).
    """
    columns = [*CONFIG, "rounds", "log_ratio_sd", "ratio", "ci_low", "ci_high"]
    columns += ["false_winner", "arm_cv"]
    thr = meas[(meas.metric == "throughput_img_s") & (meas.status == "ok") & meas.value.notna()]
    if thr.empty:
        return pd.DataFrame(columns=columns)
    params = cells.set_index(["notebook", "cell", "trial"]).parameters
    keys = zip(thr.notebook, thr.cell, thr.trial, strict=True)
    thr = thr.assign(arm=[params.get(k, {}).get(arm) for k in keys])
    rows = []
    for key, group in thr.groupby(CONFIG, sort=True):
        wide = group.pivot_table(index="trial", columns="arm", values="value").dropna()
        if wide.shape[1] != 2 or len(wide) < 2:
            continue
        a, b = (wide[c].to_numpy() for c in sorted(wide.columns))
        result = paired_ratio_interval(a, b)
        cv = [float(np.std(x, ddof=1) / np.mean(x)) for x in (a, b)]
        rows.append(
            {
                **dict(zip(CONFIG, key, strict=True)),
                "rounds": result.rounds,
                "log_ratio_sd": float(np.std(np.log(b / a), ddof=1)),
                "ratio": result.ratio,
                "ci_low": result.low,
                "ci_high": result.high,
                "false_winner": bool(result.low > 1 or result.high < 1),
                "arm_cv": float(np.mean(cv)),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def round_noise(samples: pd.DataFrame) -> pd.DataFrame:
    """How much a run's rounds scatter, per run: the median over arms of each arm's SD of log
    throughput across its rounds, per framework, and the median over best-mode comparisons of the
    SD of the log ratio across rounds. ``samples`` are ``tables.throughput_samples`` rows with
    trials and a ``run_id``; A/A copies count as arms of their framework."""
    if samples.empty or "trials" not in samples:
        return pd.DataFrame()
    with_rounds = samples[samples.trials.notna()]
    rows = []
    for run_id, run in with_rounds.groupby("run_id", sort=True):
        sd = run.samples.map(lambda v: float(np.std(np.log(v), ddof=1)) if len(v) > 2 else np.nan)
        row = {"run_id": run_id, "arms": int(sd.notna().sum())}
        for framework in ("jax", "torch"):
            row[f"{framework}_round_sd"] = float(sd[run.framework == framework].median())
        rounds = best_rounds(samples[samples.run_id == run_id], run_id)
        spread = rounds.groupby("comparison").y.std() if not rounds.empty else pd.Series()
        row["ratio_round_sd"] = float(spread.median()) if len(spread) else float("nan")
        row["comparisons"] = int(spread.notna().sum())
        aa = _copy_spreads(run)
        row["aa_round_sd"] = float(np.median(aa)) if aa else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def _copy_spreads(run: pd.DataFrame) -> list[float]:
    """Per A/A pair of one run, the SD across rounds of log(copy / original)."""
    by_arm = {
        (*(r[c] for c in CONFIG), r["framework"], r["variant"]): dict(
            zip(r["trials"], r["samples"], strict=True)
        )
        for _, r in run.iterrows()
    }
    spreads = []
    for (*key, variant), copy in by_arm.items():
        original = by_arm.get((*key, variant.removesuffix(COPY_SUFFIX)))
        if not variant.endswith(COPY_SUFFIX) or original is None:
            continue
        logs = [np.log(copy[t] / original[t]) for t in copy if t in original]
        if len(logs) > 2:
            spreads.append(float(np.std(logs, ddof=1)))
    return spreads


def series_rounds(on_cpu: dict) -> list[tuple[str, pd.DataFrame]]:
    """Every repeated series in ``on_cpu`` (``samples_on_cpu``): (campaign, its best-mode rounds
    as a ``verdicts.COLUMNS`` frame). A series is the runs that timed the arms a run compared, so
    a campaign whose arms changed (a new mode) keeps its earlier series apart; newest first, and
    only those of two or more runs."""
    out = []
    for campaign, (ids, samples) in on_cpu.items():
        if len(ids) < 2 or samples.empty:
            continue
        seen: set[str] = set()
        for rid in reversed(ids):
            if rid in seen:
                continue
            rounds = best_rounds(samples, rid)
            runs = set(rounds.run) if not rounds.empty else set()
            seen |= runs | {rid}
            if len(runs) >= 2:
                out.append((campaign, rounds))
    return out


def repeated_rounds(on_cpu: dict) -> dict[str, pd.DataFrame]:
    """``series_rounds`` by name (a campaign's newest series by the campaign's, an earlier one
    by its runs): the evidence this CPU model's between-run term and the regression detector's
    noise come from."""
    out: dict[str, pd.DataFrame] = {}
    for campaign, rounds in series_rounds(on_cpu):
        name = (
            campaign
            if campaign not in out
            else f"{campaign} (runs {min(rounds.run)}-{max(rounds.run)})"
        )
        out[name] = rounds
    return out


def shared_between(repeated: dict[str, pd.DataFrame]) -> verdicts.Between | None:
    """This CPU model's between-run term, pooled over its campaigns' repeated runs
    (``repeated_rounds``, ``verdicts.pooled_between``), at its upper 80% bound: what a single
    run imports and what a campaign whose own runs fit a term of exactly 0 takes instead
    (``estimated``). None where no campaign has repeated runs here."""
    shared = verdicts.pooled_between(list(repeated.values())).upper()
    return shared if shared.source != "none" else None


def round_noise_on_this_cpu(con, on_cpu: dict, samples: pd.DataFrame) -> pd.DataFrame:
    """``round_noise`` of every run on this CPU model, in any campaign, over the arms this
    campaign measured (same configuration, framework and variant): the same arms timed under
    each protocol, to read a protocol change before and after (``on_cpu``: every campaign's
    samples on this CPU model, ``tables.samples_on_cpu``). ``protocol`` is "relay" where the
    run's records carry a relay reading (``fwbench.measure.relay``), else "interleaved"."""
    if samples.empty or "trials" not in samples:
        return pd.DataFrame()
    arms = samples[[*CONFIG, *SERIES]].drop_duplicates()
    frames = []
    for campaign, (_ids, theirs) in on_cpu.items():
        if theirs.empty or "trials" not in theirs:
            continue
        theirs = theirs.merge(arms, on=[*CONFIG, *SERIES])
        noise = round_noise(theirs)
        if noise.empty:
            continue
        relayed = {
            r
            for (r,) in con.execute(
                "select distinct run_id from measurements where campaign = ? "
                "and json_extract(extra, '$.relay') is not null",
                [campaign],
            ).fetchall()
        }
        noise.insert(0, "campaign", campaign)
        noise.insert(
            2, "protocol", ["relay" if r in relayed else "interleaved" for r in noise.run_id]
        )
        frames.append(noise)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def paired_detector(repeated: dict[str, pd.DataFrame]) -> dict:
    """The paired-ratio regression detector (``sequential``) scored on histories resampled from
    the run-to-run residuals of this CPU model's repeated series (``repeated_rounds``);
    empty where there are fewer than ``MIN_RESIDUALS``."""
    pool = _residuals_of(repeated.values())
    if len(pool) < MIN_RESIDUALS:
        return {}
    campaigns = sorted(c for c, r in repeated.items() if len(sequential.residual_pool(r)))
    return {"campaigns": campaigns, **sequential.evaluate(pool)}


def _residuals_of(series) -> np.ndarray:
    """Every run-to-run residual of a CPU model's repeated series (rounds frames)."""
    pools = [sequential.residual_pool(r) for r in series]
    return np.concatenate([p for p in pools if len(p)] or [np.array([])])


def paired_regressions(con, campaign: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """``sequential.paired_alerts`` over each campaign's best-mode comparisons (or one
    campaign's), a history per CPU model, the threshold simulated on that CPU model's residuals
    from every repeated series; with a line for each series too short or too quiet to judge."""
    environments = {}
    for (env,) in con.execute("select environment from runs order by run_id").fetchall():
        environment = parse_json(env)
        identity = cpu_identity(environment)
        if identity is not None:
            environments.setdefault(identity, environment)
    frames, notes = [], []
    for identity, environment in environments.items():
        cpu = "{} family {} model {}".format(*identity[:3])
        on_cpu = samples_on_cpu(con, environment)
        series = series_rounds(on_cpu)
        pool = _residuals_of(r for _, r in series)
        for name, rounds in series:
            if campaign not in (None, name):
                continue
            runs = rounds.run.nunique()
            if runs <= sequential.BASELINE_RUNS or len(pool) < MIN_RESIDUALS:
                notes.append(
                    f"{name} on {cpu}: {runs} runs and {len(pool)} residuals; a history needs "
                    f"{sequential.BASELINE_RUNS + 1} runs and {MIN_RESIDUALS} residuals"
                )
                continue
            alerts = sequential.paired_alerts(rounds, pool, sorted(rounds.run.unique()))
            frames.append(alerts.assign(campaign=name, cpu=cpu))
    columns = ["campaign", "cpu", *sequential.ALERT_COLUMNS]
    found = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return found.reindex(columns=columns), notes


def equivalence_reach(samples: pd.DataFrame, run_id: str, floor=None) -> dict:
    """Whether *equivalent* (``verdicts.EQUIVALENT_WORDS``) can be said at this campaign's design: the share of truly
    equal pairs called equivalent when simulated at the design and the variance components fitted
    on the pooled runs (``verdict_checks.equivalence_rate``), and the rounds per run that would
    reach the goal where it falls short. Empty without rounds from two or more runs."""
    rounds = best_rounds(samples, run_id) if not samples.empty else pd.DataFrame()
    if rounds.empty or rounds.run.nunique() < 2:
        return {}
    design = verdict_checks.design_of(rounds, floor)
    rate = verdict_checks.equivalence_rate(design, floor=floor)
    needed = (
        design.rounds
        if rate >= verdict_checks.EQUIVALENCE_GOAL
        else verdict_checks.rounds_for_equivalence(design, floor=floor)
    )
    return {"design": design.label(), "round_sd": design.round_sd, "rate": rate, "rounds": needed}
