"""Start a job's workers and collect what each rank wrote.

- ``local``, PyTorch: ``torchrun --standalone`` (``python -m torch.distributed.run``), gloo on CPU.
- ``local``, JAX (and either framework's one-process reference): N processes started here, each
  told its rank, the world size and a coordinator on a free local port (``jax.distributed``).
- ``srun``: inside a Slurm allocation, one ``srun --overlap`` step of N tasks, one core each;
  each task reads its rank from ``SLURM_PROCID`` and meets the others at a coordinator on the
  allocation's first node (where this launcher runs). With ``nodes`` above one the tasks spread
  over that many of the allocation's nodes in blocks (ranks 0..k-1 on the first), and the
  coordinator is the first node's address as the others resolve its name.

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

_LAUNCHERS = ("local", "srun")
_WORKER_MODULE = "fwbench.families.distributed.worker"
_LOG_TAIL_CHARS = 3000


class DistributedRunError(RuntimeError):
    """A rank failed, or the launcher never heard from it."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _host_address() -> str:
    """This node's address as the other nodes of an allocation reach it."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _allocation_hosts() -> list[str]:
    """The hostnames of this Slurm job's nodes, in Slurm's order (``scontrol show hostnames``)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        raise DistributedRunError("launcher srun with nodes: not inside a Slurm allocation")
    answer = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=False
    )
    if answer.returncode != 0:
        raise DistributedRunError(f"scontrol cannot expand {nodelist}: {answer.stderr.strip()}")
    return answer.stdout.split()


def rank_hosts(world_size: int, hosts: list[str]) -> list[str]:
    """The host each rank runs on when the ranks fill ``hosts`` in blocks."""
    per_node = -(-world_size // len(hosts))
    return [hosts[rank // per_node] for rank in range(world_size)]


def _spread_hosts(job: Job, nodes: int) -> list[str]:
    """The allocation's first ``nodes`` hosts (fewer for a smaller world) the ranks spread over."""
    hosts = _allocation_hosts()
    if len(hosts) < nodes:
        raise DistributedRunError(
            f"nodes {nodes}, but this Slurm allocation has {len(hosts)}: {', '.join(hosts)}"
        )
    return hosts[: min(nodes, job.world_size)]


def commands(job: Job, job_path: Path, out: Path, launcher: str, nodes: int = 1) -> list[list[str]]:
    """The command lines that start the job's ranks (one line for torchrun and srun)."""
    n = job.world_size
    worker = [sys.executable, "-m", _WORKER_MODULE, "--job", str(job_path), "--out", str(out)]
    if launcher == "srun":
        if shutil.which("srun") is None:
            raise DistributedRunError("launcher srun: no srun on this machine's PATH")
        if nodes > 1:
            hosts = _spread_hosts(job, nodes)
            # rank 0 runs on the first host and serves the rendezvous there; the port is free
            # here, where Slurm runs a job's script: on its first node
            address = socket.gethostbyname(hosts[0])
            spread = [
                f"--nodes={len(hosts)}",
                f"--nodelist={','.join(hosts)}",
                f"--ntasks-per-node={-(-n // len(hosts))}",
                "--distribution=block",
            ]
        else:
            address, spread = _host_address(), []
        return [
            [
                "srun",
                "--overlap",
                f"--ntasks={n}",
                *spread,
                "--cpus-per-task=1",
                "--kill-on-bad-exit=1",
                *worker,
                "--coordinator",
                f"{address}:{_free_port()}",
            ]
        ]
    if nodes > 1:
        raise DistributedRunError(f"nodes {nodes} needs launcher srun, not {launcher}")
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
                _WORKER_MODULE,
                "--job",
                str(job_path),
                "--out",
                str(out),
            ]
        ]
    # explicit ranks: a kernel inside a Slurm job inherits SLURM_PROCID/SLURM_NTASKS of its own
    # allocation, which must not tell a local worker what world it is in
    coordinator = f"127.0.0.1:{_free_port()}"
    return [
        [*worker, "--rank", str(r), "--world-size", str(n), "--coordinator", coordinator]
        for r in range(n)
    ]


def _worker_env(job: Job) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if job.device == "cpu":
        env["JAX_PLATFORMS"] = "cpu"  # a GPU node's JAX would otherwise take its GPUs
    # torchrun's own variables from an enclosing launch must not leak into a new one
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError:
        return ""


def launch(
    job: Job, out: Path, launcher: str = "local", timeout: float = 1800.0, nodes: int = 1
) -> list[dict]:
    """Run ``job`` with its world size of workers, over ``nodes`` nodes of a Slurm allocation
    where ``launcher`` is srun; returns each rank's result, by rank."""
    job.check()
    if launcher not in _LAUNCHERS:
        raise ValueError(f"launcher must be one of {_LAUNCHERS}, got {launcher!r}")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("rank*.json"):
        stale.unlink()
    job_path = job.save(out / "job.json")
    log_path = out / "launcher.log"
    env = _worker_env(job)
    with open(log_path, "w") as log:
        procs = [
            subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            for cmd in commands(job, job_path, out, launcher, nodes)
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
    where = [""] * job.world_size
    if nodes > 1:
        where = [f" (on {host})" for host in rank_hosts(job.world_size, _spread_hosts(job, nodes))]
    for rank in range(job.world_size):
        path = out / f"rank{rank}.json"
        if not path.is_file():
            problems.append(f"rank {rank}{where[rank]} wrote no result")
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
