"""The ``fwbench`` command: run campaigns, ingest executed notebooks, query results, build reports.

Exit status: 0 ok, 1 some cell failed, 2 bad input (nothing written), 3 nothing meets
`fwbench recommend`'s limits. Each command is a module of ``fwbench.commands``, its parser beside
its handler; this one only puts them together.
"""

from __future__ import annotations

import argparse
import sys

# jsonschema (imported here by the index, and by nbformat and papermill in the runner) imports
# rfc3987_syntax when it is installed, which builds 38 Lark grammars at import only to check the
# "iri" string format: 3-6 s of every command's start on a 2-core CPU. No schema fwbench validates
# uses that format (tests/test_db.py checks), so the command runs without it; jsonschema treats a
# module it cannot import as a format it does not check. Set before anything imports jsonschema.
sys.modules.setdefault("rfc3987_syntax", None)

from fwbench.commands import (  # noqa: E402 (after the import guard above)
    best_modes_cmd,
    freeze_test_cmd,
    ingest_cmd,
    memory_index_cmd,
    predict_cmd,
    query_cmd,
    readme_cmd,
    recommend_cmd,
    regressions_cmd,
    report_cmd,
    results_index_cmd,
    run_cmd,
    slides_cmd,
)

# in the order `fwbench --help` lists them
_COMMANDS = (
    run_cmd,
    ingest_cmd,
    query_cmd,
    regressions_cmd,
    report_cmd,
    readme_cmd,
    results_index_cmd,
    slides_cmd,
    memory_index_cmd,
    predict_cmd,
    recommend_cmd,
    freeze_test_cmd,
    best_modes_cmd,
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fwbench",
        description="How JAX and PyTorch compare, per model and hardware, and why.",
        epilog="Exit status: 0 ok, 1 some cell failed, 2 bad input (nothing written), 3 nothing "
        "meets the limits of `fwbench recommend`.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in _COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
