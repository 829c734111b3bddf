"""Execute a campaign: each cell in a fresh kernel via papermill, results written atomically.

Layout: ``<out>/<campaign>/<run_id>/<notebook>/<slug>.ipynb`` plus ``<run_id>/manifest.json``.
A campaign with ``invocations: N`` makes N such runs, one after the other (``run_series``); each
manifest names its series (``series_id``, the first run's id) and its place in it (``invocation``
k of ``invocations``), so that ``--resume`` knows how many runs of the series are left.
A cell's notebook is first executed into a hidden ``.partial`` file and renamed into place only once
its status is known, so a runner killed at any moment (even SIGKILL) never leaves a notebook that
``--resume`` or ``ingest`` could mistake for a result.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from fwbench.measure.meters.contention import ContentionMeter
from fwbench.pipeline import environment
from fwbench.pipeline.campaign import Campaign, CampaignError, Cell, RunOrder
from fwbench.pipeline.notebook_params import read_notebook
from fwbench.results.records import CONTEXT_ENV
from fwbench.vocab import ANSI_RE, ENV_EXECUTED_DIR, ENV_KERNEL, ENV_PREFIX, ENV_TRIAL

ERROR_TAIL_CHARS = 2000
LOCK_NAME = ".fwbench-run.lock"
# The measurement rules want JAX's allocator to report real usage, not a preallocated pool.
KERNEL_ENV_DEFAULTS = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
# A duet cell has one core: one thread for PyTorch's and the BLAS libraries' pools. XLA sizes its
# pool from the cores the process may run on, which the pinning already makes one.
DUET_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class RunnerBusy(RuntimeError):
    """Another ``fwbench run`` holds the output folder."""


@dataclass
class CellResult:
    status: str  # ok / failed / timeout
    error: str | None
    duration_s: float
    retried: bool = False
    path: str | None = None
    contention: dict | None = (
        None  # ContentionMeter's reading, see fwbench.measure.meters.contention
    )
    # earlier attempts of this trial, discarded because the machine was shared while they ran
    reruns: list[dict] = field(default_factory=list)


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, where the platform has them."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def shared_machine_warning(contention: dict) -> str:
    return (
        f"ran on a shared machine: other processes took {contention['other_cpu_frac']:.0%} and "
        f"the hypervisor {contention['steal_frac']:.0%} of the CPU time; its timings are not "
        "comparable with an idle run's"
    )


def notice(line: str) -> None:
    """A line for the person watching the run, on stderr beside the progress bar: stdout is the
    command's answer, and ``fwbench predict --json`` prints its JSON there after a calibration
    run this runner made on a new CPU."""
    tqdm.write(line, file=sys.stderr)


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def kernel_name() -> str:
    """The project's registered kernel when present (``make`` installs it), else plain python3."""
    wanted = os.environ.get(ENV_KERNEL)
    if wanted:
        return wanted
    from jupyter_client.kernelspec import KernelSpecManager

    return "fwbench" if "fwbench" in KernelSpecManager().find_kernel_specs() else "python3"


@functools.cache
def kernel_manager_class():
    """The kernel manager every cell's kernel is started with: Unix sockets (ZeroMQ's IPC
    transport) where this machine's ZeroMQ has them, else jupyter_client's loopback TCP.

    Over TCP every kernel (ipykernel 7.3 and later) warns that its traffic is unencrypted, once
    per cell of a campaign. A runner's kernel only ever talks to this process on this machine, so
    Unix sockets remove the cause; raising the kernel's log level would only hide it, and the
    kernel's other warnings with it."""
    import zmq
    from jupyter_client import AsyncKernelManager
    from traitlets import default

    if not zmq.has("ipc"):
        return AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self):
            return "ipc"

        @default("connection_file")
        def _default_connection_file(self):
            # The sockets are named after the connection file. Left empty, they would be
            # kernel-ipc-1, -2, ... in papermill's cwd (notebooks/), where a duet's two kernels
            # race for the same names; a unique, short absolute name in the temporary folder
            # keeps them apart and within the ~100 characters a socket path may have.
            name = f"fwbench-kernel-{uuid.uuid4().hex[:12]}.json"
            return os.path.join(tempfile.gettempdir(), name)

    return IPCKernelManager


