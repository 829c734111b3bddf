"""A README's marked blocks: the lines between ``<!-- results:NAME:start -->`` and
``<!-- results:NAME:end -->``, rewritten whole by the command that owns each block (a family's,
or the publishing layer's), never left half-written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fwbench.results.layout import write_text_atomic


def markers(campaign: str) -> tuple[str, str]:
    """The lines around ``campaign``'s block in the README."""
    return f"<!-- results:{campaign}:start -->", f"<!-- results:{campaign}:end -->"


class ReadmeError(ValueError):
    """Bad input to ``fwbench readme``: no README, no markers, or no report to quote."""


def replace_block(text: str, block: str, campaign: str, where: str = "README") -> str:
    """``text`` with everything between ``campaign``'s marker lines replaced by ``block``."""
    begin, end = markers(campaign)
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.strip() == begin]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ReadmeError(
            f"{where} needs one line {begin} followed by one line {end} around the results of "
            f"{campaign} (found {len(starts)} and {len(ends)})"
        )
    head, tail = lines[: starts[0] + 1], lines[ends[0] :]
    return "".join(head) + block.rstrip("\n") + "\n" + "".join(tail)


def rewrite_block(readme: Path, name: str, block_for: Callable[[], str]) -> bool:
    """Replace the block marked ``name`` in ``readme`` with ``block_for()``; True if it changed.
    The markers are checked before ``block_for`` runs: a README without them is bad input, found
    before any work. The file is replaced whole, never left half-written."""
    readme = Path(readme)
    if not readme.is_file():
        raise ReadmeError(f"{readme}: no such file")
    text = readme.read_text()
    replace_block(text, "", name, str(readme))
    new = replace_block(text, block_for(), name, str(readme))
    if new == text:
        return False
    write_text_atomic(readme, new)
    return True
