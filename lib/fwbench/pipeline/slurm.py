"""Campaign cells as Slurm jobs, through submitit: ``fwbench run PARAMS --executor slurm``.

Each group of cells the runner hands over (a step's cells, or one round of interleaved trials)
is one job array. Every array task runs ``trial.run_trial`` on a compute node, exactly what a
local run does for the cell: a fresh kernel, the contention reading, re-runs of a shared trial,
the retry of a dead kernel, the notebook written into the same ``executed/`` tree (which must be
on a filesystem the nodes share). The runner, on the submitting host, waits for each task's
result in order and writes the manifest, so ``--resume``, ``--only``, the lock and the exit
status mean what they mean locally.

- Timing cells run one at a time by default (array parallelism 1): concurrent jobs on one node
  would bring back the contention the interleaved trials exist to remove. Jobs ask for a whole
  node (``exclusive``) and all its CPUs for their one task, unless ``--slurm-option`` says
  otherwise.
- A distributed cell (13_distributed) asks for one task with as many CPUs as its largest world
  size; its notebook starts the workers inside the allocation (``srun --overlap`` with
  ``launcher: srun``, or torchrun).
- A job that ends without a result (cancelled, timed out, node failure) is a failed (or timeout)
  cell with Slurm's state in its error; the other cells go on.
- Each invocation gets a fresh submitit folder under ``<run>/.slurm/``: job ids restart at 1 on a
  new cluster, and a reused folder would hand back an old job's result.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fwbench.pipeline import trial

SINFO_TIMEOUT_S = 15
# how often the runner asks Slurm for the state of the job it waits for; submitit's own watcher
# backs off to once in 10 minutes for old jobs, which would leave a cancelled job unnoticed
STATE_CHECK_S = 15
# sbatch's --time when nothing says otherwise: a campaign's longest cells take tens of minutes
DEFAULT_TIME_MIN = 240


class SlurmUnavailable(RuntimeError):
    """No Slurm answers here, or the executor's settings are wrong; one line says which."""


@dataclass
class SlurmSettings:
    partition: str | None = None
    # sbatch options as submitit names them (time, cpus_per_task, account, gpus_per_node, ...);
    # any other name goes to sbatch as --name=value
    options: dict = field(default_factory=dict)
    array_parallelism: int = 1


def _value(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_options(pairs: list[str] | None) -> dict:
    """``["time=60", "account=ml"]`` as a dict; a pair without ``=`` is bad input."""
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SlurmUnavailable(f"--slurm-option wants KEY=VALUE, got {pair!r}")
        options[key.strip().replace("-", "_")] = _value(value.strip())
    return options


def _sinfo(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sinfo", *args], capture_output=True, text=True, timeout=SINFO_TIMEOUT_S, check=False
    )


def check_slurm(settings: SlurmSettings) -> int:
    """Raise ``SlurmUnavailable`` unless a Slurm controller answers (and knows the partition);
    returns the CPUs of the partition's smallest node."""
    for tool in ("sbatch", "sinfo", "squeue", "scancel"):
        if shutil.which(tool) is None:
            raise SlurmUnavailable(f"--executor slurm: no Slurm here ({tool} is not on PATH)")
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise SlurmUnavailable("--executor slurm needs submitit: pip install submitit") from None
    if settings.array_parallelism < 1:
        raise SlurmUnavailable("--array-parallelism must be at least 1")
    args = ["-h", "-o", "%c"] + (["-p", settings.partition] if settings.partition else [])
    try:
        answer = _sinfo(args)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(
            f"--executor slurm: the Slurm controller did not answer within {SINFO_TIMEOUT_S} s"
        ) from None
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["sinfo failed"])[-1]
        raise SlurmUnavailable(f"--executor slurm: Slurm is not reachable ({last})")
    cpus = [int(c.rstrip("+")) for c in answer.stdout.split() if c.rstrip("+").isdigit()]
    if not cpus:
        where = f"partition {settings.partition!r}" if settings.partition else "the cluster"
        raise SlurmUnavailable(f"--executor slurm: {where} has no nodes")
    return min(cpus)


def cell_cpus(cell, node_cpus: int) -> int:
    """CPUs one cell's job asks for: the largest world size of a distributed cell, else the
    cell's ``threads`` where it pins them, else the whole node."""
    params = cell.parameters
    if "world_sizes" in params:
        return max(int(n) for n in params["world_sizes"])
    threads = params.get("threads")
    if isinstance(threads, int) and threads > 0:
        return threads
    return node_cpus


