"""``fwbench run``: check a campaign, run its cells here or as Slurm job arrays, index each run as
it ends and build the report the campaign asks for (in local/, or published with ``--publish``);
with ``--dry-run``, list the cells and what they would cost instead."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

from fwbench.commands.common import EXIT_CELL_FAILED, EXIT_OK, fail


def _modes_epilog() -> str:
    """What `fwbench run --help` says of 10_inference's modes and JAX's XLA option sets, one line
    each, from the vocabulary and the declared sets (both import nothing heavy)."""
    from fwbench import vocab
    from fwbench.measure import compiler

    lines = ["10_inference's modes (campaign parameter mode, per framework):"]
    for framework, modes in vocab.INFERENCE_MODES.items():
        for mode in modes:
            lines.append(f"  {framework} {mode}: {vocab.MODE_HELP[mode]}")
    lines.append("PyTorch's options (parameters, true or false):")
    lines += [f"  torch {name}: {words}" for name, words in vocab.TORCH_OPTION_HELP.items()]
    lines.append("JAX's XLA option sets (parameter xla_options, modes jit and jit-expert):")
    for device, sets in compiler.XLA_OPTION_SETS.items():
        for name, (_, words) in sets.items():
            lines.append(f"  {device} {name}: {words}")
    return "\n".join(lines)


def _subparser(sub):
    """The run subparser, its epilog kept line by line (a mode or option set a line)."""
    import argparse
    import textwrap

    return sub.add_parser(
        "run",
        help="execute a campaign (params/*.yaml) cell by cell with papermill",
        description=textwrap.fill(
            "Validate every cell of a campaign against its notebook's parameters cell, then "
            "execute each cell in a fresh kernel into "
            "OUT/<campaign>/<run_id>/<notebook>/<slug>.ipynb and ingest the results."
        ),
        epilog=_modes_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_parser(sub) -> None:
    run = _subparser(sub)
    run.add_argument("params", help="campaign file, e.g. params/smoke.yaml")
    run.add_argument("--out", default="executed", help="output folder (default: executed)")
    run.add_argument(
        "--resume",
        action="store_true",
        help="re-run only cells without an ok result in the latest run of this campaign made on "
        "this machine's CPU model (a campaign keeps one series per CPU model), then "
        "start the runs its series still lacks (see --invocations), each executing the "
        "notebooks the series' first run executed (taken from git)",
    )
    run.add_argument(
        "--invocations",
        metavar="N",
        help="repeat the campaign as N runs, one after the other, each with its own run id and "
        "manifest (default: the campaign's 'invocations', else 1); a report runs once, after "
        "the last",
    )
    run.add_argument("--only", metavar="GLOB", help="run only cells whose notebook/slug matches")
    run.add_argument(
        "--publish",
        action="store_true",
        help="build the campaign's report as the committed reference (report/ and figures/, "
        "see fwbench report --help) rather than in local/, which git ignores",
    )
    run.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="limit for each code cell of a notebook, above 0; past it the cell is recorded as "
        "timeout",
    )
    run.add_argument(
        "--no-index",
        action="store_true",
        help="do not add the runs to the results index; for a machine without its database "
        "engine (a GPU node's offline kit, gpu/run.sh): index them later with fwbench ingest "
        "where the index lives. A report needs the index, so none is built",
    )
    run.add_argument("--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)")
    run.add_argument(
        "--executor",
        default="local",
        help="where cells run: local (kernels of this process, the default) or slurm (one job "
        "array per step or round of trials, through submitit; OUT must be on a filesystem the "
        "nodes share)",
    )
    run.add_argument("--partition", help="Slurm partition for --executor slurm")
    run.add_argument(
        "--slurm-option",
        action="append",
        metavar="KEY=VALUE",
        help="an sbatch setting for --executor slurm, as submitit names it (time=MINUTES, "
        "account=A, gpus_per_node=N, cpus_per_task=N, exclusive=false, ...); repeatable",
    )
    run.add_argument(
        "--array-parallelism",
        type=int,
        default=1,
        metavar="N",
        help="Slurm jobs of one array running at once (default 1: timing cells never share a "
        "node with each other)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and list the cells, with each step's estimated duration from earlier "
        "runs in the index; execute nothing",
    )
    run.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.lab import Lab, ReportError
    from fwbench.pipeline.campaign import CampaignError, load_campaign
    from fwbench.pipeline.runner import RunnerBusy
    from fwbench.pipeline.slurm import SlurmSettings, SlurmUnavailable, parse_options

    invocations, problem = _checked_options(args)
    if problem:
        return fail(problem)
    try:
        campaign = load_campaign(args.params)
        slurm = (
            SlurmSettings(args.partition, parse_options(args.slurm_option), args.array_parallelism)
            if args.executor == "slurm"
            else None
        )
    except (CampaignError, SlurmUnavailable) as exc:
        return fail(str(exc))
    invocations = invocations or campaign.invocations
    for reason in campaign.skipped:
        print(f"fwbench: skipping {reason}", file=sys.stderr)
    cells = campaign.select(args.only)
    if not cells:
        return fail(f"--only {args.only!r} matches no cell of campaign {campaign.name}")
    lab = Lab.at(args.out, args.db)
    if args.dry_run:
        return _dry_run(args, campaign, cells, lab.out, lab.db_path, invocations)
    refused: list[str] = []
    try:
        outcomes = lab.run(
            campaign,
            index=not args.no_index,
            on_run=functools.partial(_say_run, lab.db_path, refused),
            invocations=invocations,
            resume=args.resume,
            only=args.only,
            timeout=args.timeout,
            slurm=slurm,
        )
    except (RunnerBusy, CampaignError, SlurmUnavailable) as exc:
        return fail(str(exc))
    if refused:
        return EXIT_CELL_FAILED
    failed = any(r.status != "ok" for o in outcomes for r in o.results.values())
    if campaign.report and not args.only and not args.no_index:
        # once, after the last run: the report reads every run of the campaign from the index
        try:
            print(lab.report(campaign.name, outcomes[-1].run_dir.name, publish=args.publish))
        except ReportError as exc:
            print(f"fwbench: report failed: {exc}", file=sys.stderr)
            return EXIT_CELL_FAILED
    return EXIT_CELL_FAILED if failed else EXIT_OK


def _checked_options(args) -> tuple[int | None, str | None]:
    """``--invocations`` as a number (None when not given), or the one line that refuses the
    options; checked before the campaign file is read."""
    from fwbench.pipeline.campaign import valid_invocations, valid_timeout
    from fwbench.pipeline.executors import EXECUTORS

    if args.executor not in EXECUTORS:
        return None, f"--executor must be one of {', '.join(EXECUTORS)}, got {args.executor!r}"
    slurm_only = [
        flag
        for flag, value in (("--partition", args.partition), ("--slurm-option", args.slurm_option))
        if value
    ]
    if args.executor != "slurm" and slurm_only:
        return None, f"{' and '.join(slurm_only)} only apply with --executor slurm"
    invocations = None
    if args.invocations is not None:
        # read here rather than by argparse, whose refusal is a usage block, not one line
        text = args.invocations.strip()
        invocations = int(text) if re.fullmatch(r"[0-9]+", text) else None
        if not valid_invocations(invocations):
            return None, f"--invocations must be a positive integer, got {args.invocations!r}"
    if not valid_timeout(args.timeout):
        return None, f"--timeout must be a positive number of seconds, got {args.timeout:g}"
    return invocations, None


def _say_run(db_path: Path, refused: list[str], outcome, counts, refusal) -> None:
    """Say how one run of the series went as it ends, and how it was indexed (``Lab.run``); a
    run whose ingest is refused joins ``refused``. No ``counts`` and no refusal
    (``--no-index``): not indexed."""
    failed = [k for k, r in outcome.results.items() if r.status != "ok"]
    if refusal is not None:
        print(f"fwbench: ingest refused: {refusal}", file=sys.stderr)
        refused.append(str(outcome.run_dir))
        return
    if counts is None:
        ok = len(outcome.results) - len(failed)
        print(f"{outcome.run_dir}: {ok} ok, {len(failed)} not ok; not indexed", flush=True)
        return
    place = (
        f" (invocation {outcome.invocation} of {outcome.invocations})"
        if outcome.invocations > 1
        else ""
    )
    print(
        f"{outcome.run_dir}: {len(outcome.results) - len(failed)} ok, {len(failed)} not ok; "
        f"{counts['measurements']} records in {db_path}{place}",
        flush=True,
    )


def _dry_run(args, campaign, cells, out: Path, db_path: Path, invocations: int) -> int:
    """List the cells the next run would run, in its order, and what the whole request costs."""
    from fwbench.pipeline.campaign import CampaignError
    from fwbench.pipeline.runner import done_cells, ordered_cells, series_left, series_of

    new_runs, resumed, last = invocations, None, 0
    if args.resume:
        try:
            run_dir, manifest, new_runs = series_left(out, campaign.name, invocations)
        except CampaignError as exc:
            return fail(str(exc))
        if run_dir is not None:
            done = done_cells(run_dir, manifest)
            resumed = [c for c in cells if c.key not in done]
            print(
                f"resuming run {manifest['run_id']}: {len(cells) - len(resumed)} of the "
                f"{len(cells)} selected cells are done",
                file=sys.stderr,
            )
            _, last = series_of(manifest)
            if new_runs:
                print(
                    f"then {new_runs} new run{'s' if new_runs != 1 else ''} of its series "
                    f"(invocations {last + 1} to {last + new_runs} of {invocations})",
                    file=sys.stderr,
                )
            if not resumed and not new_runs:
                return EXIT_OK
    # the order the next run would follow, rounds of interleaved trials included: the resumed
    # run's recorded one, else the one a new run draws from its own seed
    if resumed:
        listed = ordered_cells(campaign, resumed, dict(manifest))
    else:
        listed = ordered_cells(campaign, cells, {}, campaign.seed + last)
    for cell in listed:
        print(cell.key)
    if resumed:
        then = f", then {len(cells)} cells × {new_runs} invocations" if new_runs else ""
        what = f"{len(resumed)} cells{then}"
    elif new_runs > 1:
        what = f"{len(cells)} cells × {new_runs} invocations"
    else:
        what = f"{len(cells)} cells"
    print(f"{what}; campaign file is valid", file=sys.stderr)
    if resumed and db_path.exists():
        _print_estimate(campaign, resumed, db_path)
        if new_runs:
            print(f"then {new_runs} new run{'s' if new_runs != 1 else ''}:", file=sys.stderr)
    if new_runs or not db_path.exists():  # without an index, the one line that says so
        _print_estimate(campaign, cells, db_path, new_runs)
    return EXIT_OK


def _print_estimate(campaign, cells, db_path: Path, invocations: int = 1) -> None:
    """Per-step durations from earlier runs in the index, to stderr beside the cell list."""
    from fwbench.pipeline import estimate

    if not db_path.exists():
        print(
            f"no duration estimate: no index at {db_path} (`fwbench ingest` builds it from the "
            "executed notebooks)",
            file=sys.stderr,
        )
        return
    for line in estimate.render(estimate.estimate(campaign, cells, db_path), invocations):
        print(line, file=sys.stderr)
