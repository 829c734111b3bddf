"""``fwbench slides``: a self-contained HTML slide deck from a built report."""

from __future__ import annotations

from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail, folder_name


def add_parser(sub) -> None:
    deck = sub.add_parser(
        "slides",
        help="write a self-contained HTML slide deck from a built report",
        description="Write report/NAME/slides.html from report NAME (built by `fwbench report`): "
        "a title slide, the headline, the method, the comparison matrix, the why, one slide per "
        "other figure and where the numbers come from, every word the report's own. Figures are "
        "inlined, so the file opens offline; arrow keys and Page Up/Down step through it.",
        epilog="Exit status: 0 written, 2 no such report.",
    )
    deck.add_argument("name", type=folder_name, help="report folder under --reports, e.g. headline")
    deck.add_argument(
        "--reports", default="report", help="folder of built reports (default: report)"
    )
    deck.add_argument("--output", help="file to write (default: report/NAME/slides.html)")
    deck.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.publish import slides

    try:
        path = slides.write(Path(args.reports) / args.name, args.output and Path(args.output))
    except slides.SlidesError as exc:
        return fail(str(exc))
    print(path)
    return EXIT_OK
