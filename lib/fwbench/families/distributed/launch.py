"""Start a job's workers and collect what each rank wrote.

- ``local``, PyTorch: ``torchrun --standalone`` (``python -m torch.distributed.run``), gloo on CPU.
- ``local``, JAX (and either framework's one-process reference): N processes started here, each
  told its rank, the world size and a coordinator on a free local port (``jax.distributed``).
- ``srun``: inside a Slurm allocation, one ``srun --overlap`` step of N tasks, one core each;
  each task reads its rank from ``SLURM_PROCID`` and meets the others at a coordinator on the
  allocation's first node (where this launcher runs).

Every worker writes ``rank<R>.json`` into the job's folder; a rank that failed, or wrote nothing,
makes ``launch`` raise ``DistributedRunError`` naming the rank and its error, with the tail of
the launcher's log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from fwbench.families.distributed.job import Job

LAUNCHERS = ("local", "srun")
WORKER_MODULE = "fwbench.families.distributed.worker"
LOG_TAIL_CHARS = 3000


class DistributedRunError(RuntimeError):
    """A rank failed, or the launcher never heard from it."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def host_address() -> str:
    """This node's address as the other nodes of an allocation reach it."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def commands(job: Job, job_path: Path, out: Path, launcher: str) -> list[list[str]]:
    """The command lines that start the job's ranks (one line for torchrun and srun)."""
    n = job.world_size
    worker = [sys.executable, "-m", WORKER_MODULE, "--job", str(job_path), "--out", str(out)]
    if launcher == "srun":
        if shutil.which("srun") is None:
            raise DistributedRunError("launcher srun: no srun on this machine's PATH")
        coordinator = f"{host_address()}:{free_port()}"
        return [
            [
                "srun",
                "--overlap",
                f"--ntasks={n}",
                "--cpus-per-task=1",
                "--kill-on-bad-exit=1",
                *worker,
                "--coordinator",
                coordinator,
            ]
        ]
    if job.framework == "torch" and job.strategy != "none":
        return [
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nnodes=1",
                f"--nproc-per-node={n}",
                "-m",
                WORKER_MODULE,
                "--job",
                str(job_path),
                "--out",
                str(out),
            ]
        ]
    # explicit ranks: a kernel inside a Slurm job inherits SLURM_PROCID/SLURM_NTASKS of its own
    # allocation, which must not tell a local worker what world it is in
    coordinator = f"127.0.0.1:{free_port()}"
    return [
        [*worker, "--rank", str(r), "--world-size", str(n), "--coordinator", coordinator]
        for r in range(n)
    ]


def worker_env(job: Job) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if job.device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"  # a GPU node's JAX would otherwise take its GPUs
    # torchrun's own variables from an enclosing launch must not leak into a new one
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""


def launch(job: Job, out: Path, launcher: str = "local", timeout: float = 1800.0) -> list[dict]:
    """Run ``job`` with its world size of workers; returns each rank's result, by rank."""
    job.check()
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {LAUNCHERS}, got {launcher!r}")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("rank*.json"):
        stale.unlink()
    job_path = job.save(out / "job.json")
    log_path = out / "launcher.log"
    env = worker_env(job)
    with open(log_path, "w") as log:
        procs = [
            subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            for cmd in commands(job, job_path, out, launcher)
        ]
        try:
            for proc in procs:
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            raise DistributedRunError(
                f"{job.framework} {job.strategy} at world size {job.world_size}: no result "
                f"within {timeout:.0f} s\n{_tail(log_path)}"
            ) from None
    results, problems = [], []
    for rank in range(job.world_size):
        path = out / f"rank{rank}.json"
        if not path.is_file():
            problems.append(f"rank {rank} wrote no result")
            continue
        result = json.loads(path.read_text())
        if "error" in result:
            problems.append(f"rank {rank}: {result['error']}\n{result.get('traceback', '')}")
        results.append(result)
    if problems:
        raise DistributedRunError(
            f"{job.framework} {job.strategy} at world size {job.world_size} failed: "
            + "\n".join(problems)
            + f"\nlauncher log ({log_path}):\n{_tail(log_path)}"
        )
    return results
