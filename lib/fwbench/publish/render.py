"""``fwbench report CAMPAIGN``: lay out report.md/.html from what 20_analysis left.

A report is built where git does not look, ``local/report/<campaign>/`` and
``local/figures/<campaign>/``, with its analysis notebook beside it, and the run is only read: a
user's reports never change a tracked file. ``publish`` makes it the committed reference in
``report/<campaign>/`` and ``figures/<campaign>/``. ``fwbench.lab.Lab.report`` executes the
analysis notebook; it leaves figures, tables and a ``content.json``, and this module only lays
them out.
Everything is sorted and seeded, so rebuilding a report from the same data gives the same
report.md apart from its "Generated" line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from fwbench.report import charts, sections
from fwbench.results.layout import find_repo_root, now_iso
from fwbench.vocab import ANALYSIS_NOTEBOOK

NOTEBOOK = ANALYSIS_NOTEBOOK
_MAX_TABLE_ROWS = 60
GENERATED_PREFIX = "Generated: "
# git ignores it: the reports of a user's runs, until ``--publish`` makes one the reference
_LOCAL_DIR = "local"
PARTS = (("results", "Results"), ("failures", "Failures and workarounds"))


def repo_root() -> Path:
    """The checkout the command runs in: the nearest folder at or above the working directory that
    holds the analysis notebook, else the one the package is installed from (editable, lib/)."""
    cwd = Path.cwd().resolve()
    for folder in [cwd, *cwd.parents]:
        if (folder / "notebooks" / f"{NOTEBOOK}.py").is_file():
            return folder
    here = Path(__file__).resolve().parents[2]
    if (here / "notebooks" / f"{NOTEBOOK}.py").is_file():
        return here
    return find_repo_root(cwd)


def report_dirs(root: Path, name: str, publish: bool = False) -> tuple[Path, Path]:
    """Where report ``name`` and its figures go in checkout ``root``: ``report/NAME`` and
    ``figures/NAME`` when it is published, else the same under ``local/``."""
    base = root if publish else root / _LOCAL_DIR
    return base / "report" / name, base / "figures" / name


# --------------------------------------------------------------------------- rendering


def fmt(value) -> str:
    """Numbers for reading: thousands separated, 3 to 4 significant digits, ∞ for never."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value).replace("|", "\\|").replace("\n", " ")
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.3g}"


def markdown_table(frame: pd.DataFrame, limit: int = _MAX_TABLE_ROWS) -> str:
    if frame.empty:
        return "_(no rows)_"
    shown = frame.head(limit)
    lines = [
        "| " + " | ".join(map(str, shown.columns)) + " |",
        "|" + "|".join("---" for _ in shown.columns) + "|",
    ]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    if len(frame) > limit:
        lines.append(f"\n_… {len(frame) - limit} more rows in the CSV._")
    return "\n".join(lines)


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(start).resolve())).as_posix()


def _sources_block(sources: list[str], out: Path, report_dir: Path) -> str:
    if not sources:
        return ""
    links = "\n".join(f"- [{s}]({_rel(out / s, report_dir)})" for s in sources)
    return (
        f"<details><summary>Executed notebooks behind this table ({len(sources)})</summary>\n\n"
        f"{links}\n\n</details>"
    )


def _section_markdown(section: dict, content: dict, out: Path, report_dir: Path, counters: dict):
    parts = [f"### {section['title']}"]
    if section.get("intro"):
        parts.append(section["intro"])
    figures_dir = Path(content["figures_dir"])
    for item in section["items"]:
        if item["kind"] == "note":
            parts.append(item["text"])
        elif item["kind"] == "figure":
            counters["figure"] += 1
            base = _rel(figures_dir / item["name"], report_dir)
            formats = content.get("figure_formats", charts.FIGURE_FORMATS)
            others = [
                f"[{label}]({base}.{fmt})"
                for fmt, label in (("html", "interactive"), ("png", "PNG"))
                if fmt in formats
            ]
            parts.append(
                f"![{item['title']}]({base}.svg)\n\n"
                f"*Figure {counters['figure']}. {item['caption']}*"
                + (f" ({', '.join(others)})" if others else "")
            )
        elif item["kind"] == "table":
            counters["table"] += 1
            name = item["name"]
            frame = pd.read_csv(report_dir / sections.TABLES_DIR / f"{name}.csv")
            tables = sections.TABLES_DIR
            parts.append(
                f"**Table {counters['table']}.** {item['caption']} "
                f"([CSV]({tables}/{name}.csv), [LaTeX]({tables}/{name}.tex))"
            )
            parts.append(markdown_table(frame))
            block = _sources_block(item["sources"], out, report_dir)
            if block:
                parts.append(block)
    return parts


