"""The frozen test set predicted before it is measured, then scored once.

``fwbench freeze-test --predict`` writes the set's predictions for this machine beside its campaign
(``frozen_test.predictions.csv``), and refuses while the index holds any measurement of the set's
models: a prediction made after a look at the answer is not a test. The commit that adds that
file comes before the run that measures the set. ``fwbench freeze-test --score`` reads the set's
newest run in the index, scores the committed predictions against it and writes the score beside
them (``frozen_test.score.json``), once: a second scoring is refused, so that a test figure is never
one the predictor was tuned on. A later predictor change is validated on the hold-outs, and a new
set is drawn to test it again.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fwbench import vocab
from fwbench.families.prediction import dataset, forecast, predictor, ratio
from fwbench.measure import comparison
from fwbench.models.lineage import lineage

# what identifies a prediction and the measurement it is scored against
KEYS = ["model", "framework", "mode", "precision", "batch_size", "threads", "image_size"]
# the goals a test figure is held to: MAPE a bound on the errors, the share within ±20% and the
# correct winner's share of decided pairs floors, and the 90% intervals' coverage a band
TEST_GOALS = {
    "mape_pct": 15.0,
    "within_20pct": 80.0,
    "correct_winner_pct": 90.0,
    "coverage_pct": (85.0, 95.0),
}


# the score's figures as 21_prediction records them (the prediction family's metric names)
RECORDED = {
    "mape_pct": "mape_pct",
    "median_pct": "median_pct",
    "within_15pct": "within_15pct",
    "within_20pct": "within_20pct",
    "worst_pct": "worst_pct",
    "coverage_pct": "interval_coverage_pct",
    "correct_winner_pct": "correct_winner_rate",
}


def goal_table(summary: dict) -> pd.DataFrame:
    """The score's figures against ``TEST_GOALS``: figure, value, goal, met."""
    rows = []
    for metric, goal in TEST_GOALS.items():
        value = summary.get(metric)
        bound = f"{goal[0]:g}-{goal[1]:g}%" if isinstance(goal, tuple) else f"{goal:g}%"
        sign = "" if isinstance(goal, tuple) else ("≤ " if metric == "mape_pct" else "≥ ")
        met = summary.get("met", {}).get(metric)
        rows.append({"figure": metric, "value": value, "goal": sign + bound, "met": met})
    for metric in ("median_pct", "within_15pct", "worst_pct", "direct_correct_winner_pct",
                   "direct_ratio_mape_pct", "direct_ratio_coverage_pct"):  # fmt: skip
        if summary.get(metric) is not None:
            rows.append({"figure": metric, "value": summary[metric], "goal": "", "met": None})
    return pd.DataFrame(rows)


def paths(campaign: Path) -> tuple[Path, Path]:
    """The predictions file and the score file of the set whose campaign file is ``campaign``."""
    return campaign.with_suffix(".predictions.csv"), campaign.with_suffix(".score.json")


def configurations(cells) -> pd.DataFrame:
    """One row per configuration the campaign's inference cells measure (``KEYS``), from the
    expanded cells (``Campaign.cells``): trials and A/A copies measure the same configuration."""
    rows = []
    for cell in cells:
        p = cell.parameters
        if cell.notebook != "10_inference" or cell.aa_copy:
            continue
        for batch in p.get("batch_sizes") or []:
            rows.append(
                {
                    "model": p["model"],
                    "framework": p["framework"],
                    "mode": vocab.resolve_mode(p["framework"], p.get("mode", "default")),
                    "precision": p.get("precision", "fp32"),
                    "batch_size": int(batch),
                    "threads": int(p["threads"]),
                    "image_size": int(p["image_size"]),
                }
            )
    return pd.DataFrame(rows, columns=KEYS).drop_duplicates(ignore_index=True)


