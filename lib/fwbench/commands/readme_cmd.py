"""``fwbench readme``: rewrite a campaign's results block in the README from its built report."""

from __future__ import annotations

from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail, folder_name


def add_parser(sub) -> None:
    readme = sub.add_parser(
        "readme",
        help="rewrite README.md's results block of a campaign from report/<campaign>/",
        description="Replace the lines between <!-- results:CAMPAIGN:start --> and "
        "<!-- results:CAMPAIGN:end --> in the README with the run, contention reading, JAX ÷ "
        "PyTorch ratios, training, MFU, share of the roofline bound, trust figures and "
        "why-sentences read from report/<campaign>/ (content.json, tables/*.csv) beside it. "
        "Nothing else in the README changes; build the report first with `fwbench report "
        "CAMPAIGN`.",
    )
    readme.add_argument("campaign", help="campaign whose report to quote, e.g. smoke")
    readme.add_argument(
        "--into",
        metavar="NAME",
        type=folder_name,
        help="quote report/NAME (built by `fwbench report CAMPAIGN --into NAME`) in the block "
        "marked <!-- results:NAME:start -->",
    )
    readme.add_argument(
        "--readme", default="README.md", help="file to rewrite (default: README.md)"
    )
    readme.add_argument(
        "--out", default="executed", help="executed-notebook folder to link to (default: executed)"
    )
    readme.add_argument(
        "--brief",
        action="store_true",
        help="only the run, the inference verdicts and the trust figures (the README's headline)",
    )
    readme.add_argument(
        "--ratios-only",
        action="store_true",
        help="only the run line and the JAX ÷ PyTorch verdicts' table (an earlier result kept "
        "for reference; its report holds the rest)",
    )
    readme.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.publish.readme import update_readme
    from fwbench.report.blocks import ReadmeError

    try:
        changed = update_readme(
            args.campaign,
            Path(args.readme),
            Path(args.out),
            into=args.into,
            brief=args.brief,
            ratios_only=args.ratios_only,
        )
    except ReadmeError as exc:
        return fail(str(exc))
    print(f"{args.readme}: results block {'rewritten' if changed else 'already up to date'}")
    return EXIT_OK
