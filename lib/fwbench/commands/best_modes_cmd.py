"""``fwbench best-modes``: each framework's fastest candidate per configuration in a tuning run,
written to the selection file that verdict cells in modes ``tuned`` and ``jit-tuned`` read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail
from fwbench.results import db


def add_parser(sub) -> None:
    best = sub.add_parser(
        "best-modes",
        help="pick each framework's fastest way to run each configuration from a tuning run",
        description="Read a tuning run from the index (default: the campaign's latest run): "
        "every candidate 10_inference measured there (PyTorch's modes and memory formats, JAX's "
        "stock or expert layers under each XLA option set) with its median throughput; per "
        "configuration (device, precision, threads, model, image size, batch size) and "
        "framework, the fastest is the pick. Prints one line per pick with the runner-up, and "
        "with --out writes the picks as JSON into FILE (merged with the picks FILE already "
        "holds for other devices or configurations). Commit the file before the verdict runs "
        "that read it (campaign parameter tuning_path): a verdict never picks a mode on the "
        "rounds it judges.",
        epilog="Exit status: 0 written or printed, 2 unknown campaign or run, no database, or a "
        "run without any candidate (nothing written).",
    )
    best.add_argument("campaign", help="the tuning campaign, e.g. tuning_cpu")
    best.add_argument("--run", default="", help="the tuning run (default: the latest)")
    best.add_argument("--out", help="selection file to write or update (default: print JSON)")
    best.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else executed/fwbench.duckdb)"
    )
    best.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.measure import best_modes
    from fwbench.report import tables

    db_path = db.index_path(args.db)
    if not db_path.exists():
        return fail(f"no database at {db_path}; run `fwbench ingest` first")
    with db.connect(db_path, read_only=True) as con:
        try:
            run_id, _ = tables.resolve_runs(con, args.campaign, args.run)
        except LookupError as exc:
            return fail(str(exc))
        meas = tables.load_measurements(con, args.campaign, run_id)
    selection = best_modes.select(meas, campaign=args.campaign, run_id=run_id)
    if not selection["picks"]:
        return fail(f"run {run_id} of {args.campaign} measured no candidate with 10_inference")
    for pick in selection["picks"]:
        runner = (
            f"; runner-up {pick['runner_up']} {pick['runner_up_img_s']:.1f} img/s"
            if pick["runner_up"]
            else ""
        )
        print(
            f"{pick['model']} batch {pick['batch_size']} {pick['framework']}: "
            f"{pick['candidate']} {pick['img_s']:.1f} img/s of {pick['candidates']} "
            f"candidates{runner}",
            file=sys.stderr if not args.out else sys.stdout,
        )
    if not args.out:
        print(json.dumps(selection, indent=1))
        return EXIT_OK
    out = Path(args.out)
    existing = None
    if out.exists():
        try:
            existing = best_modes.read(out)
        except (ValueError, json.JSONDecodeError) as exc:
            return fail(f"{out} exists and is not a selection file ({exc}); nothing written")
    out.write_text(json.dumps(best_modes.merge(existing, selection), indent=1) + "\n")
    print(f"{out}: {len(selection['picks'])} picks from {args.campaign} run {run_id}")
    return EXIT_OK
