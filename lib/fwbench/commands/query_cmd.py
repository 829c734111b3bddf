"""``fwbench query``: run SQL against the index and print the result as CSV."""

from __future__ import annotations

import sys

from fwbench.commands.common import EXIT_OK, fail
from fwbench.results import db


def add_parser(sub) -> None:
    query = sub.add_parser(
        "query",
        help="run SQL against the index, print CSV",
        description="Tables: runs, cells, measurements (columns of DESIGN.md section 4).",
    )
    query.add_argument("sql", help='e.g. "select count(*) from measurements"')
    query.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else executed/fwbench.duckdb)"
    )
    query.set_defaults(func=handle)


def handle(args) -> int:
    import duckdb

    db_path = db.index_path(args.db)
    try:
        frame = db.query(args.sql, db_path)
    except FileNotFoundError as exc:
        return fail(str(exc))
    except duckdb.Error as exc:
        return fail(f"query failed: {exc}")
    frame.to_csv(sys.stdout, index=False)
    return EXIT_OK