@contextlib.contextmanager
def output_lock(out: Path):
    """An exclusive lock on the output folder, refused at once rather than waited for."""
    out.mkdir(parents=True, exist_ok=True)
    fh = open(out / LOCK_NAME, "a+")
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


@contextlib.contextmanager
def patched_environ(values: dict):
    """Kernels inherit the runner's environment at start, so set the cell's context around it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` whole: a reader (or a stop half-way) never sees it half-written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_notebook_atomic(nb, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, path)


def latest_run_dir(out: Path, campaign: str) -> Path | None:
    root = out / campaign
    runs = (
        sorted(p for p in root.glob("*") if (p / "manifest.json").is_file())
        if root.is_dir()
        else []
    )
    return runs[-1] if runs else None


def resumable_run(out: Path, campaign: str) -> tuple[Path | None, dict | None]:
    """The latest run of ``campaign`` under ``out`` and its manifest, for --resume; (None, None)
    when there is none. Raises CampaignError when it was started on another machine."""
    run_dir = latest_run_dir(out, campaign)
    if run_dir is None:
        return None, None
    manifest = json.loads((run_dir / "manifest.json").read_text())
    problem = environment.resume_problem(manifest.get("environment") or {}, environment.machine())
    if problem:
        raise CampaignError(
            f"cannot resume {campaign} run {manifest['run_id']}: {problem}; "
            "a run never spans two machines, so start a new one (without --resume)"
        )
    return run_dir, manifest


def done_cells(run_dir: Path, manifest: dict) -> set[str]:
    """The keys of the cells a resumed run skips: recorded ok, their notebook on disk."""
    return {
        key
        for key, c in manifest["cells"].items()
        if c.get("status") == "ok" and (run_dir / c.get("path", "")).is_file()
    }


def _error_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc))
    # papermill's execution error carries the notebook's own traceback, which says more
    tb = getattr(exc, "traceback", None)
    if tb:
        text = "\n".join(tb) if isinstance(tb, list) else str(tb)
    return ANSI_RE.sub("", text)[-ERROR_TAIL_CHARS:]


def _classify(exc: BaseException) -> str:
    name = type(exc).__name__
    if "Timeout" in name or isinstance(exc, TimeoutError):
        return "timeout"
    return "failed"


def _kernel_died(exc: BaseException) -> bool:
    return type(exc).__name__ == "DeadKernelError" or "Kernel died" in str(exc)


def _execute_attempts(source_nb, partial: Path, cell: Cell, attempts: list[dict], kname, timeout):
    """Run the notebook; a dead kernel is tried again with the next attempt's environment.

    Returns (status, error, retried, the environment of the last attempt).
    """
    import papermill as pm

    status, error, retried, used_env = "ok", None, False, attempts[0]
    for n, attempt_env in enumerate(attempts):
        used_env, retried = attempt_env, n > 0
        with patched_environ(attempt_env):
            try:
                pm.execute_notebook(
                    source_nb,
                    str(partial),
                    parameters=cell.parameters,
                    kernel_name=kname,
                    execution_timeout=timeout,
                    progress_bar=False,
                    cwd=str(cell.notebook_path.parent),
                    kernel_manager_class=kernel_manager_class(),
                )
                status, error = "ok", None
            except Exception as exc:  # a crash is data: record it and go on
                status, error = _classify(exc), _error_text(exc)
                if _kernel_died(exc) and n + 1 < len(attempts):
                    continue
        break
    return status, error, retried, used_env


def execute_cell(
    cell: Cell,
    run_dir: Path,
    context: dict,
    timeout: float | None,
    reruns: list | None = None,
    duet: dict | None = None,
) -> CellResult:
    """Run one cell (and its retry, if its kernel died and the step names a retry_env).

    ``reruns``: the discarded earlier attempts of this trial (see ``run_trial``), kept in the
    notebook's metadata beside its own reading. ``duet``: this process is pinned to
    ``duet["core"]`` beside ``duet["partner"]`` (see ``run_duet``): the kernel gets one thread and
    the contention reading is that core's."""
    reruns = list(reruns or [])
    nb_dir = run_dir / cell.notebook
    nb_dir.mkdir(parents=True, exist_ok=True)
    final = nb_dir / f"{cell.slug}.ipynb"
    partial = nb_dir / f".{cell.slug}.partial.ipynb"
    kname = kernel_name()
    source_nb = read_notebook(cell.notebook_path, kname)
    env = {
        **{k: v for k, v in KERNEL_ENV_DEFAULTS.items() if k not in os.environ},
        **cell.kernel_env,
        CONTEXT_ENV["run_id"]: context["run_id"],
        CONTEXT_ENV["campaign"]: context["campaign"],
        CONTEXT_ENV["notebook"]: cell.notebook,
        CONTEXT_ENV["cell"]: cell.slug,
        ENV_TRIAL: str(cell.trial),
        # absolute: the kernel starts in the notebook's folder, not where the runner was started
        ENV_EXECUTED_DIR: str(nb_dir.resolve()),
        **(DUET_ENV if duet else {}),
    }
    attempts = [dict(env)]
    if cell.retry_env:
        attempts.append({**env, **cell.retry_env})
    # A busy machine slows CPU timings (torch's OpenMP threads by up to 10x on two shared cores),
    # so every executed notebook says how loaded the machine was around it: the load average, and
    # the share of CPU time other processes and the hypervisor took while it ran.
    load_before = _load_average()
    start = time.perf_counter()
    contention = ContentionMeter(cpu=duet["core"] if duet else None)
    with contention:
        status, error, retried, used_env = _execute_attempts(
            source_nb, partial, cell, attempts, kname, timeout
        )
    duration = time.perf_counter() - start
    nb = nbformat.read(str(partial), as_version=4) if partial.exists() else source_nb
    nb.metadata["fwbench"] = {
        **_cell_metadata(context, cell, status, error, duration, retried),
        "kernel_env": {k: v for k, v in used_env.items() if not k.startswith(ENV_PREFIX)},
        "load_average": {"before": load_before, "after": _load_average(), "cpus": os.cpu_count()},
        "contention": contention.result.as_dict() if contention.result else None,
        "reruns": reruns,
        "duet": duet,
    }
    write_notebook_atomic(nb, final)
    partial.unlink(missing_ok=True)
    return CellResult(
        status,
        error,
        duration,
        retried,
        str(final.relative_to(run_dir)),
        nb.metadata["fwbench"]["contention"],
        reruns,
    )