def _preface_text(report_dir: Path) -> str:
    """The hand-written context of report ``report_dir`` (``params/<name>.md``, beside its
    campaign file), or "". It says what the campaign asks and how to read it; numbers come only
    from the generated text below it."""
    path = repo_root() / "params" / f"{Path(report_dir).name}.md"
    return path.read_text().strip() if path.is_file() else ""


def markdown_report(
    content: dict, out: Path, report_dir: Path, analysis_notebook: Path, generated_at: str
) -> str:
    campaign, run_id = content["campaign"], content["run_id"]
    baseline = content["baseline_run_id"]
    analysis_link = _rel(analysis_notebook, report_dir)
    parts = [
        f"# fwbench report: {campaign}",
        f"Run `{run_id}` of campaign `{campaign}`"
        + (f", compared with the earlier run `{baseline}`" if baseline else "")
        + f". Rebuild with `fwbench report {campaign}`; every number below comes from the executed "
        f"notebooks linked under its table, through the analysis notebook "
        f"[{NOTEBOOK}]({analysis_link}).",
        f"{GENERATED_PREFIX}{generated_at}",
    ]
    preface = _preface_text(report_dir)
    if preface:
        parts += [
            "## Context",
            f"*Written by hand in `params/{Path(report_dir).name}.md`.*",
            preface,
        ]
    parts += [
        "## Executive summary",
        "\n".join(f"- {s}" for s in content["summary"]),
        "## Methodology",
        "\n".join(f"- {s}" for s in content["methodology"]),
    ]
    counters = {"figure": 0, "table": 0}
    all_sources: set[str] = set()
    for part, heading in PARTS:
        sections = [s for s in content["sections"] if s.get("part", "results") == part]
        if not sections:
            continue
        parts.append(f"## {heading}")
        for section in sections:
            parts.extend(_section_markdown(section, content, out, report_dir, counters))
            for item in section["items"]:
                all_sources.update(item.get("sources", []))
    parts.append("## Limitations")
    parts.append("\n".join(f"- {s}" for s in content["limitations"]))
    parts.append("## Executed notebooks")
    listing = [f"- [{s}]({_rel(out / s, report_dir)})" for s in sorted(all_sources)]
    listing.append(f"- [{NOTEBOOK} (this report's analysis)]({analysis_link})")
    parts.append("\n".join(listing))
    return "\n\n".join(parts) + "\n"


_HTML_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; max-width: 1100px;
       margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.85rem; display: block;
         overflow-x: auto; }}
th, td {{ border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }}
th {{ background: #f4f4f4; }}
td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
code {{ background: #f4f4f4; padding: 0 0.2rem; }}
details {{ margin-bottom: 1rem; font-size: 0.85rem; }}
h2 {{ border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.5rem; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


def html_report(markdown_text: str, title: str) -> str:
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown_text)
    return _HTML_TEMPLATE.format(title=title, body=body)


def _prune_stale(content: dict, report_dir: Path) -> list[Path]:
    """Delete the tables and figures an earlier report left that this one did not write.

    A report of another run may have made a table this one has no rows for; left in place, it
    would sit beside this report as if it were part of it.
    """
    written = {"table": set(), "figure": set()}
    for section in content["sections"]:
        for item in section["items"]:
            if item["kind"] in written:
                written[item["kind"]].add(item["name"])
    candidates = [
        (Path(report_dir) / sections.TABLES_DIR, (".csv", ".tex"), written["table"]),
        (Path(content["figures_dir"]), (".png", ".svg", ".html"), written["figure"]),
    ]
    removed = []
    for folder, suffixes, keep in candidates:
        for path in sorted(folder.glob("*")) if folder.is_dir() else []:
            if path.suffix in suffixes and path.stem not in keep:
                path.unlink()
                removed.append(path)
    return removed


def render(report_dir: Path, *, out: Path, analysis_notebook: Path) -> Path:
    """Write report.md and report.html from the notebook's content.json; returns report.md."""
    report_dir = Path(report_dir)
    content = sections.read(report_dir)
    _prune_stale(content, report_dir)
    text = markdown_report(content, Path(out), report_dir, analysis_notebook, now_iso())
    md_path = report_dir / "report.md"
    md_path.write_text(text)
    title = f"fwbench report: {content['campaign']}"
    (report_dir / "report.html").write_text(html_report(text, title))
    return md_path
