"""Execute a campaign: its runs, each a folder with a manifest, and the cells of each run in order.

Layout: ``<out>/<campaign>/<run_id>/<notebook>/<slug>.ipynb`` plus ``<run_id>/manifest.json``.
A campaign with ``invocations: N`` makes N such runs, one after the other (``run_series``); each
manifest names its series (``series_id``, the first run's id) and its place in it (``invocation``
k of ``invocations``), so that ``--resume`` knows how many runs of the series are left. The runner
owns the run: its folder, the output lock, the manifest (its one writer) and the order of the
cells; an executor (``executors.py``: local, duet, relay or Slurm) runs each group of cells it hands over,
and ``trial.py`` is one cell in a fresh kernel.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tqdm.auto import tqdm

from fwbench.pipeline import environment, executors, series_notebooks
from fwbench.pipeline.campaign import Campaign, CampaignError, Cell, RunOrder
from fwbench.pipeline.trial import (
    CellResult,
    execute_cell,
    notice,
    shared,
    shared_machine_warning,
    write_json_atomic,
)
from fwbench.results import layout

_LOCK_NAME = ".fwbench-run.lock"


class RunnerBusy(RuntimeError):
    """Another ``fwbench run`` holds the output folder."""


def _new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


@contextlib.contextmanager
def output_lock(out: Path):
    """An exclusive lock on the output folder, refused at once rather than waited for."""
    out.mkdir(parents=True, exist_ok=True)
    fh = open(out / _LOCK_NAME, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise RunnerBusy(
            f"another fwbench run is using {out}; wait for it or use a different --out"
        ) from None
    try:
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def _resumable_run(out: Path, campaign: str) -> tuple[Path | None, dict | None]:
    """The latest run of ``campaign`` under ``out`` made on this machine's hardware, and its
    manifest, for --resume; (None, None) when the campaign has no run. A campaign may hold one
    series per CPU model (each pooled on its own), so a run from another machine is passed over;
    raises CampaignError when every run was made elsewhere, naming where."""
    runs = run_dirs(out, campaign)
    here = environment.machine()
    latest_problem = None
    for run_dir in reversed(runs):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        problem = environment.resume_problem(manifest.get("environment") or {}, here)
        if problem is None:
            return run_dir, manifest
        latest_problem = latest_problem or f"run {manifest['run_id']}: {problem}"
    if not runs:
        return None, None
    raise CampaignError(
        f"cannot resume {campaign}: no run of it was made on this machine ({latest_problem}); "
        "a run never spans two machines, so start a new one (without --resume)"
    )


def run_dirs(out: Path, campaign: str) -> list[Path]:
    """The run folders of ``campaign`` under ``out`` (those with a manifest), oldest first."""
    root = out / campaign
    return sorted(p.parent for p in root.glob("*/manifest.json")) if root.is_dir() else []


def done_cells(run_dir: Path, manifest: dict) -> set[str]:
    """The keys of the cells a resumed run skips: recorded ok, their notebook on disk."""
    return {
        key
        for key, c in manifest["cells"].items()
        if c.get("status") == "ok" and (run_dir / c.get("path", "")).is_file()
    }


def _manifest_entry(cell: Cell, result: CellResult | None = None) -> dict:
    """A cell's entry in manifest.json: pending until ``result`` is known."""
    entry = {
        "notebook": cell.notebook,
        "slug": cell.slug,
        "trial": cell.trial,
        "parameters": cell.parameters,
        "status": "pending",
    }
    if result is not None:
        entry.update(
            status=result.status,
            error=result.error,
            duration_s=round(result.duration_s, 3),
            retried=result.retried,
            path=result.path,
            contention=result.contention,
            reruns=result.reruns,
        )
    return entry


def _record_in_manifest(run_dir: Path, cell: Cell, result: CellResult) -> dict:
    """Write one cell's result into the run's manifest.json; returns the manifest.

    The one writer of cell entries, used with the output lock held: by the runner after every cell
    and by ``fwbench report`` for the analysis cell it adds to a finished run.
    """
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.setdefault("cells", {})[cell.key] = _manifest_entry(cell, result)
    write_json_atomic(path, manifest)
    return manifest