def slurm_groups(order, todo: list) -> list[list]:
    """The cells left to run as job arrays: consecutive cells of one step before the rounds,
    then one array per round of interleaved trials (its cells in the round's order)."""
    by_key = {c.key: c for c in todo}
    groups: list[list] = []
    if order is None:
        sequence, rounds = [c.key for c in todo], []
    else:
        sequence = [k for k in order.before_rounds if k in by_key]
        rounds = [[k for k in keys if k in by_key] for keys in order.rounds]
        placed = set(order.keys)
        sequence += [c.key for c in todo if c.key not in placed]
    for key in sequence:
        cell = by_key[key]
        if groups and groups[-1][-1].step == cell.step and not groups[-1][-1].interleaved:
            groups[-1].append(cell)
        else:
            groups.append([cell])
    groups += [[by_key[k] for k in keys] for keys in rounds if keys]
    return groups


def _sbatch_names() -> set[str]:
    from submitit.slurm.slurm import _make_sbatch_string

    return set(inspect.signature(_make_sbatch_string).parameters) - {"command", "folder"}


class SlurmExecutor:
    """Submits groups of cells as job arrays and yields each cell's ``CellResult`` in order (the
    ``slurm`` executor of ``executors.py``)."""

    def __init__(self, settings: SlurmSettings, run_dir: Path, node_cpus: int):
        import submitit

        self.settings, self.node_cpus = settings, node_cpus
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        self.folder = run_dir / ".slurm" / stamp
        self.executor = submitit.SlurmExecutor(folder=self.folder / "%j", max_num_timeout=0)
        self.known = _sbatch_names()

    def _parameters(self, campaign: str, cpus: int) -> dict:
        options = dict(self.settings.options)
        extra = {k: options.pop(k) for k in list(options) if k not in self.known}
        parameters = {
            "job_name": f"fwbench-{campaign}",
            "time": DEFAULT_TIME_MIN,
            "ntasks_per_node": 1,
            "cpus_per_task": cpus,
            "exclusive": True,
            "array_parallelism": self.settings.array_parallelism,
            # submitit tags jobs with a WCKey by default, which clusters that track none refuse
            "wckey": None,
            **options,
        }
        if self.settings.partition:
            parameters["partition"] = self.settings.partition
        if extra:
            parameters["additional_parameters"] = extra
        return parameters

    def groups(self, order, todo: list) -> list[list]:
        return slurm_groups(order, todo)

    def run(self, group: list, run_dir: Path, context: dict, timeout, rerun_shared: int):
        """Yield the ``CellResult`` of each of the group's cells, in the group's order."""
        # one array per group and resource shape (a round may mix distributed and plain cells)
        batches: list[tuple[int, list]] = []
        for cell in group:
            cpus = cell_cpus(cell, self.node_cpus)
            if batches and batches[-1][0] == cpus:
                batches[-1][1].append(cell)
            else:
                batches.append((cpus, [cell]))
        submitted = []
        for cpus, cells in batches:
            self.executor.update_parameters(**self._parameters(context["campaign"], cpus))
            with self.executor.batch():
                jobs = [
                    self.executor.submit(
                        trial.run_trial,
                        cell,
                        run_dir,
                        context,
                        cell.timeout or timeout,
                        rerun_shared,
                    )
                    for cell in cells
                ]
            submitted += list(zip(cells, jobs, strict=True))
        for cell, job in submitted:
            yield self._result(cell, job, run_dir, context)

    def _result(self, cell, job, run_dir: Path, context: dict):
        from submitit.core.utils import UncompletedJobError

        start = time.perf_counter()
        checked = time.monotonic()
        while True:
            force = time.monotonic() - checked > STATE_CHECK_S
            if force:
                checked = time.monotonic()
            if job.done(force_check=force):
                break
            time.sleep(1)
        try:
            return job.result()
        except UncompletedJobError as exc:
            state = job.state
            status = "timeout" if "TIMEOUT" in state else "failed"
            error = f"Slurm job {job.job_id} ended {state} without a result: {str(exc)[-1500:]}"
            return trial.lost_cell(
                cell, run_dir, context, status, error, time.perf_counter() - start
            )
