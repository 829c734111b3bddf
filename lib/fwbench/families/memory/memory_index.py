"""Every memory campaign's cells in one table, read from the reports already built.

Each campaign's report (``fwbench report CAMPAIGN``) holds its memory-time curve in
``tables/memory_curve.csv``; a cell (model, batch size, CPU and settings) can appear in several
campaigns, each answering another question (memory_timecheck reruns a memory_batches cell with
more interleaved rounds). This index puts them side by side with the verdicts each report's
sentences give: the point that decides the μ-TWO plan's and ``torch.utils.checkpoint``'s verdict on
the activation goal (50% saved within +33% time, by the overhead's interval over trials), the
simulator's peak bar and its time bar over trials, and the float64 proof. It computes nothing the
reports do not: the verdicts come from ``memory_curve``, the same functions the reports use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from fwbench.families.memory import memory_curve, memory_curve_words
from fwbench.report.blocks import rewrite_block
from fwbench.report.sections import TABLES_DIR
from fwbench.vocab import MEMORY_OVERHEAD_GOAL_PCT as OVERHEAD_GOAL_PCT
from fwbench.vocab import MEMORY_SIM_ERROR_BAR_PCT as SIM_BAR_PCT

CURVE_CSV = "memory_curve.csv"
COLUMNS = [
    "model",
    "batch_size",
    "report",
    "run_id",
    "device_name",
    "variant",
    "trials",
    "ours",
    "checkpoint",
    "jax_remat",
    "peak_error_pct",
    "time_bar",
    "time_worst",
    "float64_max_abs_diff",
]


_BLOCK = "memory_index"  # the README's marker name: <!-- results:memory_index:start -->


class MemoryIndexError(ValueError):
    """A report folder that cannot be indexed, or none to index: one line for the user."""


def _goal_words(point: tuple[object, str]) -> str:
    """The point that decides a kind's verdict on the activation goal and the verdict (with its
    Holm-adjusted p where it was chosen among several points), as the
    report's sentence has it (``memory_curve.goal_points``), with the floor's label where the
    point's peak is Adam's."""
    best, verdict = point
    if best is None:
        return verdict
    floor = f"; {memory_curve.FLOOR_WORDS}" if memory_curve.is_on_floor(best) else ""
    among = best.get("points", 0)
    if among > 1 and pd.notna(best.get("p_holm")):
        verdict += f", Holm p {best.p_holm:.3g} of {among:.0f}"
    return (
        f"{best.activation_saved_pct:.1f}% at {memory_curve_words.overhead_words(best)} "
        f"({best.method}; {verdict}{floor})"
    )


def _worst_interval(timed: pd.DataFrame) -> str:
    """The time error over trials whose 95% interval reaches farthest from zero, the graph that
    decides the bar, or why there is none."""
    if timed.empty:
        return "no quiet trial"
    widest = memory_curve_words.widest_time_interval(timed)
    if widest is None:
        trials = int(timed.quiet_time_trials.min())
        where = "its one trial" if trials == 1 else f"the worst of {trials} or more trials"
        return f"{timed.sim_time_worst_pct.max():.1f}% in {where}: no interval"
    return memory_curve_words.interval_words(widest)


def _settings(slug: str) -> dict[str, str]:
    """A cell's slug (``batch_sizes=4-8__seq_len=128``) as its settings."""
    return dict(part.split("=", 1) for part in slug.split("__") if "=" in part)


def _short_names(variants: pd.Series) -> pd.Series:
    """Each cell's settings that differ from another's of the same model: the report names a
    cell by its whole slug, which repeats what every cell of a campaign shares."""
    settings = {v: _settings(v) for v in variants.unique()}
    keys = sorted({k for s in settings.values() for k in s})
    differ = [k for k in keys if len({s.get(k) for s in settings.values()}) > 1]
    return variants.map(
        lambda v: ", ".join(f"{k}={settings[v][k]}" for k in differ if k in settings[v])
    )