def predict_set(table: pd.DataFrame, configs: pd.DataFrame, ceiling: pd.Series) -> pd.DataFrame:
    """Each configuration's predicted seconds per call with its interval on the machine of
    ``ceiling``, from predictors fitted on ``table`` (which holds none of the set's models)."""
    if set(configs.model) & set(table.model):
        raise ValueError("the training table holds a model of the frozen set")
    requests = []
    for config in configs.itertuples(index=False):
        request = forecast.Request(
            **config._asdict(), device="cpu", device_name=ceiling["device_name"]
        )
        requests.append(forecast.request_row(request, ceiling))
    rows = pd.concat(requests, ignore_index=True)
    found = forecast.predict_rows(forecast.fit_targets(table), rows)
    out = configs.copy()
    out["device_name"] = ceiling["device_name"]
    out["predicted_s"] = rows.batch_size / found.throughput_img_s
    out["low_s"] = rows.batch_size / found.throughput_high
    out["high_s"] = rows.batch_size / found.throughput_low
    out["coverage"] = predictor.COVERAGE
    # each JAX row's ratio over PyTorch eager's, predicted directly (``ratio``), with its interval
    pairs = ratio.pairs(table)
    jax = (rows.framework == "jax").to_numpy()
    for column in ("direct_ratio", "direct_ratio_low", "direct_ratio_high"):
        out[column] = np.nan
    if jax.any() and pairs.model.map(lineage).nunique() >= 2:
        found = ratio.fit(pairs.reset_index(drop=True)).predict(rows[jax])
        out.loc[jax, "direct_ratio"] = found.ratio.to_numpy()
        out.loc[jax, "direct_ratio_low"] = found.low.to_numpy()
        out.loc[jax, "direct_ratio_high"] = found.high.to_numpy()
    return out


def with_kernel_predictions(out: pd.DataFrame, kernel: pd.DataFrame) -> pd.DataFrame:
    """The set's predictions (``predict_set``'s) with the kernel-level predictor's
    (``kernel_model.predict_from_index``'s) where it covers a setting: ``predicted_s``, ``low_s``
    and ``high_s`` are the kernel-level ones there (``predictor`` "kernels") and the op-category
    predictor's elsewhere ("op categories"), which also stay beside them as ``category_*``."""
    out = out.assign(
        category_predicted_s=out.predicted_s,
        category_low_s=out.low_s,
        category_high_s=out.high_s,
        predictor="op categories",
    )
    if kernel.empty:
        return out
    key = ["model", "framework", "mode", "precision", "batch_size", "image_size", "threads"]
    priced = kernel[[*key, "predicted_s", "low_s", "high_s"]].rename(
        columns={"predicted_s": "k_point", "low_s": "k_low", "high_s": "k_high"}
    )
    merged = out.merge(priced, on=key, how="left")
    has = merged.k_point.notna().to_numpy()
    for mine, theirs in (("predicted_s", "k_point"), ("low_s", "k_low"), ("high_s", "k_high")):
        merged.loc[has, mine] = merged.loc[has, theirs]
    merged.loc[has, "predictor"] = "kernels"
    return merged.drop(columns=["k_point", "k_low", "k_high"])


