"""``fwbench results-index``: report/index.md and .html, one row per built report."""

from __future__ import annotations

from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail


def add_parser(sub) -> None:
    index = sub.add_parser(
        "results-index",
        help="write report/index.md and .html: one row per built report",
        description="List every report under --reports (each folder with a content.json) in one "
        "page: the campaign and run it reads, the date and hardware of the run (from its "
        "manifest under --out), the design behind its ratios and its first telling sentence, "
        "newest run first, then the memory index where memory reports exist. Computes nothing "
        "the reports do not; build them first with `fwbench report CAMPAIGN`.",
        epilog="Exit status: 0 written, 2 no report to list.",
    )
    index.add_argument(
        "--reports", default="report", help="folder of built reports (default: report)"
    )
    index.add_argument(
        "--out", default="executed", help="executed-notebook folder (default: executed)"
    )
    index.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.publish import results_index

    try:
        path, changed = results_index.write(Path(args.reports), Path(args.out))
    except results_index.ResultsIndexError as exc:
        return fail(str(exc))
    print(f"{path}: {'rewritten' if changed else 'already up to date'} (and its .html)")
    return EXIT_OK
