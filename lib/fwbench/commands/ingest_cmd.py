"""``fwbench ingest``: build or update the index from the executed notebooks under a folder."""

from __future__ import annotations

from fwbench.commands.common import EXIT_OK, fail, notebook_bar
from fwbench.results import db


def add_parser(sub) -> None:
    ingest = sub.add_parser(
        "ingest",
        help="build or update the DuckDB index from executed notebooks (idempotent)",
        description="Read every executed notebook under DIR, validate its records against the "
        "JSON Schema and replace the rows of each run in the database.",
    )
    ingest.add_argument(
        "dir", nargs="?", default="executed", help="folder to scan (default: executed)"
    )
    ingest.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else DIR/fwbench.duckdb)"
    )
    ingest.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.lab import Lab

    lab = Lab.at(args.dir, args.db)
    db_path = lab.db_path
    try:
        counts = lab.index(progress=notebook_bar)
    except db.IngestError as exc:
        return fail(str(exc))
    gone = f"; {counts['dropped']} runs no longer on disk dropped" if counts["dropped"] else ""
    print(
        f"{db_path}: {counts['runs']} runs, {counts['cells']} cells, "
        f"{counts['measurements']} records{gone}"
    )
    return EXIT_OK