def scored_pairs(scored: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's JAX row against its PyTorch row: the measured ratio of seconds, whether
    the paired trials decide it, and the predicted ratio."""
    key = [k for k in KEYS if k not in ("framework", "mode")]
    found = comparison.pair_rows(
        scored, key, comparison.framework_is("jax"), comparison.framework_is("torch")
    ).drop_duplicates(key)
    rows = []
    for pair in found.itertuples(index=False):
        j, t = scored.loc[pair.jax_index], scored.loc[pair.torch_index]
        measured, predicted = j.seconds / t.seconds, j.predicted_s / t.predicted_s
        direct = j.get("direct_ratio", np.nan)
        rows.append(
            {
                **{k: getattr(pair, k) for k in key},
                "measured_ratio": measured,
                "predicted_ratio": predicted,
                "direct_ratio": direct,
                "decided": comparison.decided(t.trial_img_s, j.trial_img_s),
                "correct": bool((measured < 1) == (predicted < 1)),
                "direct_correct": bool((measured < 1) == (direct < 1)),
                "direct_inside": bool(
                    j.get("direct_ratio_low", np.nan)
                    <= measured
                    <= j.get("direct_ratio_high", np.nan)
                ),
            }
        )
    return pd.DataFrame(rows)


def score(predictions: pd.DataFrame, measured: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The predictions against one run's measurements (``dataset.measured``'s rows of that run):
    per configuration, and in sum (MAPE, median, the shares within ±15% and ±20%, the intervals'
    coverage, the correct winner on decided pairs), each goal of ``TEST_GOALS`` met or not
    (None where there is nothing to judge it on)."""
    on = [*KEYS, "device_name"]
    scored = predictions.merge(measured[[*on, "seconds", "trial_img_s"]], on=on, how="left")
    done = scored.dropna(subset=["seconds", "predicted_s"]).copy()
    done["error_pct"] = predictor.abs_error_pct(done.seconds, done.predicted_s)
    done["inside"] = (done.seconds >= done.low_s) & (done.seconds <= done.high_s)
    pairs = scored_pairs(done) if len(done) else pd.DataFrame()
    decided = pairs[pairs.decided] if len(pairs) else pairs

    def share(mask) -> float | None:
        return float(np.mean(mask) * 100) if len(mask) else None

    summary = {
        "predicted": int(len(predictions)),
        "measured": int(len(done)),
        "unmeasured": int(len(scored) - len(done)),
        "mape_pct": float(done.error_pct.mean()) if len(done) else None,
        "median_pct": float(done.error_pct.median()) if len(done) else None,
        "within_15pct": share(done.error_pct <= 15),
        "within_20pct": share(done.error_pct <= 20),
        "worst_pct": float(done.error_pct.max()) if len(done) else None,
        "coverage_pct": share(done.inside),
        "decided_pairs": int(len(decided)),
        "correct_winner_pct": share(decided.correct) if len(decided) else None,
    }
    # the ratio predicted directly, where the predictions hold it (written before it existed,
    # a file has no such column)
    direct = pairs[pairs.direct_ratio.notna()] if len(pairs) else pairs
    if len(direct):
        error = predictor.abs_error_pct(direct.measured_ratio, direct.direct_ratio)
        summary["direct_ratio_mape_pct"] = float(error.mean())
        summary["direct_ratio_coverage_pct"] = share(direct.direct_inside)
        chosen = direct[direct.decided]
        summary["direct_correct_winner_pct"] = share(chosen.direct_correct) if len(chosen) else None
    # a set predicted by two predictors says how each did on its own rows, and how the op-category
    # predictor did on all of them
    if "category_predicted_s" in done:
        summary["by_predictor"] = {
            str(name): predictor.errors(rows.seconds, rows.predicted_s)
            for name, rows in done.groupby("predictor")
        }
        summary["category_mape_pct"] = float(
            predictor.abs_error_pct(done.seconds, done.category_predicted_s).mean()
        )
    low, high = TEST_GOALS["coverage_pct"]
    summary["met"] = {
        "mape_pct": _bound(summary["mape_pct"], lambda v: v <= TEST_GOALS["mape_pct"]),
        "within_20pct": _bound(summary["within_20pct"], lambda v: v >= TEST_GOALS["within_20pct"]),
        "correct_winner_pct": _bound(
            summary["correct_winner_pct"], lambda v: v >= TEST_GOALS["correct_winner_pct"]
        ),
        "coverage_pct": _bound(summary["coverage_pct"], lambda v: low <= v <= high),
    }
    return done.drop(columns=["trial_img_s"]), summary


def error_by_kind(rows: pd.DataFrame) -> pd.DataFrame:
    """Which kernel kinds carry a kernel-level test's error. ``rows`` are scored rows (``seconds``,
    ``predicted_s``) with ``share:<kind>`` columns (``kernel_model.shares_from_index``). Per kind:
    its mean share of the predicted time; its share of the summed absolute error, each row's
    error split among its kinds by their shares (a kind carrying more error than time is priced
    worse than the rest); the rows where it holds the largest share, with their MAPE and median
    signed error (predicted ÷ measured − 1, in percent: below 0, predicted too fast)."""
    columns = [c for c in rows.columns if c.startswith("share:")]
    shares = rows[columns].to_numpy(float)
    signed = (rows.predicted_s / rows.seconds - 1.0).to_numpy(float) * 100
    error = np.abs(signed)
    carried = (shares * error[:, None]).sum(axis=0) / error.sum() * 100
    leading = shares.argmax(axis=1)
    out = []
    for i, column in enumerate(columns):
        led = leading == i
        out.append(
            {
                "kind": column.removeprefix("share:"),
                "time_share_pct": float(shares[:, i].mean() * 100),
                "error_carried_pct": float(carried[i]),
                "rows_led": int(led.sum()),
                "mape_pct": float(error[led].mean()) if led.any() else math.nan,
                "median_signed_pct": float(np.median(signed[led])) if led.any() else math.nan,
            }
        )
    return pd.DataFrame(out)


def _bound(value: float | None, holds) -> bool | None:
    return None if value is None or math.isnan(value) else bool(holds(value))


def newest_run(measured: pd.DataFrame, campaign: str) -> pd.DataFrame:
    """The rows of ``campaign``'s newest run (run ids sort by time); empty where it has none."""
    rows = measured[measured.campaign == campaign]
    return rows[rows.run_id == rows.run_id.max()] if len(rows) else rows


def write_score(path: Path, summary: dict, run_id: str, predictions: Path) -> None:
    """The score, with what it scored: written once, beside the predictions."""
    record = {"run_id": run_id, "predictions": predictions.name, "times_scored": 1, **summary}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def measured_rows(db_path: Path) -> pd.DataFrame:
    """Every measured configuration in the index (``dataset.measured``)."""
    from fwbench.results import db

    con = db.connect(db_path, read_only=True)
    try:
        return dataset.measured(con)
    finally:
        con.close()
