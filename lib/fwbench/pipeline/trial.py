"""One cell in a fresh kernel: what every executor runs, on this machine or on a Slurm node.

A cell's notebook is executed by papermill into a hidden ``.partial`` file and renamed into place
only once its status is known, so a process killed at any moment (even SIGKILL) never leaves a
notebook that ``--resume`` or ``ingest`` could mistake for a result. Every executed notebook says
how loaded the machine was while it ran. The runner (``runner.py``) owns the run around the cells:
its folder, manifest, lock and order; the executors (``executors.py``) decide where cells run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from fwbench.measure.meters.contention import ContentionMeter
from fwbench.measure.relay import ENV_RELAY, ENV_RELAY_PLACE
from fwbench.pipeline.campaign import Cell
from fwbench.pipeline.notebook_params import read_notebook
from fwbench.results.layout import write_text_atomic
from fwbench.results.records import CONTEXT_ENV
from fwbench.vocab import ANSI_RE, ENV_EXECUTED_DIR, ENV_KERNEL, ENV_PREFIX, ENV_TRIAL

_ERROR_TAIL_CHARS = 2000
# The measurement rules want JAX's allocator to report real usage, not a preallocated pool.
# Set in each kernel unless the user's environment sets them: JAX allocates on demand, so its
# peak memory is its own; Kineto (PyTorch's profiler) prints nothing of its own (level 6: its
# profiler_start/stop probe lines and, on a machine without a GPU, a gpuGetDeviceCount error
# otherwise reach every profiled notebook and the terminal). KINETO_LOG_LEVEL=0 shows them again.
KERNEL_ENV_DEFAULTS = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "KINETO_LOG_LEVEL": "6"}
# A duet cell has one core: one thread for PyTorch's and the BLAS libraries' pools. XLA sizes its
# pool from the cores the process may run on, which the pinning already makes one.
_DUET_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


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
def _patched_environ(values: dict):
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


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def _write_notebook_atomic(nb, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, path)


def _error_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc))
    # papermill's execution error carries the notebook's own traceback, which says more
    tb = getattr(exc, "traceback", None)
    if tb:
        text = "\n".join(tb) if isinstance(tb, list) else str(tb)
    return ANSI_RE.sub("", text)[-_ERROR_TAIL_CHARS:]


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
        with _patched_environ(attempt_env):
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
    relay: dict | None = None,
) -> CellResult:
    """Run one cell (and its retry, if its kernel died and the step names a retry_env).

    ``reruns``: the discarded earlier attempts of this trial (see ``run_trial``), kept in the
    notebook's metadata beside its own reading. ``duet``: this process is pinned to
    ``duet["core"]`` beside ``duet["partner"]`` (see ``run_duet``): the kernel gets one thread and
    the contention reading is that core's. ``relay``: this cell's kernel takes turns with
    ``relay["partners"]`` through the group folder ``relay["folder"]`` (see
    ``executors.run_relay``, which writes the group's contention reading afterwards)."""
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
        **(_DUET_ENV if duet else {}),
        **({ENV_RELAY: relay["folder"], ENV_RELAY_PLACE: cell.key} if relay else {}),
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
        **({"relay": {"partners": relay["partners"]}} if relay else {}),
    }
    _write_notebook_atomic(nb, final)
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


def set_contention(run_dir: Path, result: CellResult, reading: dict | None) -> CellResult:
    """``result`` with the contention ``reading`` taken around its whole group, written into its
    notebook's metadata too (the index reads it there)."""
    if result.path:
        path = run_dir / result.path
        nb = nbformat.read(str(path), as_version=4)
        nb.metadata["fwbench"]["contention"] = reading
        _write_notebook_atomic(nb, path)
    result.contention = reading
    return result


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
    _write_notebook_atomic(nb, final)
    (nb_dir / f".{cell.slug}.partial.ipynb").unlink(missing_ok=True)
    return CellResult(status, error, duration, False, str(final.relative_to(run_dir)))


def with_error_note(result: CellResult, run_dir: Path, note: str) -> CellResult:
    """``result`` with ``note`` after its error, in its executed notebook's metadata too (what
    the index reads): a Slurm job that lost a node ends with its kernel's death as the error,
    and the note says what killed it."""
    if result.path:
        path = run_dir / result.path
        if path.is_file():
            nb = nbformat.read(str(path), as_version=4)
            meta = nb.metadata.get("fwbench") or {}
            meta["error"] = f"{(meta.get('error') or '').rstrip()}{note}"
            nb.metadata["fwbench"] = meta
            _write_notebook_atomic(nb, path)
    result.error = f"{(result.error or '').rstrip()}{note}"
    return result


def shared(result: CellResult) -> bool:
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
    while cell.interleaved and result.status == "ok" and shared(result):
        if len(reruns) >= rerun_shared:
            break
        reruns.append({"duration_s": round(result.duration_s, 3), "contention": result.contention})
        notice(
            f"  {cell.key}: {shared_machine_warning(result.contention)}; "
            f"running it again ({len(reruns)} of at most {rerun_shared})"
        )
        result = execute_cell(cell, run_dir, context, timeout, reruns)
    return result
