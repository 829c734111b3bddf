"""How long a campaign will take, from how long the same notebooks took before (``--dry-run``).

A GPU lease or a Slurm allocation has a hard time limit, so a user must know before starting
whether a campaign fits. The only honest source is history: the ``cells`` table of the index
holds the wall-clock duration of every executed notebook. A cell's estimate is the median
duration of earlier ok cells of the same notebook with the same parameters, else of the same
notebook in the same campaign, else of the same notebook anywhere (a cruder guess, said so);
a notebook never run before has no estimate, and the total says how many cells it leaves out.
At each of those levels, cells run on this machine's hardware (its CPU by family and model, and
its GPUs, as ``--resume`` compares them) win over cells run elsewhere, and the basis says which:
one campaign took 90 min a run on one CPU and 120 on another.
A campaign of N invocations costs N runs: the steps are listed for one, the total for all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fwbench.pipeline import environment
from fwbench.pipeline.campaign import Campaign, Cell
from fwbench.results import layout
from fwbench.results.layout import AA_COPY

# Which earlier cells an estimate rests on, best first; the label travels into the printout,
# with where they ran (a CPU smoke run says little of a GPU cell): this machine's hardware, other
# hardware, or maybe other hardware where the index has no environment for their run.
_BASES = ("same parameters", "same campaign", "other campaigns")
WHERE = ("this machine's hardware", "maybe other hardware", "other hardware")


@dataclass
class _StepEstimate:
    step: int
    notebook: str
    cells: int
    seconds: float | None  # None when no cell of the step has a history
    unknown: int  # cells without an estimate
    basis: str  # e.g. "median of 8 earlier cells, same campaign"


def _history(db_path: Path):
    from fwbench.results import db

    history = db.query(
        "select c.campaign, c.notebook, c.parameters, c.duration_s, r.environment from cells c "
        "left join runs r on r.campaign = c.campaign and r.run_id = c.run_id "
        "where c.status = 'ok' and c.duration_s is not null",
        db_path,
    )
    words = {
        raw: layout.machine_words(json.loads(raw) if isinstance(raw, str) else raw or {})
        for raw in history.environment.dropna().unique()
    }
    history["machine"] = history.environment.map(words)
    return history.drop(columns="environment")


def _canonical(parameters) -> str:
    if isinstance(parameters, str):
        parameters = json.loads(parameters or "{}")
    # an A/A copy does its original's work, so each is the other's history
    parameters = {k: v for k, v in (parameters or {}).items() if k != AA_COPY}
    return json.dumps(parameters, sort_keys=True, default=str)


def _cell_estimate(
    cell: Cell, campaign: str, history, here: str | None = None
) -> tuple[float | None, str, int]:
    """(median seconds, basis, how many earlier cells) for one cell; (None, ...) without history.
    ``here`` is this machine's hardware in ``environment.machine_words``' terms."""
    same_notebook = history[history.notebook == cell.notebook]
    candidates = {
        _BASES[0]: same_notebook[
            (same_notebook.campaign == campaign)
            & (same_notebook.parameters.map(_canonical) == _canonical(cell.parameters))
        ],
        _BASES[1]: same_notebook[same_notebook.campaign == campaign],
        _BASES[2]: same_notebook,
    }
    for basis in _BASES:
        rows = candidates[basis]
        if not len(rows):
            continue
        local = rows[rows.machine == here] if here is not None else rows.iloc[:0]
        if len(local):
            return float(local.duration_s.median()), f"{basis}, {WHERE[0]}", len(local)
        where = WHERE[2] if rows.machine.notna().any() else WHERE[1]
        return float(rows.duration_s.median()), f"{basis}, {where}", len(rows)
    return None, "never run", 0


def _rank(basis: str) -> tuple[int, int]:
    """How weak a basis is: its level, then where its cells ran."""
    level, where = basis.split(", ", 1)
    return _BASES.index(level), WHERE.index(where)


def estimate(campaign: Campaign, cells: list[Cell], db_path: Path) -> list[_StepEstimate]:
    """One estimate per step of ``campaign`` among ``cells``; raises FileNotFoundError without index."""
    history = _history(db_path)
    here = layout.machine_words(environment.machine())
    steps: dict[int, list[Cell]] = {}
    for cell in cells:
        steps.setdefault(cell.step, []).append(cell)
    out = []
    for step, members in sorted(steps.items()):
        seconds, unknown, bases, counts = 0.0, 0, set(), 0
        for cell in members:
            value, basis, n = _cell_estimate(cell, campaign.name, history, here)
            if value is None:
                unknown += 1
                continue
            seconds += value
            bases.add(basis)
            counts = max(counts, n)
        worst = max(bases, key=_rank) if bases else None
        out.append(
            _StepEstimate(
                step=step,
                notebook=members[0].notebook,
                cells=len(members),
                seconds=seconds if len(members) > unknown else None,
                unknown=unknown,
                basis=f"median of up to {counts} earlier cells, {worst}" if worst else "never run",
            )
        )
    return out


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def render(estimates: list[_StepEstimate], invocations: int = 1) -> list[str]:
    """Lines for the terminal: one per step, then the total and what it leaves out; with
    ``invocations`` above 1 the steps are one run's and the total is multiplied."""
    lines = []
    for est in estimates:
        guess = "no estimate" if est.seconds is None else f"~{duration(est.seconds)}"
        partial = f" ({est.unknown} of them never run)" if est.unknown and est.seconds else ""
        lines.append(
            f"step {est.step} {est.notebook}: {est.cells} cell{'s' if est.cells != 1 else ''}, "
            f"{guess}{partial} [{est.basis}]"
        )
    known = sum(e.seconds for e in estimates if e.seconds is not None)
    unknown = sum(e.unknown for e in estimates)
    if invocations > 1:
        tail = f", plus {unknown} cells never run before in each" if unknown else ""
        lines.append(
            f"estimated total: ~{duration(known)} a run × {invocations} invocations = "
            f"~{duration(known * invocations)}{tail} (kernel start-up included)"
        )
        return lines
    tail = f", plus {unknown} cells never run before" if unknown else ""
    lines.append(f"estimated total: ~{duration(known)}{tail} (kernel start-up included)")
    return lines
