"""``fwbench memory-index``: every built memory report's cells in one table, printed or written
into a README's block."""

from __future__ import annotations

from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail


def add_parser(sub) -> None:
    memory = sub.add_parser(
        "memory-index",
        help="every memory campaign's cells in one table, from the reports already built",
        description="Read report/*/tables/memory_curve.csv (written by `fwbench report` for "
        "each campaign that ran 12_memory) and print one markdown row per campaign and cell: "
        "the CPU, the trials, the activation goal of our plan and of torch.utils.checkpoint "
        "(meets, misses or undecided at +33% time, from intervals over trials), the simulator's "
        "peak error, whether its time model is within 5% (yes, no, or not shown where an "
        "interval over trials straddles the bar) with the interval reaching farthest, and the "
        "float64 proof. The verdicts are the reports' own.",
        epilog="Exit status: 0 written or printed, 2 no report with a memory curve, or a README "
        "without the lines <!-- results:memory_index:start --> and <!-- results:memory_index:end "
        "-->.",
    )
    memory.add_argument(
        "--reports", default="report", help="folder of built reports (default: report)"
    )
    memory.add_argument(
        "--readme",
        metavar="FILE",
        help="rewrite the block between FILE's memory_index markers instead of printing",
    )
    memory.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.families.memory import memory_index
    from fwbench.report.blocks import ReadmeError

    try:
        if args.readme:
            changed = memory_index.update_readme(Path(args.readme), Path(args.reports))
            print(f"{args.readme}: memory index {'rewritten' if changed else 'already up to date'}")
        else:
            table = memory_index.index_table(Path(args.reports))
            print(memory_index.markdown(table, Path(args.reports).as_posix()))
    except (ReadmeError, memory_index.MemoryIndexError) as exc:
        return fail(str(exc))
    return EXIT_OK
