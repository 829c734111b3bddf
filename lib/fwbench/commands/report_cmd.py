"""``fwbench report``: run the analysis notebook over a campaign's run and write its report."""

from __future__ import annotations

from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail, folder_name
from fwbench.results import db


def add_parser(sub) -> None:
    report = sub.add_parser(
        "report",
        help="run the analysis notebook for a campaign and assemble report/<campaign>/",
        description="Executes notebooks/20_analysis.py for the campaign's latest run and writes "
        "report/<campaign>/report.md, report.html, tables and figures/<campaign>/.",
    )
    report.add_argument("campaign", help="campaign name, e.g. smoke")
    report.add_argument("--run-id", help="run to report (default: the latest of the campaign)")
    report.add_argument(
        "--into",
        metavar="NAME",
        type=folder_name,
        help="write report/NAME and figures/NAME instead of report/CAMPAIGN: a second report of "
        "one campaign, such as its run on another CPU (pass --run-id)",
    )
    report.add_argument(
        "--out", default="executed", help="executed-notebook folder (default: executed)"
    )
    report.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)"
    )
    report.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.report.render import ReportError, build_report

    out = Path(args.out)
    db_path = Path(args.db) if args.db else db.default_db_path(out)
    try:
        into = {}
        if args.into:
            from fwbench.report.render import repo_root

            root = repo_root()
            into = {
                "report_dir": root / "report" / args.into,
                "figures_dir": root / "figures" / args.into,
            }
        path = build_report(args.campaign, out=out, db_path=db_path, run_id=args.run_id, **into)
    except ReportError as exc:
        return fail(str(exc))
    print(path)
    return EXIT_OK
