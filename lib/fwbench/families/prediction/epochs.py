"""Training time per epoch, forecast from the inference predictor and held against a stopwatch.

A training step does a forward, a backward about twice its cost and an optimizer update, so its
time is a multiple of the forward's. The forward is what the inference predictor forecasts (for
any model, at the step's batch size, image size, threads and precision, from shapes alone); the
multiple is learned from the training steps the index holds (11_training's `step_time_p50_ms`),
as the measured step over the forecast forward of the same configuration, per framework, its
geometric mean over other models' rows. An epoch is then the steps of one pass (full batches of
the dataset) times that step:

    epoch = steps x multiple x forward

The multiple absorbs whatever the forecast forward misses consistently on a kind of step (a small
image, a framework's backward), which is why it is fitted on forecasts made the same way as the
one it corrects: each forward by a predictor that never saw that model (leave one model out).
The check (``epoch_errors``) holds out the measured epoch's model from both: the inference fit and
the multiple. A measured epoch is 11_training's `epoch_seconds` (``timed_epochs``): fetching,
placing and stepping every batch of one pass, one sync at its end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fwbench.families.prediction import dataset, predictor

# a training precision runs its matmuls at this inference precision's ceiling
_CEILING_PRECISION = {"fp32": "fp32", "tf32": "tf32", "bf16-mixed": "bf16"}
_STEPS_NAME = "training_steps.csv"
_STEPS_GLOB = f"prediction/*/21_prediction/{_STEPS_NAME}"
_STEP_KEY = dataset.CONFIG  # a training configuration is named as an inference one

_TRAINING_SQL = """
select m.campaign, m.run_id, m.trial, m.model, m.framework, m.mode, m.precision, m.batch_size,
       m.threads, m.device, m.device_name, m.metric, m.value, m.extra,
       coalesce(c.shared_machine, false) as shared
from measurements m
left join cells c on c.campaign = m.campaign and c.run_id = m.run_id and c.notebook = m.notebook
     and c.cell = m.cell and coalesce(c.trial, 0) = coalesce(m.trial, 0)
where m.family = 'training' and m.status = 'ok' and m.value > 0
  and m.metric in ('step_time_p50_ms', 'epoch_seconds')
"""


def _trials(con) -> pd.DataFrame:
    frame = dataset.trial_rows(con, _TRAINING_SQL)
    frame = frame.assign(
        images=[e.get("images") for e in frame.extra], steps=[e.get("steps") for e in frame.extra]
    )
    return frame[frame.precision.isin(list(_CEILING_PRECISION))]


def measured(con) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The index's training steps and epochs, one row per configuration and run: ``steps`` with
    ``step_s`` (the median over clean trials of the step's p50) and ``epochs`` with
    ``epoch_s`` (the median over clean trials of each trial's median pass), ``steps`` and
    ``images`` per pass, and ``n_trials``."""
    trials = _trials(con)
    found = {"step_time_p50_ms": [], "epoch_seconds": []}
    for key, group in trials.groupby(["campaign", "run_id", *_STEP_KEY, "metric"], sort=True):
        rows = dataset.clean_trials(group)
        record = dict(zip(["campaign", "run_id", *_STEP_KEY], key[:-1], strict=True))
        record["n_trials"] = int(rows.trial.nunique())
        if key[-1] == "step_time_p50_ms":
            record["step_s"] = float(np.median(rows.value)) / 1000
        else:
            record["epoch_s"] = float(np.median(rows.value))
            record["steps"] = int(rows.steps.iloc[0])
            record["images"] = int(rows.images.iloc[0])
            record["trial_epoch_s"] = {
                int(t): float(v) for t, v in zip(rows.trial, rows.value, strict=True)
            }
        found[key[-1]].append(record)
    base = ["campaign", "run_id", *_STEP_KEY, "n_trials"]
    steps = pd.DataFrame(found["step_time_p50_ms"], columns=[*base, "step_s"])
    epochs = pd.DataFrame(
        found["epoch_seconds"], columns=[*base, "epoch_s", "steps", "images", "trial_epoch_s"]
    )
    return steps, epochs


def with_features(frame: pd.DataFrame, ceiling: pd.DataFrame, progress=None) -> pd.DataFrame:
    """``frame``'s rows (training configurations) as the inference predictor reads them: the
    features of the model at the row's batch and image size, and the ceilings of its hardware at
    the precision its matmuls run in. Rows without a ceiling are dropped."""
    if frame.empty:
        return frame
    as_inference = frame.assign(
        training_precision=frame.precision, precision=frame.precision.map(_CEILING_PRECISION)
    )
    feats = dataset.feature_rows(as_inference, progress)
    return dataset.with_features(as_inference, feats, ceiling)


def fits_without(table: pd.DataFrame, models, *, seed: int = 0) -> dict:
    """For each of ``models``, the predictor fitted on ``table`` (the inference training table)
    without it; None where fewer than two models remain, since a fit needs two. The steps and the
    epochs of one model share its fit."""
    out = {}
    for model in sorted(set(models)):
        others = table[table.model != model]
        out[model] = predictor.fit(others, seed=seed) if others.model.nunique() >= 2 else None
    return out


