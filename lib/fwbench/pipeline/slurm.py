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
  ``launcher: srun``, or torchrun). A cell with ``nodes: N`` asks for N nodes, each with its
  share of the CPUs; its notebook runs on the first node (an ``srun`` step of one task there)
  and spreads its workers over all N.
- Jobs are not requeued (``--no-requeue``): a job whose node fails is a failed cell, named with
  the node and Slurm's reason for taking it out of service, and ``--resume`` runs it again.
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

_SINFO_TIMEOUT_S = 15
# how often the runner asks Slurm for the state of the job it waits for; submitit's own watcher
# backs off to once in 10 minutes for old jobs, which would leave a cancelled job unnoticed
_STATE_CHECK_S = 15
# sbatch's --time when nothing says otherwise: a campaign's longest cells take tens of minutes
_DEFAULT_TIME_MIN = 240
# the job states in which Slurm, not the cell, ended the job
_FAILED_STATES = ("NODE_FAIL", "CANCELLED", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL")


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
        ["sinfo", *args], capture_output=True, text=True, timeout=_SINFO_TIMEOUT_S, check=False
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
            f"--executor slurm: the Slurm controller did not answer within {_SINFO_TIMEOUT_S} s"
        ) from None
    if answer.returncode != 0:
        last = (answer.stderr.strip().splitlines() or ["sinfo failed"])[-1]
        raise SlurmUnavailable(f"--executor slurm: Slurm is not reachable ({last})")
    cpus = [int(c.rstrip("+")) for c in answer.stdout.split() if c.rstrip("+").isdigit()]
    if not cpus:
        where = f"partition {settings.partition!r}" if settings.partition else "the cluster"
        raise SlurmUnavailable(f"--executor slurm: {where} has no nodes")
    return min(cpus)


def cell_nodes(cell) -> int:
    """Nodes one cell's job asks for: its ``nodes`` parameter, else one."""
    return max(1, int(cell.parameters.get("nodes", 1)))


def cell_cpus(cell, node_cpus: int) -> int:
    """CPUs per node one cell's job asks for: a distributed cell's largest world size shared over
    its nodes, else the cell's ``threads`` where it pins them, else the whole node."""
    params = cell.parameters
    if "world_sizes" in params:
        largest = max(int(n) for n in params["world_sizes"])
        return -(-largest // cell_nodes(cell))
    threads = params.get("threads")
    if isinstance(threads, int) and threads > 0:
        return threads
    return node_cpus


def _settled_state(job, wait_s: float = 30.0) -> str:
    """The job's state once Slurm has settled it (no longer running or completing), or as it
    stands after ``wait_s``: a job's task can write its result while Slurm is still ending it."""
    deadline = time.monotonic() + wait_s
    while True:
        job.done(force_check=True)  # refreshes submitit's reading of the state
        state = str(job.state)
        unsettled = any(w in state for w in ("RUNNING", "COMPLETING", "PENDING", "UNKNOWN"))
        if not unsettled or time.monotonic() > deadline:
            return state
        time.sleep(1)


def _where_it_failed(job_id: str) -> str:
    """The nodes a job ran on and Slurm's reason for any of them it took out of service, as
    `` (on n[1-2]; n2 down: Not responding)``, from squeue (finished jobs stay listed a while)
    and ``sinfo -R``; empty where Slurm no longer says."""

    def ask(*args: str) -> str:
        try:
            answer = subprocess.run(
                list(args), capture_output=True, text=True, timeout=_SINFO_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return answer.stdout.strip() if answer.returncode == 0 else ""

    nodes = ask("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%N")
    if not nodes:
        return ""
    reasons = ask("sinfo", "-h", "-R", "-n", nodes, "-o", "%N %T: %E")
    return f" (on {nodes}" + "".join(f"; {line}" for line in reasons.splitlines()) + ")"


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

    def _parameters(self, campaign: str, cpus: int, nodes: int = 1) -> dict:
        options = dict(self.settings.options)
        extra = {"no_requeue": True}
        extra |= {k: options.pop(k) for k in list(options) if k not in self.known}
        srun_args: list[str] = []
        if nodes > 1:
            # submitit counts the job's tasks from its own ``nodes``: left at 1, it waits for one
            # result, and the function runs as one task on the first node
            extra["nodes"] = nodes
            srun_args = ["--nodes=1", "--ntasks=1"]
        parameters = {
            "job_name": f"fwbench-{campaign}",
            "time": _DEFAULT_TIME_MIN,
            "ntasks_per_node": 1,
            "cpus_per_task": cpus,
            "exclusive": True,
            "array_parallelism": self.settings.array_parallelism,
            # submitit tags jobs with a WCKey by default, which clusters that track none refuse
            "wckey": None,
            # set on every update: submitit keeps what an earlier group's update set
            "srun_args": srun_args,
            "additional_parameters": extra,
            **options,
        }
        if self.settings.partition:
            parameters["partition"] = self.settings.partition
        return parameters

    def groups(self, order, todo: list) -> list[list]:
        return slurm_groups(order, todo)

    def run(self, group: list, run_dir: Path, context: dict, timeout, rerun_shared: int):
        """Yield the ``CellResult`` of each of the group's cells, in the group's order."""
        # one array per group and resource shape (a round may mix distributed and plain cells)
        batches: list[tuple[tuple[int, int], list]] = []
        for cell in group:
            shape = (cell_cpus(cell, self.node_cpus), cell_nodes(cell))
            if batches and batches[-1][0] == shape:
                batches[-1][1].append(cell)
            else:
                batches.append((shape, [cell]))
        submitted = []
        for (cpus, nodes), cells in batches:
            self.executor.update_parameters(**self._parameters(context["campaign"], cpus, nodes))
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
            force = time.monotonic() - checked > _STATE_CHECK_S
            if force:
                checked = time.monotonic()
            if job.done(force_check=force):
                break
            time.sleep(1)
        try:
            result = job.result()
        except UncompletedJobError as exc:
            state = job.state
            status = "timeout" if "TIMEOUT" in state else "failed"
            where = _where_it_failed(job.job_id)
            error = (
                f"Slurm job {job.job_id} ended {state} without a result{where}: {str(exc)[-1500:]}"
            )
            return trial.lost_cell(
                cell, run_dir, context, status, error, time.perf_counter() - start
            )
        if result.status != "ok":
            # a job Slurm ended (a node lost, cancelled) may still write its cell's result: its
            # kernel died under it. Say what Slurm did, and where.
            state = _settled_state(job)
            if any(word in state for word in _FAILED_STATES):
                note = f" (Slurm job {job.job_id} ended {state}{_where_it_failed(job.job_id)})"
                result = trial.with_error_note(result, run_dir, note)
        return result
