"""``fwbench results-index``: one page that lists every built report, ``report/index.md``/.html.

A reader who lands in ``report/`` finds a folder per report and no way to tell which answers their
question. This page has one row per report: the campaign and run it reads, when and on what
hardware the run was made, the design behind its ratios, and its first telling sentence, linking
to the report. Below it, the memory index (every memory campaign's cells side by
side) where memory reports exist. It is written from the reports already built, computes nothing
they do not, and rewriting it from the same reports changes nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from fwbench.families.memory import memory_index
from fwbench.publish.render import html_report
from fwbench.report import sections
from fwbench.results import layout
from fwbench.results.layout import write_text_atomic

_INDEX_NAME = "index"
_RUN_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})T")


class ResultsIndexError(ValueError):
    """No report to list, or a folder that is not one: one line for the user."""


def _hardware(manifest_path: Path) -> str:
    """The run's CPU (with family and model where recorded) and GPUs, from its manifest."""
    if not manifest_path.is_file():
        return "not recorded (its executed notebooks are elsewhere)"
    env = json.loads(manifest_path.read_text()).get("environment") or {}
    words = layout.machine_words(env)
    if words:
        return words
    return f"{env.get('cpu_model') or 'unknown CPU'} (family and model not recorded)"


def _design(tables: Path) -> str:
    """The runs × rounds behind the report's ratios, as its comparison matrix states them."""
    path = tables / "ratio_matrix.csv"
    matrix = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    if matrix.empty or "design" not in matrix:
        return "no JAX ÷ PyTorch ratio"
    return "; ".join(sorted(set(matrix.design.astype(str))))


# Summary sentences every report may carry whatever it measured: a family campaign's answer is
# not among them, so the index looks past them to its family's first sentence.
_ROUTINE_OPENINGS = ("No inference configuration", "The campaign has", "Every cell ran", "Over ")
_ROUTINE_PHRASES = ("ran on a shared machine",)


def _routine(sentence: str) -> bool:
    return sentence.startswith(_ROUTINE_OPENINGS) or any(p in sentence for p in _ROUTINE_PHRASES)


def headline(content: dict) -> str:
    """The report's first telling sentence: from its executive summary, else the first note of a
    section that shows data (a family's own answer), else the summary's first sentence."""
    summary = content.get("summary") or [""]
    telling = [s for s in summary if not _routine(s)]
    if telling:
        return telling[0]
    for section in content.get("sections", []):
        if not any(item["kind"] != "note" for item in section["items"]):
            continue
        notes = [i["text"] for i in section["items"] if i["kind"] == "note"]
        notes = [n for n in notes if not n.startswith("No ")]
        if notes:
            return notes[0]
    return summary[0]


def _date(run_id: str) -> str:
    match = _RUN_DATE.match(run_id)
    return "-".join(match.groups()) if match else ""


def rows(report_root: Path, out: Path) -> pd.DataFrame:
    """One row per report folder under ``report_root`` that holds a content.json."""
    found = []
    for folder in sorted(Path(report_root).iterdir()) if Path(report_root).is_dir() else []:
        if not (folder / sections.CONTENT_NAME).is_file():
            continue
        content = sections.read(folder)
        campaign, run_id = content["campaign"], content["run_id"]
        found.append(
            {
                "report": folder.name,
                "campaign": campaign,
                "run_id": run_id,
                "date": _date(run_id),
                "hardware": _hardware(Path(out) / campaign / run_id / "manifest.json"),
                "design": _design(folder / sections.TABLES_DIR),
                "headline": headline(content),
            }
        )
    if not found:
        raise ResultsIndexError(
            f"no report under {report_root}: build one first with `fwbench report CAMPAIGN`"
        )
    return pd.DataFrame(found)


def markdown(table: pd.DataFrame, report_root: Path, index_dir: Path) -> str:
    """The page: a row per report (newest run first), then the memory index where one exists."""
    link_root = Path(os.path.relpath(Path(report_root), Path(index_dir))).as_posix()
    lines = [
        "# fwbench results",
        "Every report built in this checkout, newest run first. Written by `fwbench "
        "results-index` from each report's content.json and tables; rebuild the reports and run "
        "it again instead of editing. The headline column is each report's first telling "
        "sentence; the report says how far it can be trusted.",
        "| report | campaign · run | date | hardware | design | headline |",
        "|---|---|---|---|---|---|",
    ]
    ordered = table.sort_values(["run_id", "report"], ascending=[False, True], kind="stable")
    for r in ordered.itertuples():
        cells = [
            f"[{r.report}]({link_root}/{r.report}/report.md)",
            f"{r.campaign} · `{r.run_id}`",
            r.date,
            r.hardware,
            r.design,
            r.headline,
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    text = "\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:])
    try:
        memory = memory_index.markdown(memory_index.index_table(Path(report_root)), link_root)
    except memory_index.MemoryIndexError:
        return text + "\n"
    return (
        f"{text}\n\n## Memory: every memory campaign's cells in one table\n\n"
        "Each memory report's memory-time curve, cell by cell, with the verdicts its sentences "
        f"give (the same functions the reports use).\n\n{memory}\n"
    )


def write(report_root: Path, out: Path) -> tuple[Path, bool]:
    """Write ``report_root``/index.md and index.html; returns the markdown's path and whether it
    changed. Each file is replaced whole, never left half-written."""
    report_root = Path(report_root)
    text = markdown(rows(report_root, out), report_root, report_root)
    md_path = report_root / f"{_INDEX_NAME}.md"
    changed = not md_path.is_file() or md_path.read_text() != text
    write_text_atomic(md_path, text)
    write_text_atomic(report_root / f"{_INDEX_NAME}.html", html_report(text, "fwbench results"))
    return md_path, changed
