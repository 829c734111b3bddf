"""A real single-node Slurm for the tests: Debian's munged, slurmctld and slurmd, started as child
processes in the foreground with a private configuration, and stopped afterwards.

Everything lives in one folder under /tmp with mode 0755: munged refuses a socket unless every
folder above it may be searched by anyone, which pytest's 0700 temporary folders are not. Ports
are free ones, the node is ``localhost`` (127.0.0.1), and accounting is off, so ``sacct`` has
nothing to say: ``tests/slurm_bin/sacct`` answers from ``squeue --states=all`` instead (finished
jobs stay listed for ``MinJobAge``), which is all submitit asks of it; without it submitit reads
a cancelled job's state as UNKNOWN and waits for its result forever.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SLURM_BIN = Path(__file__).resolve().parent / "slurm_bin"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "squeue", "scancel", "scontrol")
NODE = "localhost"
START_TIMEOUT_S = 60


def unavailable() -> str | None:
    """Why no cluster can start here, or None."""
    missing = [tool for tool in DAEMONS + CLIENTS if shutil.which(tool) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing; `make slurm` installs it)"
    if os.geteuid() != 0:
        return "the Slurm daemons of the tests run as root"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="fwbench-slurm-", dir="/tmp"))
        self.root.chmod(0o755)
        self.procs: list[subprocess.Popen] = []
        self.conf = self.root / "slurm.conf"
        self.env = {
            "SLURM_CONF": str(self.conf),
            "PATH": f"{SLURM_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.out", "w")
        self.procs.append(
            subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        )

    def start_munge(self) -> Path:
        """Start munged on a socket in this cluster's folder; returns the socket's path."""
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = munge / "munge.socket"
        self._start(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={socket_path}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={munge / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
        )
        self._wait(lambda: socket_path.exists(), "munged to open its socket")
        (self.root / "state").mkdir(mode=0o755)
        return socket_path

    def common_conf(self, socket_path: Path) -> list[str]:
        """The slurm.conf lines every test cluster shares (no controller host, no nodes)."""
        return [
            "ClusterName=fwbench",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SlurmdParameters=config_overrides",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=3600",
            "KillWait=5",
        ]

    def start(self) -> Cluster:
        socket_path = self.start_munge()
        (self.root / "spool").mkdir(mode=0o755)
        cpus = len(os.sched_getaffinity(0))
        lines = self.common_conf(socket_path) + [
            f"SlurmctldHost={NODE}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmdLogFile={self.root / 'slurmd.log'}",
            f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._start("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(self.conf)])
        self._wait(self._node_idle, "the node to be idle")
        return self

    def _node_idle(self) -> bool:
        answer = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return answer.returncode == 0 and answer.stdout.strip().startswith("idle")

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.5)
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted(self.root.rglob("*.out")) + sorted(self.root.rglob("*.log"))
        )
        self.stop()
        raise RuntimeError(f"the test cluster never got {what}\n{logs}")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        )

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.run("scancel", "--user", "root", check=False)
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