def _cell_metadata(context, cell: Cell, status, error, duration: float, retried: bool) -> dict:
    return {
        **context,
        "notebook": cell.notebook,
        "cell": cell.slug,
        "trial": cell.trial,
        "parameters": cell.parameters,
        "status": status,
        "error": error,
        "duration_s": round(duration, 3),
        "retried": retried,
        "retry_env": cell.retry_env if retried else {},
    }


def lost_cell(
    cell: Cell, run_dir: Path, context: dict, status: str, error: str, duration: float
) -> CellResult:
    """The result of a cell whose process ended before it could write one (a Slurm job that
    was cancelled or timed out): the unexecuted notebook with the status and error in its
    metadata, as a dead kernel's cell gets, so the index and the report see the failure."""
    nb_dir = run_dir / cell.notebook
    nb_dir.mkdir(parents=True, exist_ok=True)
    final = nb_dir / f"{cell.slug}.ipynb"
    nb = read_notebook(cell.notebook_path, kernel_name())
    nb.metadata["fwbench"] = {
        **_cell_metadata(context, cell, status, error, duration, False),
        "contention": None,
        "reruns": [],
    }
    write_notebook_atomic(nb, final)
    (nb_dir / f".{cell.slug}.partial.ipynb").unlink(missing_ok=True)
    return CellResult(status, error, duration, False, str(final.relative_to(run_dir)))