def with_forward(
    table: pd.DataFrame, steps: pd.DataFrame, *, seed: int = 0, fits: dict | None = None
) -> pd.DataFrame:
    """``steps`` (with features) with ``forward_s``: each row's forward forecast by a predictor
    fitted on ``table`` without that row's model (``fits``, from ``fits_without``; made here when
    not given). A row whose model has no such fit teaches nothing (NaN)."""
    fits = fits_without(table, steps.model, seed=seed) if fits is None else fits
    out = pd.Series(np.nan, index=steps.index)
    for model, group in steps.groupby("model"):
        if fits[model] is not None:
            out[group.index] = fits[model].predict(group).seconds
    return steps.assign(forward_s=out)


def save_steps(steps: pd.DataFrame, folder: Path) -> Path:
    path = Path(folder) / _STEPS_NAME
    steps[[*_STEP_KEY, "run_id", "n_trials", "step_s", "forward_s"]].to_csv(path, index=False)
    return path


def latest_steps(executed: Path) -> pd.DataFrame | None:
    """The training steps, with their forecast forwards, that the newest 21_prediction run
    saved under ``executed``; None when no run saved any."""
    found = sorted(Path(executed).glob(_STEPS_GLOB))
    return pd.read_csv(found[-1]) if found else None


def multiples(steps: pd.DataFrame) -> pd.Series:
    """Each measured step over its forecast forward (``steps`` with ``step_s`` and
    ``forward_s``): the training multiple one row teaches."""
    return steps.step_s / steps.forward_s


def multiple_for(steps: pd.DataFrame, framework: str, model: str) -> tuple[float, float, int]:
    """The training multiple for ``framework`` learned without ``model``: the geometric mean of
    the other models' rows, the largest distance of one of them from it in log space (the
    spread the interval adds), and how many rows it came from; NaN where there are none."""
    rows = steps[(steps.framework == framework) & (steps.model != model)]
    rows = rows[np.isfinite(rows.forward_s)]
    if rows.empty:
        return float("nan"), float("nan"), 0
    logs = np.log(multiples(rows).to_numpy())
    centre = float(logs.mean())
    return float(np.exp(centre)), float(np.abs(logs - centre).max()), int(len(rows))


def forecast_epoch(
    forward_s: float, forward_half_width: float, multiple: tuple[float, float, int], steps: int
) -> dict:
    """An epoch of ``steps`` steps: the forecast and an interval whose log half-width adds the
    forward's conformal half-width and the multiple's spread (each a bound of its own source)."""
    factor, spread, _ = multiple
    seconds = steps * factor * forward_s
    half = forward_half_width + spread
    return {"epoch_s": seconds, "low": seconds * np.exp(-half), "high": seconds * np.exp(half)}


def epoch_errors(
    table: pd.DataFrame,
    steps: pd.DataFrame,
    epochs: pd.DataFrame,
    *,
    seed: int = 0,
    fits: dict | None = None,
) -> pd.DataFrame:
    """Each measured epoch (``epochs``, with features) against its forecast from what never saw
    its model: the inference predictor fitted without it (``fits``, as in ``with_forward``), the
    multiple learned from the other models' ``steps`` (``with_forward``'s rows). Adds
    ``forward_s``, ``multiple``, ``multiple_rows``, ``predicted_s``, ``low``, ``high`` and
    ``error_pct``; ``steps_times_step_s`` is the pass's
    steps times the same run's measured step, where one was measured, to show what an epoch adds
    to its steps."""
    if epochs.empty:
        return epochs.assign(
            multiple_rows=pd.Series(dtype=int),
            predicted_s=pd.Series(dtype=float),
            error_pct=pd.Series(dtype=float),
        )
    fits = fits_without(table, epochs.model, seed=seed) if fits is None else fits
    rows = []
    for model, group in epochs.groupby("model"):
        fitted = fits[model]
        if fitted is None:
            continue
        forward = fitted.predict(group).seconds
        for index, row in group.iterrows():
            learned = multiple_for(steps, row.framework, model)
            found = forecast_epoch(forward[index], fitted.half_width, learned, int(row.steps))
            same = steps[
                (steps.run_id == row.run_id) & (steps[_STEP_KEY] == row[_STEP_KEY]).all(axis=1)
            ]
            rows.append(
                {
                    **row.to_dict(),
                    "forward_s": float(forward[index]),
                    "multiple": learned[0],
                    "multiple_rows": learned[2],
                    "predicted_s": found["epoch_s"],
                    "low": found["low"],
                    "high": found["high"],
                    "steps_times_step_s": (
                        float(same.step_s.iloc[0]) * row.steps if len(same) else np.nan
                    ),
                }
            )
    if not rows:
        return epoch_errors(table, steps, epochs.iloc[:0], fits=fits)
    out = pd.DataFrame(rows)
    return out.assign(error_pct=(out.predicted_s / out.epoch_s - 1) * 100)
