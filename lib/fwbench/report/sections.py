"""What the analysis notebook hands to the report: figures, tables and sentences, in order.

The notebook adds sections as it goes; each figure is saved under figures/<campaign>/ and each table
as CSV and LaTeX under report/<campaign>/tables/. ``write`` leaves a ``content.json`` that
``fwbench.publish.render`` turns into report.md and report.html. Tables keep the executed notebooks they
came from, so the report can link every number to its evidence.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from fwbench.report import charts

CONTENT_NAME = "content.json"
TABLES_DIR = "tables"
_LATEX_FLOAT = "%.4g"


@dataclass
class ReportContent:
    campaign: str
    run_id: str
    baseline_run_id: str
    figures_dir: Path
    report_dir: Path
    summary: list[str] = field(default_factory=list)
    methodology: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    sections: list[dict] = field(default_factory=list)
    figure_formats: tuple[str, ...] = charts.FIGURE_FORMATS

    def section(self, title: str, intro: str = "", part: str = "results", name: str = "") -> None:
        """Start a section; ``part`` is "results" or "failures" (where the report places it);
        ``name`` lets other readers of content.json (``fwbench readme``) find it by a stable key."""
        self.sections.append(
            {"title": title, "intro": intro, "part": part, "name": name, "items": []}
        )

    def _add(self, item: dict) -> None:
        if not self.sections:
            raise ValueError("start a section before adding figures, tables or notes")
        self.sections[-1]["items"].append(item)

    def note(self, text: str) -> None:
        self._add({"kind": "note", "text": text})

    def figure(self, chart, name: str, title: str, caption: str):
        charts.save(chart, self.figures_dir, name, title, caption, self.figure_formats)
        self._add({"kind": "figure", "name": name, "title": title, "caption": caption})
        return chart

    def table(
        self, frame: pd.DataFrame, name: str, caption: str, sources: list[str] = ()
    ) -> pd.DataFrame:
        tables = self.report_dir / TABLES_DIR
        tables.mkdir(parents=True, exist_ok=True)
        frame = frame.reset_index(drop=True)
        frame.to_csv(tables / f"{name}.csv", index=False)
        latex = frame.to_latex(
            index=False,
            escape=True,
            na_rep="",
            float_format=_LATEX_FLOAT,
            caption=caption,
            label=f"tab:{name}",
        )
        (tables / f"{name}.tex").write_text(latex)
        self._add(
            {"kind": "table", "name": name, "caption": caption, "sources": sorted(set(sources))}
        )
        return frame

    def write(self) -> Path:
        self.report_dir.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        # relative, so that a committed report names no machine's folders
        data["figures_dir"] = os.path.relpath(self.figures_dir, self.report_dir)
        data["report_dir"] = "."
        path = self.report_dir / CONTENT_NAME
        path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        return path


def read(report_dir: Path) -> dict:
    """The content as written, its folders resolved against ``report_dir`` (they are stored
    relative to it)."""
    data = json.loads((Path(report_dir) / CONTENT_NAME).read_text())
    for key in ("figures_dir", "report_dir"):
        data[key] = str((Path(report_dir) / data[key]).resolve())
    return data


def section_by_name(content: dict, name: str) -> dict | None:
    """The section of a read content.json that the analysis named ``name``, if it made one."""
    return next((s for s in content["sections"] if s.get("name") == name), None)


def read_table(tables: Path, name: str) -> pd.DataFrame:
    path = tables / f"{name}.csv"
    if not path.is_file():
        return pd.DataFrame()
    table = pd.read_csv(path)
    if "threads" not in table and "precision" in table:
        table["threads"] = 0  # a report built before threads were part of a configuration
    return table


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def has_data(content: dict, name: str) -> bool:
    """Whether a section shows a table or figure, not only its empty note."""
    section = section_by_name(content, name) or {"items": []}
    return any(item["kind"] != "note" for item in section["items"])


def notes_part(content: dict, name: str, heading: str, report_link: str) -> list[str]:
    """A section's generated notes as bullets (the trust figures, the why-sentences)."""
    section = section_by_name(content, name)
    notes = [i["text"] for i in (section or {"items": []})["items"] if i["kind"] == "note"]
    if not notes:
        return []
    return [f"{heading} ([report]({report_link})):", "\n".join(f"- {n}" for n in notes)]