def cell_rows(table: pd.DataFrame, report: str, run_id: str) -> list[dict]:
    """One row per cell of one report's curve table (``memory_curve.curve_table``'s frame)."""
    rows = []
    # a campaign of one cell has no variant: the column reads back from CSV as all NaN
    variants = [v if isinstance(v, str) else "" for v in table.variant]
    table = table.assign(variant=variants, measured=table.measured.astype(bool))
    # as in the report, a cell is named by its settings only beside another of its model
    named = memory_curve.shares_a_model(table)
    short = table.variant.copy()
    for _, same in table[named].groupby(memory_curve.KEYS[:-1]):
        short[same.index] = _short_names(same.variant)
    for (model, batch, device, _), group in table.groupby(memory_curve.KEYS, sort=True):
        bars = memory_curve_words.simulator_bars(group)
        points = memory_curve.goal_points(
            group, (*memory_curve.GOAL_KINDS, memory_curve.JAX_GOAL_KIND)
        )
        measured = group[group.measured]
        rows.append(
            {
                "model": model,
                "batch_size": int(batch),
                "report": report,
                "run_id": run_id,
                "device_name": device,
                "variant": short[group.index[0]] if named[group.index].any() else "",
                "trials": int(measured.trials.max()) if not measured.empty else 0,
                "ours": _goal_words(points["mu_two"]),
                "checkpoint": _goal_words(points["checkpoint"]),
                "jax_remat": _goal_words(points[memory_curve.JAX_GOAL_KIND]),
                "peak_error_pct": bars.get("worst_peak_pct"),
                "time_bar": bars.get("time_within", "no plan"),
                "time_worst": _worst_interval(bars["timed"]) if bars else "no plan",
                "float64_max_abs_diff": bars.get("exact_max_abs_diff"),
            }
        )
    return rows


def index_table(report_root: Path) -> pd.DataFrame:
    """Every report under ``report_root`` with a memory curve, one row per cell, ordered by
    model, batch size and report. A report folder without content.json is bad input."""
    rows = []
    for csv in sorted(Path(report_root).glob(f"*/{TABLES_DIR}/{CURVE_CSV}")):
        folder = csv.parent.parent
        try:
            content = json.loads((folder / "content.json").read_text())
        except (OSError, ValueError) as err:
            raise MemoryIndexError(f"{folder}: no readable content.json ({err})") from None
        table = pd.read_csv(csv)
        if table.empty:
            continue
        rows += cell_rows(table, folder.name, content.get("run_id", ""))
    if not rows:
        raise MemoryIndexError(
            f"no report under {report_root} has a memory curve: build one first with "
            "`fwbench report CAMPAIGN` for a campaign that ran 12_memory"
        )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.sort_values(["model", "batch_size", "report"], kind="stable", ignore_index=True)


def markdown(frame: pd.DataFrame, link_root: str = "report") -> str:
    """The index as a markdown table; each report's name links to its report.md."""
    words = memory_curve.MODEL_WORDS
    header = [
        "model",
        "batch",
        "report (run)",
        "CPU",
        "trials",
        f"μ-TWO plan: activations saved, time, goal (within +{OVERHEAD_GOAL_PCT:g}%)",
        "torch.utils.checkpoint: the same",
        "jax.checkpoint on the same segments (JAX): the same",
        "peak error",
        f"time within {SIM_BAR_PCT:g}%",
        "time error over trials, reaching farthest",
        "float64",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in frame.itertuples():
        name = f"[{r.report}]({link_root}/{r.report}/report.md) ({r.run_id})"
        if r.variant:
            name += f", {r.variant}"
        peak = "" if pd.isna(r.peak_error_pct) else f"{r.peak_error_pct:.2f}%"
        exact = "" if pd.isna(r.float64_max_abs_diff) else f"{r.float64_max_abs_diff:.1e}"
        cells = [
            words.get(r.model, r.model),
            str(r.batch_size),
            name,
            r.device_name,
            str(r.trials),
            r.ours,
            r.checkpoint,
            r.jax_remat,
            peak,
            r.time_bar,
            r.time_worst,
            exact,
        ]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def block(report_root: Path, readme_dir: Path) -> str:
    """The README block: where it comes from, then the table, linked from ``readme_dir``."""
    root = Path(os.path.relpath(report_root, readme_dir)).as_posix()
    return "\n\n".join(
        [
            f"<!-- Written by `fwbench memory-index --readme` from {root}/*/{TABLES_DIR}/"
            f"{CURVE_CSV}; rebuild the reports and run it again instead of editing. -->",
            markdown(index_table(report_root), root),
        ]
    )


def update_readme(readme: Path, report_root: Path) -> bool:
    """Rewrite ``readme``'s memory_index block from the reports; True if it changed."""
    return rewrite_block(readme, _BLOCK, lambda: block(report_root, Path(readme).parent))
