"""``fwbench regressions``: the runs where a metric's level changed, over each configuration's
history, as CSV."""

from __future__ import annotations

import sys
from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail
from fwbench.results import db


def add_parser(sub) -> None:
    regressions = sub.add_parser(
        "regressions",
        help="find the runs where a metric's level changed, over each configuration's history",
        description="For every metric and configuration (model, framework, mode, device_name, "
        "precision, batch_size) of a campaign, take one point per run (the median of the run's "
        "ok values: its trials), find where the level moved with a change-point search and "
        "keep a change when a t-test between the runs before and after it gives p < 0.01 and "
        "the level moved by at least 6%. Prints CSV: metric, configuration, run_id (the first "
        "run at the new level), change_pct (signed: new level over old, minus one, in percent), "
        "p_value and direction (regression or improvement, by the side fwbench.vocab's metric "
        "directions call better; 'change', named on stderr, for a metric they give none). A "
        "history needs 4 runs; a change shows once 2 runs carry it. Only the header when "
        "nothing changed.",
        epilog="Without --campaign every campaign is read, each on its own, and the configuration "
        "names its campaign. --paired judges instead each run's JAX ÷ PyTorch ratio of a "
        "campaign's best-mode comparisons, timed in the same run and rounds, so the run effect "
        "both share cancels: a one-sided CUSUM per side after a 3-run baseline, its threshold "
        "simulated on the CPU model's run-to-run residuals for at most 1 false alert per 100 "
        "unchanged histories. It prints campaign, cpu, comparison, slower (the arm that became "
        "slower relative to the other: which of the two moved, a ratio cannot tell), run_id (the "
        "alert), change_pct, statistic, threshold and runs. Exit status: 0 ran (alerts or not), "
        "2 unknown campaign or no database.",
    )
    regressions.add_argument("--campaign", help="campaign to read (default: all, each separately)")
    regressions.add_argument(
        "--paired",
        action="store_true",
        help="judge JAX ÷ PyTorch ratios timed in the same run (the paired detector)",
    )
    regressions.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else executed/fwbench.duckdb)"
    )
    regressions.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.report import regressions

    db_path = db.index_path(args.db)
    if not db_path.exists():
        return fail(f"no database at {db_path}; run `fwbench ingest` first")
    known = regressions.campaigns(db_path)
    if args.campaign is not None and args.campaign not in known:
        return fail(
            f"unknown campaign {args.campaign!r} in {db_path}; known: {', '.join(known) or 'none'}"
        )
    if args.paired:
        return _paired(db_path, args.campaign)
    histories = regressions.load_histories(db_path, args.campaign)
    found = regressions.find_regressions(histories, with_campaign=args.campaign is None)
    found.to_csv(sys.stdout, index=False)
    undirected = sorted(set(found.metric[found.direction == regressions.UNDIRECTED]))
    if undirected:
        print(
            f"fwbench: no known better side for {', '.join(undirected)} (fwbench.vocab."
            f"METRIC_DIRECTIONS): their rows say {regressions.UNDIRECTED!r}, neither regression "
            "nor improvement",
            file=sys.stderr,
        )
    return EXIT_OK


def _paired(db_path: Path, campaign: str | None) -> int:
    from fwbench.report import trust

    with db.connect(db_path, read_only=True) as con:
        found, notes = trust.paired_regressions(con, campaign)
    found.to_csv(sys.stdout, index=False)
    for note in notes:
        print(f"fwbench: {note}", file=sys.stderr)
    return EXIT_OK
