"""``fwbench report``: run the analysis notebook over a campaign's run and write its report, into
``local/`` (git ignores it) unless ``--publish`` makes it the committed reference."""

from __future__ import annotations

from fwbench.commands.common import EXIT_OK, fail, folder_name


def add_parser(sub) -> None:
    report = sub.add_parser(
        "report",
        help="run the analysis notebook for a campaign and write its report (in local/ unless "
        "--publish)",
        description="Executes notebooks/20_analysis.py for the campaign's latest run and writes "
        "report.md, report.html and tables/ to local/report/<campaign>/ and the figures to "
        "local/figures/<campaign>/, beside the analysis notebook; git ignores local/ and the "
        "run is only read. --publish makes the report the committed reference instead.",
    )
    report.add_argument("campaign", help="campaign name, e.g. smoke")
    report.add_argument("--run-id", help="run to report (default: the latest of the campaign)")
    report.add_argument(
        "--into",
        metavar="NAME",
        type=folder_name,
        help="name the report NAME instead of CAMPAIGN (its folders are report/NAME and "
        "figures/NAME): a second report of one campaign, such as its run on another CPU (pass "
        "--run-id)",
    )
    report.add_argument(
        "--publish",
        action="store_true",
        help="write report/ and figures/ (tracked) instead of local/, and execute the analysis "
        "as a cell of the run, into its folder and manifest, so it is indexed and can be "
        "committed as the reference",
    )
    report.add_argument(
        "--out", default="executed", help="executed-notebook folder (default: executed)"
    )
    report.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)"
    )
    report.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.lab import Lab, ReportError

    try:
        path = Lab.at(args.out, args.db).report(
            args.campaign, args.run_id, into=args.into, publish=args.publish
        )
    except ReportError as exc:
        return fail(str(exc))
    print(path)
    return EXIT_OK
