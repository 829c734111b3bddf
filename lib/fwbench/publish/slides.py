"""``fwbench slides NAME``: the deck a study ends with, written from a built report.

One self-contained HTML file (figures inlined as SVG data, no script or style fetched from
anywhere), so it opens offline and travels by mail: a title slide, the headline, the method, the
comparison matrix, the why, one slide per remaining figure of the report, and where the numbers
come from. Every word on it is the report's own generated text; the deck computes nothing.
Slides snap one to a screen; the arrow keys, Page Up/Down and space step through them, and
printing gives one slide per page.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from fwbench.report import sections
from fwbench.results.layout import write_text_atomic

_MAX_BULLETS = 6
_MAX_BULLET_CHARS = (
    420  # a longer methodology bullet (the package list) is for the report, not a slide
)
_DECK_NAME = "slides.html"
_MATRIX_FIGURE = "ratio_matrix"

_STYLE = """
html { scroll-snap-type: y mandatory; }
body { margin: 0; font-family: -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1d2433;
       background: #f3f4f6; }
section.slide { box-sizing: border-box; height: 100vh; width: 100%; padding: 4vh 6vw 6vh;
  scroll-snap-align: start; display: flex; flex-direction: column; background: #fff;
  border-bottom: 1px solid #d6d9de; position: relative; overflow: hidden; }
h1 { font-size: 5.2vh; margin: 14vh 0 2vh; }
h2 { font-size: 4.2vh; margin: 0 0 2.5vh; border-bottom: 3px solid #4c78a8; padding-bottom: 1vh; }
p, li { font-size: 2.5vh; line-height: 1.4; }
li { margin-bottom: 1.2vh; }
.sub { font-size: 2.8vh; color: #4a5160; }
figure { margin: 0; flex: 1; display: flex; flex-direction: column; align-items: center;
         min-height: 0; }
figure img { flex: 1; min-height: 0; width: 100%; object-fit: contain; }
code { background: #eef0f3; padding: 0 0.3em; font-size: 0.9em; }
.count { position: absolute; right: 3vw; bottom: 2vh; font-size: 1.6vh; color: #8a909c; }
@media print { html { scroll-snap-type: none; }
  section.slide { height: 100vh; page-break-after: always; border: none; } }
"""

# Step with the keys a presenter's clicker sends; scrolling by hand still works. A slide whose
# text runs past its screen (a long summary sentence) shrinks its text until it fits.
_SCRIPT = """
window.addEventListener("load", () => {
  for (const slide of document.querySelectorAll("section.slide")) {
    let size = 2.5;
    while (slide.scrollHeight > slide.clientHeight && size > 1.2) {
      size -= 0.1;
      for (const el of slide.querySelectorAll("li, p")) el.style.fontSize = size + "vh";
    }
  }
});
document.addEventListener("keydown", (e) => {
  const slides = Array.from(document.querySelectorAll("section.slide"));
  const now = slides.findIndex((s) => s.getBoundingClientRect().top > -window.innerHeight / 2);
  const step = {ArrowDown: 1, ArrowRight: 1, PageDown: 1, " ": 1, ArrowUp: -1, ArrowLeft: -1,
                PageUp: -1}[e.key];
  if (step === undefined) return;
  e.preventDefault();
  const next = slides[Math.min(slides.length - 1, Math.max(0, now + step))];
  next.scrollIntoView();
});
"""


class SlidesError(ValueError):
    """No report to make a deck from: one line for the user."""


def _inline(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").renderInline(text)


def _bullets(items: list[str]) -> str:
    kept = [t for t in items if len(t) <= _MAX_BULLET_CHARS][:_MAX_BULLETS]
    return "<ul>" + "".join(f"<li>{_inline(t)}</li>" for t in kept) + "</ul>"


def _figure(figures_dir: Path, item: dict) -> str:
    # SVG: the one format a published report keeps, and it scales to the screen. Every saved
    # figure carries its title and caption (charts.save), so the slide repeats neither.
    svg = Path(figures_dir) / f"{item['name']}.svg"
    if not svg.is_file():
        return ""
    data = base64.b64encode(svg.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(item["title"])}" '
        f'src="data:image/svg+xml;base64,{data}"></figure>'
    )


def _figures(content: dict) -> list[tuple[str, dict]]:
    """Every figure of the report with the name of the section it sits in, in report order."""
    return [
        (section.get("name", ""), item)
        for section in content["sections"]
        for item in section["items"]
        if item["kind"] == "figure"
    ]


def slides(content: dict) -> list[tuple[str, str]]:
    """The deck as (title, inner HTML) pairs, in order."""
    figures_dir = Path(content["figures_dir"])
    campaign, run_id = content["campaign"], content["run_id"]
    devices = next((m for m in content["methodology"] if m.startswith("Devices measured")), "")
    deck = [
        (
            "",
            f"<h1>JAX and PyTorch: {html.escape(campaign)}</h1>"
            f"<p class='sub'>Run <code>{html.escape(run_id)}</code>. {_inline(devices)}</p>"
            "<p class='sub'>Every number on these slides is the report's own generated text.</p>",
        ),
        ("Headline", _bullets(content["summary"])),
        ("Method", _bullets(content["methodology"])),
    ]
    figures = _figures(content)
    matrix = [item for _, item in figures if item["name"] == _MATRIX_FIGURE]
    why = sections.section_by_name(content, "why") or {"items": []}
    why_figures = [item for name, item in figures if name == "why"][:1]
    why_notes = [i["text"] for i in why["items"] if i["kind"] == "note"]
    for title, shown, notes in (
        ("Comparison matrix", matrix[:1], []),
        ("Why", why_figures, why_notes),
    ):
        body = "".join(_figure(figures_dir, item) for item in shown)
        if notes:
            body = _bullets(notes[:2]) + body if body else _bullets(notes)
        if body:
            deck.append((title, body))
    done = {id(item) for item in matrix[:1] + why_figures}
    for item in (item for _, item in figures if id(item) not in done):
        body = _figure(figures_dir, item)
        if body:
            deck.append((item["title"], body))
    deck.append(
        (
            "Where the numbers come from",
            _bullets(
                [
                    f"The report: `report/{Path(content['report_dir']).name}/report.md`, each table "
                    "linked to the executed notebooks behind it.",
                    f"Rebuild it with `fwbench report {campaign}`, this deck with `fwbench slides "
                    f"{Path(content['report_dir']).name}`.",
                    *content["limitations"],
                ]
            ),
        )
    )
    return deck


def _deck_html(content: dict) -> str:
    parts = []
    deck = slides(content)
    for n, (title, body) in enumerate(deck, 1):
        heading = f"<h2>{html.escape(title)}</h2>" if title else ""
        parts.append(
            f'<section class="slide" id="s{n}">{heading}{body}'
            f'<span class="count">{n} / {len(deck)}</span></section>'
        )
    title = f"fwbench: {html.escape(content['campaign'])}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{_STYLE}</style></head><body>"
        + "\n".join(parts)
        + f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write(report_dir: Path, output: Path | None = None) -> Path:
    """Write the deck of report ``report_dir`` (default: its slides.html); returns its path."""
    try:
        content = sections.read(report_dir)
    except FileNotFoundError:
        raise SlidesError(
            f"no report at {report_dir}: build it first with `fwbench report CAMPAIGN`"
        ) from None
    output = Path(output or Path(report_dir) / _DECK_NAME)
    write_text_atomic(output, _deck_html(content))
    return output