def execute_into_run(
    cell: Cell, out: Path, run_dir: Path, timeout: float | None, into: Path | None = None
) -> CellResult:
    """Add one cell to an existing run of ``out``, as the runner runs any other: under the output
    lock (``RunnerBusy`` if another runner holds it), with its contention reading, and recorded in
    the manifest. With ``into``, the cell runs in the run's context but its notebook goes to
    ``into`` and the run's folder and manifest are left as they were."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    context = {"run_id": manifest["run_id"], "campaign": manifest["campaign"]}
    with output_lock(out):
        result = execute_cell(cell, into or run_dir, context, timeout)
        if into is None:
            _record_in_manifest(run_dir, cell, result)
    return result


def ordered_cells(
    campaign: Campaign, cells: list[Cell], manifest: dict, seed: int | None = None
) -> list[Cell]:
    """``cells`` in the run's order: the one recorded in the manifest, else the campaign's drawn
    from ``seed`` (default: the campaign's), which is then recorded, so that a resumed run
    continues its rounds where they stopped rather than drawing new ones. Selected cells the
    recorded order lacks (the file changed since) go last."""
    if "run_order" in manifest:
        order = RunOrder.from_dict(manifest["run_order"])
    else:
        order = campaign.run_order(seed)
        if order.rounds:
            manifest["run_order"] = order.as_dict()
    by_key = {c.key: c for c in cells}
    placed = [by_key[k] for k in order.keys if k in by_key]
    known = set(order.keys)
    return placed + [c for c in cells if c.key not in known]


@dataclass
class _RunOutcome:
    """One run of a series, as ``run_series`` hands it to its caller."""

    run_dir: Path
    results: dict[str, CellResult]
    invocation: int  # 1-based place of the run in its series
    invocations: int  # how many runs the series was asked for when this one started
    series_id: str


def series_of(manifest: dict) -> tuple[str, int]:
    """A run's series id and its place in it; a run made before series existed is a series of
    one, named after itself."""
    return manifest.get("series_id") or manifest["run_id"], int(manifest.get("invocation") or 1)


def _series_runs(out: Path, campaign: str, series_id: str) -> list[Path]:
    """The run folders of ``campaign`` under ``out`` that belong to ``series_id``."""
    found = []
    for run_dir in run_dirs(out, campaign):
        try:
            manifest = json.loads((run_dir / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if series_of(manifest)[0] == series_id:
            found.append(run_dir)
    return found


def series_left(out: Path, campaign: str, invocations: int) -> tuple[Path | None, dict | None, int]:
    """For ``--resume``: the latest run (to finish), its manifest and how many new runs of its
    series are left to reach ``invocations``; (None, None, invocations) when there is no run."""
    run_dir, manifest = _resumable_run(out, campaign)
    if run_dir is None:
        return None, None, invocations
    series_id, _ = series_of(manifest)
    return run_dir, manifest, max(0, invocations - len(_series_runs(out, campaign, series_id)))


def run_campaign(
    campaign: Campaign,
    out: Path,
    *,
    resume: bool = False,
    only: str | None = None,
    timeout: float | None = None,
    show_progress: bool = True,
    slurm=None,
) -> tuple[Path, dict[str, CellResult]]:
    """Execute the selected cells as one run (the latest, with ``resume``); returns the run
    folder and each cell's result by key. ``run_series`` makes the campaign's ``invocations``.

    ``slurm``: a ``pipeline.slurm.SlurmSettings`` to run the cells as Slurm jobs (checked here,
    before anything is written) instead of in kernels of this process."""
    outcomes = run_series(
        campaign,
        out,
        invocations=1,
        resume=resume,
        only=only,
        timeout=timeout,
        show_progress=show_progress,
        slurm=slurm,
    )
    return outcomes[-1].run_dir, outcomes[-1].results


def run_series(
    campaign: Campaign,
    out: Path,
    *,
    invocations: int | None = None,
    resume: bool = False,
    only: str | None = None,
    timeout: float | None = None,
    show_progress: bool = True,
    slurm=None,
    after_run=None,
) -> list[_RunOutcome]:
    """Run the campaign ``invocations`` times (default: the campaign's ``invocations``), each a
    run of its own with its own folder and manifest, as that many ``fwbench run`` calls would.

    With ``resume`` the latest run is finished first, and only the runs its series still lacks
    follow (a series stopped in its second of three runs ends with that run finished and one new
    one). ``after_run(outcome)`` is called as each run ends, with the output lock still held
    (the CLI ingests there, so that a series stopped half-way leaves its finished runs indexed).
    Each new run draws its rounds from the campaign's seed plus its place in the series less
    one: the first run's order is a single run's, and no position in a round falls on the same
    arm in every run."""
    wanted = campaign.invocations if invocations is None else invocations
    if campaign.order in ("duet", "relay") and slurm is not None:
        raise CampaignError(
            f"order '{campaign.order}' runs a comparison's cells together on one machine; it "
            "cannot run as Slurm jobs (use interleaved or sequential order with --executor slurm)"
        )
    if campaign.order == "duet":
        executors.duet_cores()  # bad input on this machine: refused before a run folder exists
    node_cpus = None
    if slurm is not None:
        from fwbench.pipeline.slurm import check_slurm

        node_cpus = check_slurm(slurm)
    cells = campaign.select(only)
    spread = next((c for c in cells if int(c.parameters.get("nodes", 1)) > 1), None)
    if spread is not None and slurm is None:
        raise CampaignError(
            f"cell {spread.key} spreads its workers over {spread.parameters['nodes']} nodes, "
            "which only a Slurm allocation has: run it with --executor slurm"
        )
    outcomes: list[_RunOutcome] = []

    def finish(run_dir: Path, manifest: dict) -> None:
        outcomes.append(
            _finish_run(
                campaign, cells, run_dir, manifest, timeout, show_progress, slurm, node_cpus
            )
        )
        if after_run is not None:
            after_run(outcomes[-1])

    # the campaign's own notebooks: a run of a series may point its cells at its own copies
    sources = {id(c): c.notebook_path for c in campaign.cells}
    with output_lock(out):
        series_id, last, left = None, 0, wanted
        if resume:
            run_dir, manifest, left = series_left(out, campaign.name, wanted)
            if run_dir is not None:
                finish(run_dir, manifest)
                series_id, last = series_of(manifest)
        for invocation in range(last + 1, last + 1 + left):
            for c in campaign.cells:
                c.notebook_path = sources[id(c)]
            run_dir, manifest = _new_run(campaign, out, series_id, invocation, wanted)
            series_id = manifest["series_id"]
            finish(run_dir, manifest)
    return outcomes


def _new_run(
    campaign: Campaign, out: Path, series_id: str | None, invocation: int, invocations: int
) -> tuple[Path, dict]:
    # a later run of a series executes its first run's notebooks (series_notebooks); found, or
    # refused, before anything is written
    first = _series_runs(out, campaign.name, series_id)[:1] if series_id else []
    sources = (
        series_notebooks.series_sources(
            campaign.cells, json.loads((first[0] / "manifest.json").read_text())
        )
        if first
        else {}
    )
    run_id = _new_run_id()
    run_dir = out / campaign.name / run_id
    while run_dir.exists():  # two runs started within one second
        time.sleep(1)
        run_id = _new_run_id()
        run_dir = out / campaign.name / run_id
    run_dir.mkdir(parents=True)
    pinned = series_notebooks.pin(campaign.cells, run_dir, sources)
    manifest = {
        "campaign": campaign.name,
        "run_id": run_id,
        "series_id": series_id or run_id,
        "invocation": invocation,
        "invocations": invocations,
        **({"series_notebooks": pinned} if pinned else {}),
        "campaign_file": str(campaign.path),
        "campaign_spec": campaign.raw,
        "started_at": layout.now_iso(),
        "finished_at": None,
        "environment": environment.capture(
            campaign.path.parent,
            frameworks=False,
            notebooks={c.notebook: c.notebook_path for c in campaign.cells},
        ),
        "cells": {},
    }
    # drawn from this run's own seed and recorded, so the run and any resume of it follow it
    ordered_cells(campaign, campaign.cells, manifest, campaign.seed + invocation - 1)
    write_json_atomic(run_dir / "manifest.json", manifest)
    return run_dir, manifest


def _finish_run(
    campaign: Campaign,
    cells: list[Cell],
    run_dir: Path,
    manifest: dict,
    timeout: float | None,
    show_progress: bool,
    slurm,
    node_cpus,
) -> _RunOutcome:
    """Run the cells of ``cells`` that the run in ``run_dir`` has no ok result for."""
    run_id = manifest["run_id"]
    series_id, invocation = series_of(manifest)
    invocations = int(manifest.get("invocations") or 1)
    series_notebooks.repoint(cells, run_dir, manifest.get("series_notebooks") or {})
    context = {"run_id": run_id, "campaign": campaign.name}
    done = done_cells(run_dir, manifest)
    todo = [c for c in ordered_cells(campaign, cells, manifest) if c.key not in done]
    if not todo:
        # a resumed run with nothing left is evidence already: its manifest stays as written
        return _RunOutcome(run_dir, {}, invocation, invocations, series_id)
    for c in todo:
        manifest["cells"][c.key] = _manifest_entry(c)
    write_json_atomic(run_dir / "manifest.json", manifest)
    results: dict[str, CellResult] = {}
    order = RunOrder.from_dict(manifest["run_order"]) if "run_order" in manifest else None
    together = order.order if order is not None and order.order in ("duet", "relay") else None
    place = f" ({invocation} of {invocations})" if invocations > 1 else ""
    bar = tqdm(
        total=len(todo),
        desc=f"{campaign.name} {run_id}{place}",
        unit="cell",
        disable=not show_progress,
    )
    executor = executors.make(
        "slurm" if slurm is not None else together or "local",
        run_dir,
        slurm=slurm,
        node_cpus=node_cpus,
    )
    for group in executor.groups(order, todo):
        bar.set_postfix_str(" + ".join(c.key for c in group[:2]))
        # a generator: each result is recorded in the manifest as it comes
        outcomes = executor.run(group, run_dir, context, timeout, campaign.rerun_shared)
        for cell, result in zip(group, outcomes, strict=True):
            results[cell.key] = result
            manifest = _record_in_manifest(run_dir, cell, result)
            if result.status != "ok":
                error = (result.error or "").strip()[-300:]
                notice(f"  {cell.key}: {result.status}: {error}")
            if shared(result):
                notice(f"  {cell.key}: {shared_machine_warning(result.contention)}")
            bar.update(1)
    bar.close()
    manifest["finished_at"] = layout.now_iso()
    write_json_atomic(run_dir / "manifest.json", manifest)
    return _RunOutcome(run_dir, results, invocation, invocations, series_id)