def manifest_entry(cell: Cell, result: CellResult | None = None) -> dict:
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


def record_in_manifest(run_dir: Path, cell: Cell, result: CellResult) -> dict:
    """Write one cell's result into the run's manifest.json; returns the manifest.

    The one writer of cell entries, used with the output lock held: by the runner after every cell
    and by ``fwbench report`` for the analysis cell it adds to a finished run.
    """
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.setdefault("cells", {})[cell.key] = manifest_entry(cell, result)
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
            record_in_manifest(run_dir, cell, result)
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


def _shared(result: CellResult) -> bool:
    return bool(result.contention and result.contention["shared"])


def run_trial(
    cell: Cell, run_dir: Path, context: dict, timeout: float | None, rerun_shared: int
) -> CellResult:
    """Run a cell; an interleaved trial that ran on a shared machine runs again, up to
    ``rerun_shared`` times, and the result keeps each discarded attempt's reading.

    A trial slowed by a neighbour would widen its comparison's interval (or, in a round where only
    one arm was hit, bias it); running it again at once keeps it in its round. A failed attempt is
    not re-run: a failure is data, not noise."""
    result = execute_cell(cell, run_dir, context, timeout)
    reruns: list[dict] = []
    while cell.interleaved and result.status == "ok" and _shared(result):
        if len(reruns) >= rerun_shared:
            break
        reruns.append({"duration_s": round(result.duration_s, 3), "contention": result.contention})
        notice(
            f"  {cell.key}: {shared_machine_warning(result.contention)}; "
            f"running it again ({len(reruns)} of at most {rerun_shared})"
        )
        result = execute_cell(cell, run_dir, context, timeout, reruns)
    return result


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


@dataclass
class RunOutcome:
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


def series_runs(out: Path, campaign: str, series_id: str) -> list[Path]:
    """The run folders of ``campaign`` under ``out`` that belong to ``series_id``."""
    root = out / campaign
    found = []
    for path in sorted(root.glob("*/manifest.json")) if root.is_dir() else []:
        try:
            manifest = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if series_of(manifest)[0] == series_id:
            found.append(path.parent)
    return found


def series_left(out: Path, campaign: str, invocations: int) -> tuple[Path | None, dict | None, int]:
    """For ``--resume``: the latest run (to finish), its manifest and how many new runs of its
    series are left to reach ``invocations``; (None, None, invocations) when there is no run."""
    run_dir, manifest = resumable_run(out, campaign)
    if run_dir is None:
        return None, None, invocations
    series_id, _ = series_of(manifest)
    return run_dir, manifest, max(0, invocations - len(series_runs(out, campaign, series_id)))


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
) -> list[RunOutcome]:
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
    if campaign.order == "duet":
        if slurm is not None:
            raise CampaignError(
                "order 'duet' pins two cells to two cores of one machine; it cannot run as "
                "Slurm jobs (use interleaved or sequential order with --executor slurm)"
            )
        duet_cores()  # bad input on this machine: refused before a run folder exists
    node_cpus = None
    if slurm is not None:
        from fwbench.pipeline.slurm import check_slurm

        node_cpus = check_slurm(slurm)
    cells = campaign.select(only)
    outcomes: list[RunOutcome] = []

    def finish(run_dir: Path, manifest: dict) -> None:
        outcomes.append(
            _finish_run(
                campaign, cells, run_dir, manifest, timeout, show_progress, slurm, node_cpus
            )
        )
        if after_run is not None:
            after_run(outcomes[-1])

    with output_lock(out):
        series_id, last, left = None, 0, wanted
        if resume:
            run_dir, manifest, left = series_left(out, campaign.name, wanted)
            if run_dir is not None:
                finish(run_dir, manifest)
                series_id, last = series_of(manifest)
        for invocation in range(last + 1, last + 1 + left):
            run_dir, manifest = _new_run(campaign, out, series_id, invocation, wanted)
            series_id = manifest["series_id"]
            finish(run_dir, manifest)
    return outcomes


