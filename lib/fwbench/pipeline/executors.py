"""Where a run's cells execute, behind one interface, chosen by name.

The runner hands an executor the cells a run still lacks; ``groups(order, todo)`` says which of
them go together (one cell, a duet's pair, a Slurm job array) and ``run(group, run_dir, context,
timeout, rerun_shared)`` yields each cell's ``CellResult`` in the group's order, as it comes, so
that the runner records it in the manifest at once. Every executor runs a cell through
``trial.py``:

- ``local``: one cell at a time in a kernel of this process (``trial.run_trial``: a trial that ran
  on a shared machine runs again, up to the campaign's ``rerun_shared``).
- ``duet``: a campaign with ``order: duet`` runs each round's two arms at once, each in a process
  of its own pinned to its own core.
- ``relay``: a campaign with ``order: relay`` starts each round's group of a grid point (the arms
  of a comparison and their A/A copies) at once, each kernel with the whole machine, and the
  kernels take turns (``fwbench.measure.relay``).
- ``slurm``: each group is a job array (``slurm.py``); ``fwbench run --executor slurm``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from fwbench.measure import relay
from fwbench.measure.meters.contention import ContentionMeter
from fwbench.pipeline.campaign import CampaignError, Cell, RunOrder, relay_groups
from fwbench.pipeline.trial import CellResult, execute_cell, run_trial, set_contention

# what ``fwbench run --executor`` accepts; duet is a campaign's order, run on this machine
EXECUTORS = ("local", "slurm")


class _Executor(Protocol):
    def groups(self, order: RunOrder | None, todo: list[Cell]) -> list[list[Cell]]: ...

    def run(
        self, group: list[Cell], run_dir: Path, context: dict, timeout, rerun_shared: int
    ) -> Iterator[CellResult]: ...


class LocalExecutor:
    """One cell at a time, in the order the runner gives (its rounds already laid out)."""

    def groups(self, order, todo):
        return [[cell] for cell in todo]

    def run(self, group, run_dir, context, timeout, rerun_shared):
        for cell in group:
            yield run_trial(cell, run_dir, context, cell.timeout or timeout, rerun_shared)


class DuetExecutor:
    """Before the rounds, one cell at a time; then each round's pairs, both arms at once."""

    def groups(self, order, todo):
        return _duet_groups(order, todo)

    def run(self, group, run_dir, context, timeout, rerun_shared):
        if group[0].interleaved:
            # both arms at once: a re-run for contention would have to re-run the pair
            yield from run_duet(group, run_dir, context, timeout)
        else:
            yield from LocalExecutor().run(group, run_dir, context, timeout, rerun_shared)


class _RelayExecutor:
    """Before the rounds, one cell at a time; then each round's groups, their kernels taking
    turns."""

    def groups(self, order, todo):
        by_key = {c.key: c for c in todo}
        points = {c.key: (c.grid_point, c.trial) for c in todo}
        groups = [[by_key[k]] for k in order.before_rounds if k in by_key]
        for keys in order.rounds:
            left = [k for k in keys if k in by_key]
            groups += [[by_key[k] for k in g] for g in relay_groups(left, points)]
        known = set(order.keys)
        return groups + [[c] for c in todo if c.key not in known]

    def run(self, group, run_dir, context, timeout, rerun_shared):
        if group[0].interleaved and len(group) > 1:
            yield from run_relay(group, run_dir, context, timeout)
        else:
            yield from LocalExecutor().run(group, run_dir, context, timeout, rerun_shared)


def make(name: str, run_dir: Path, *, slurm=None, node_cpus: int | None = None) -> _Executor:
    """The executor called ``name``; ``slurm`` (a ``slurm.SlurmSettings``) and ``node_cpus``
    (from ``slurm.check_slurm``) configure the Slurm one."""
    if name == "local":
        return LocalExecutor()
    if name == "duet":
        return DuetExecutor()
    if name == "relay":
        return _RelayExecutor()
    if name == "slurm":
        from fwbench.pipeline.slurm import SlurmExecutor

        return SlurmExecutor(slurm, run_dir, node_cpus)
    raise ValueError(f"no executor called {name!r}")


def _pinned_cell(core: int, partner: str, cell: Cell, run_dir: Path, context: dict, timeout):
    """A duet arm, in a process of its own: pinned to ``core`` before the kernel starts, which
    inherits the pinning."""
    os.sched_setaffinity(0, {core})
    return execute_cell(cell, run_dir, context, timeout, duet={"core": core, "partner": partner})


def duet_cores() -> list[int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise CampaignError("order 'duet' needs two cores this process may use; it has one")
    return cores[:2]


def run_duet(
    cells: list[Cell], run_dir: Path, context: dict, timeout: float | None
) -> list[CellResult]:
    """Run two cells at the same time, each in its own process pinned to its own core (one cell
    runs alone on the first core, where its partner already has a result, as after --resume)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cores = duet_cores()
    partners = [c.key for c in reversed(cells)] if len(cells) == 2 else [""]
    # spawn, not fork: the runner holds a lock file and tqdm's state, which a fork would copy
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(cells), mp_context=spawn) as pool:
        futures = [
            pool.submit(
                _pinned_cell, core, partner, cell, run_dir, context, cell.timeout or timeout
            )
            for core, partner, cell in zip(cores, partners, cells, strict=False)
        ]
        return [f.result() for f in futures]


def _duet_groups(order: RunOrder, todo: list[Cell]) -> list[list[Cell]]:
    """The cells left to run, as the runner takes them: one at a time before the rounds, then
    each round's pairs."""
    by_key = {c.key: c for c in todo}
    groups = [[by_key[k]] for k in order.before_rounds if k in by_key]
    for keys in order.rounds:
        for i in range(0, len(keys), 2):
            pair = [by_key[k] for k in keys[i : i + 2] if k in by_key]
            if pair:
                groups.append(pair)
    known = set(order.keys)
    groups += [[c] for c in todo if c.key not in known]
    return groups


def _relay_cell(folder: str, cell: Cell, partners: list[str], run_dir, context, timeout):
    return execute_cell(
        cell, run_dir, context, timeout, relay={"folder": folder, "partners": partners}
    )


def run_relay(
    cells: list[Cell], run_dir: Path, context: dict, timeout: float | None
) -> list[CellResult]:
    """Run a group's cells at the same time, each kernel taking its turns on the whole machine.

    A re-run for contention would have to re-run the group, so there is none; the contention
    reading is the group's (its kernels are not each other's contention), written into each
    cell's notebook."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="fwbench-relay-") as folder:
        Path(folder, relay.SIZE_FILE).write_text(str(len(cells)))
        meter = ContentionMeter()
        with meter, ProcessPoolExecutor(max_workers=len(cells), mp_context=spawn) as pool:
            futures = [
                pool.submit(
                    _relay_cell,
                    folder,
                    cell,
                    [c.key for c in cells if c is not cell],
                    run_dir,
                    context,
                    cell.timeout or timeout,
                )
                for cell in cells
            ]
            results = [f.result() for f in futures]
    reading = meter.result.as_dict() if meter.result else None
    return [set_contention(run_dir, result, reading) for result in results]
