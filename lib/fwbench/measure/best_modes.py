"""Each framework's best mode, chosen on a tuning run and read back by the verdict runs.

A tuning campaign (``params/tuning_cpu.yaml``) measures every candidate way to run each framework
(PyTorch's modes and memory formats; JAX's stock and expert layers under each declared XLA
option set, ``measure/compiler.py``) once, interleaved. ``select`` picks, per configuration (device,
precision, threads, model, image size, batch size) and framework, the candidate with the highest
median throughput; ``fwbench best-modes`` writes the picks to a selection file that is committed
before any verdict run reads it. A verdict cell in mode ``tuned`` (PyTorch) or ``jit-tuned`` (JAX)
looks its configuration up there (``choice``) and records the pick and the tuning run it came
from: the verdict's rounds never choose among modes (no winner's curse), and the tuning run's
own rounds never enter a verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fwbench import vocab

# the columns a choice is made per (one configuration, one framework)
KEY = ("device_name", "precision", "threads", "model", "image_size", "batch_size", "framework")
_FORMAT = 1


class NoChoice(LookupError):
    """The selection file holds no pick for a configuration a tuned cell asked about."""


def candidate(framework: str, mode: str, extra: dict) -> dict:
    """What a cell runs (a tuning record's ``extra``, or a cell's own ``channels_last``,
    ``dynamic_shapes`` and ``xla_options``), as a tuned cell would run it again. A graph compiled
    for any batch size says so; a static one, as every pick made before that choice existed, does
    not, so older selection files read the same."""
    if framework == "torch":
        choice = {"mode": mode, "channels_last": bool(extra.get("channels_last"))}
        if extra.get("dynamic_shapes") and mode != "eager":
            choice["dynamic_shapes"] = True
        return choice
    ran = extra.get("ran") or {}
    return {
        "layers": vocab.twin_layers(mode),
        "xla_options": ran.get("xla_options") or extra.get("xla_options") or "default",
    }


def candidate_name(framework: str, choice: dict) -> str:
    """A candidate in words as tables show it: "compile-freeze+channels_last", "compile+dynamic",
    "expert+ynn-off"."""
    if framework == "torch":
        return (
            choice["mode"]
            + ("+channels_last" if choice.get("channels_last") else "")
            + ("+dynamic" if choice.get("dynamic_shapes") else "")
        )
    return f"{choice['layers']}+{choice['xla_options']}"


def candidates(meas: pd.DataFrame) -> pd.DataFrame:
    """The tuning run's candidates: one row per configuration, framework and candidate, with its
    median throughput over the run's trials, and ``chosen`` marking each configuration's best."""
    rows = meas[
        (meas.family == "inference")
        & (meas.metric == "throughput_img_s")
        & (meas.status == "ok")
        & meas.value.notna()
        & ~meas["mode"].isin((*vocab.TORCH_GRAPH_MODES, *vocab.TUNED_MODES))
    ]
    if rows.empty:
        return pd.DataFrame(columns=[*KEY, "candidate", "choice", "img_s", "chosen"])
    out = []
    for row in rows.itertuples(index=False):
        extra = row.extra if isinstance(row.extra, dict) else json.loads(row.extra or "{}")
        choice = candidate(row.framework, row.mode, extra)
        out.append(
            {
                **{
                    k: getattr(row, k) if k != "image_size" else extra.get("image_size")
                    for k in KEY
                },
                "candidate": candidate_name(row.framework, choice),
                "choice": json.dumps(choice, sort_keys=True),
                "img_s": row.value,
            }
        )
    table = (
        pd.DataFrame(out)
        .groupby([*KEY, "candidate", "choice"], dropna=False, as_index=False)
        .img_s.median()
    )
    # fastest first in each configuration; a tie keeps the first candidate by name, so a
    # selection never depends on row order
    table = table.sort_values(
        [*KEY, "img_s", "candidate"], ascending=[True] * len(KEY) + [False, True]
    )
    table["chosen"] = ~table.duplicated(list(KEY))
    return table.reset_index(drop=True)


def select(meas: pd.DataFrame, *, campaign: str, run_id: str) -> dict:
    """The selection file's content: the tuning run it reads and one pick per configuration and
    framework, each with the runner-up's throughput so a reader sees the margin."""
    table = candidates(meas)
    picks = []
    for key, ranked in table.groupby(list(KEY), dropna=False, sort=True):
        best = ranked.iloc[0]  # ``candidates`` ranks each configuration's fastest first
        runner = ranked.iloc[1] if len(ranked) > 1 else None
        picks.append(
            {
                **{k: _plain(v) for k, v in zip(KEY, key, strict=True)},
                "choice": json.loads(best.choice),
                "candidate": best.candidate,
                "img_s": round(float(best.img_s), 3),
                "runner_up": None if runner is None else runner.candidate,
                "runner_up_img_s": None if runner is None else round(float(runner.img_s), 3),
                "candidates": int(len(ranked)),
                # the run it came from: a file holds several runs' picks
                "tuning_run": {"campaign": campaign, "run_id": run_id},
            }
        )
    return {"format": _FORMAT, "tuning": [{"campaign": campaign, "run_id": run_id}], "picks": picks}


def merge(existing: dict | None, new: dict) -> dict:
    """``new``'s picks over ``existing``'s: a file can hold several CPUs' tuning runs, and a
    configuration tuned again takes the newer pick."""
    if not existing:
        return new
    keyed = {_key_of(p): p for p in existing.get("picks", [])}
    keyed.update({_key_of(p): p for p in new["picks"]})
    runs = [r for r in existing.get("tuning", []) if r not in new["tuning"]] + new["tuning"]
    picks = [keyed[k] for k in sorted(keyed, key=lambda k: tuple(map(str, k)))]
    return {"format": _FORMAT, "tuning": runs, "picks": picks}


def _locate(path: str | Path) -> Path:
    """The selection file ``path`` names: as given, else relative to a folder above this one (a
    campaign names it from the repository's root, while its kernels run in ``notebooks/``)."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    for parent in Path.cwd().parents:
        if (parent / given).exists():
            return parent / given
    raise FileNotFoundError(f"no selection file {path} in {Path.cwd()} or a folder above it")


def read(path: str | Path) -> dict:
    path = _locate(path)
    data = json.loads(path.read_text())
    if data.get("format") != _FORMAT or "picks" not in data:
        raise ValueError(f"{path} is not a best-modes selection file (format {_FORMAT})")
    return data


def choice(selection: dict, **configuration) -> dict:
    """The pick for one configuration (the ``KEY`` columns as keywords): its ``choice`` and the
    tuning run behind it. ``NoChoice`` names what is missing and how to make it."""
    wanted = _key_of(configuration)
    for pick in selection["picks"]:
        if _key_of(pick) == wanted:
            return pick
    where = ", ".join(f"{k}={configuration[k]}" for k in KEY)
    raise NoChoice(
        f"the selection file has no tuned pick for {where}: run a tuning campaign on this "
        "device (params/tuning_cpu.yaml), then `fwbench best-modes CAMPAIGN --out FILE`"
    )


def _key_of(mapping: dict) -> tuple:
    return tuple(_plain(mapping.get(k)) for k in KEY)


def _plain(value):
    """JSON's and pandas' numbers alike: 8, 8.0 and numpy's 8 are one key."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