def _new_run(
    campaign: Campaign, out: Path, series_id: str | None, invocation: int, invocations: int
) -> tuple[Path, dict]:
    run_id = new_run_id()
    run_dir = out / campaign.name / run_id
    while run_dir.exists():  # two runs started within one second
        time.sleep(1)
        run_id = new_run_id()
        run_dir = out / campaign.name / run_id
    run_dir.mkdir(parents=True)
    manifest = {
        "campaign": campaign.name,
        "run_id": run_id,
        "series_id": series_id or run_id,
        "invocation": invocation,
        "invocations": invocations,
        "campaign_file": str(campaign.path),
        "campaign_spec": campaign.raw,
        "started_at": environment.now_iso(),
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
) -> RunOutcome:
    """Run the cells of ``cells`` that the run in ``run_dir`` has no ok result for."""
    run_id = manifest["run_id"]
    series_id, invocation = series_of(manifest)
    invocations = int(manifest.get("invocations") or 1)
    context = {"run_id": run_id, "campaign": campaign.name}
    done = done_cells(run_dir, manifest)
    todo = [c for c in ordered_cells(campaign, cells, manifest) if c.key not in done]
    if not todo:
        # a resumed run with nothing left is evidence already: its manifest stays as written
        return RunOutcome(run_dir, {}, invocation, invocations, series_id)
    for c in todo:
        manifest["cells"][c.key] = manifest_entry(c)
    write_json_atomic(run_dir / "manifest.json", manifest)
    results: dict[str, CellResult] = {}
    order = RunOrder.from_dict(manifest["run_order"]) if "run_order" in manifest else None
    duet = order is not None and order.order == "duet"
    place = f" ({invocation} of {invocations})" if invocations > 1 else ""
    bar = tqdm(
        total=len(todo),
        desc=f"{campaign.name} {run_id}{place}",
        unit="cell",
        disable=not show_progress,
    )
    if slurm is not None:
        from fwbench.pipeline.slurm import SlurmExecutor, slurm_groups

        executor = SlurmExecutor(slurm, run_dir, node_cpus)
        groups = slurm_groups(order, todo)
    else:
        groups = _duet_groups(order, todo) if duet else [[c] for c in todo]
    for group in groups:
        bar.set_postfix_str(" + ".join(c.key for c in group[:2]))
        if slurm is not None:
            # a generator: each result is recorded in the manifest as its job ends
            outcomes = (
                result
                for _, result in executor.run(
                    group, run_dir, context, timeout, campaign.rerun_shared
                )
            )
        elif duet and group[0].interleaved:
            # both arms at once: a re-run for contention would have to re-run the pair
            outcomes = run_duet(group, run_dir, context, timeout)
        else:
            cell = group[0]
            outcomes = [
                run_trial(cell, run_dir, context, cell.timeout or timeout, campaign.rerun_shared)
            ]
        for cell, result in zip(group, outcomes, strict=True):
            results[cell.key] = result
            manifest = record_in_manifest(run_dir, cell, result)
            if result.status != "ok":
                error = (result.error or "").strip()[-300:]
                notice(f"  {cell.key}: {result.status}: {error}")
            if _shared(result):
                notice(f"  {cell.key}: {shared_machine_warning(result.contention)}")
            bar.update(1)
    bar.close()
    manifest["finished_at"] = environment.now_iso()
    write_json_atomic(run_dir / "manifest.json", manifest)
    return RunOutcome(run_dir, results, invocation, invocations, series_id)
