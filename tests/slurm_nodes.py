"""A real two-node Slurm on one machine for the tests: one ``slurmctld``, and two ``slurmd``
daemons, each in a network and UTS namespace of its own, so each node has its own hostname and
address and its tasks talk to the other node's over a network interface, as on a cluster.

- A bridge in the host's namespace carries a /24 chosen free on this machine; each node's
  namespace gets one end of a veth pair on it (``.11``, ``.12``), the bridge itself is ``.1``.
- ``slurmctld`` runs in the host's namespace under ``unshare --uts`` with the hostname ``ctl``
  (it only starts where its hostname matches ``SlurmctldHost``); client commands reach it at the
  bridge's address.
- Each ``slurmd`` starts through ``nsenter --net`` into its namespace and ``unshare --uts
  --mount``: a private mount namespace, where a hosts file naming ``ctl``, ``n1`` and ``n2`` is
  bound over ``/etc/hosts`` (so a task resolves the other node's name), and its own hostname.
  Not ``ip netns exec``: that mounts a fresh ``/sys``, which hides the cgroup tree slurmd 22.05
  needs.
- One munged, in the host's namespace: its socket is a file, which every namespace reaches.
- Bridged traffic must not go through the host's firewall (``bridge-nf-call-iptables``), or the
  nodes' collectives hang where the FORWARD chain drops; the setting is restored at ``stop``.
- ``kill_node`` kills one node outright (its slurmd and every process in its namespace), as a
  node that dies; ``restart_node`` brings its slurmd back, and Slurm returns it to service.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.slurm_cluster import Cluster
from tests.slurm_cluster import unavailable as single_node_unavailable

NODES = ("n1", "n2")
BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
# a node is declared dead this long after its slurmd stops answering (Slurm's minimum is
# about a third of it, the controller's ping period, times three)
SLURMD_TIMEOUT_S = 10


def unavailable() -> str | None:
    """Why no two-node cluster can start here, or None."""
    reason = single_node_unavailable()
    if reason:
        return reason
    missing = [tool for tool in ("ip", "nsenter", "unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return f"the two-node cluster needs {', '.join(missing)} (iproute2, util-linux)"
    return None


def _sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True, timeout=30)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 no interface of this machine is on, drawn from the process id."""
    taken = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    for i in range(256):
        third = (os.getpid() + i) % 256
        net = ipaddress.IPv4Network(f"10.211.{third}.0/24")
        if f"10.211.{third}." not in taken:
            return net
    raise RuntimeError("no free 10.211.x.0/24 on this machine")


class TwoNodeCluster(Cluster):
    def __init__(self):
        super().__init__()
        tag = self.root.name.rsplit("-", 1)[-1][-6:]
        self.bridge = f"fwb{tag}"  # interface names have at most 15 characters
        self.namespaces = {node: f"fwbench-{tag}-{node}" for node in NODES}
        self.veths = {node: (f"fwh{tag}{node}", f"fwn{tag}{node}") for node in NODES}
        subnet = _free_subnet()
        hosts = list(subnet.hosts())
        self.ctl_address = str(hosts[0])
        self.addresses = {node: str(hosts[10 + i]) for i, node in enumerate(NODES)}
        self.prefix = subnet.prefixlen
        self.bridge_nf: str | None = None
        self.slurmd: dict[str, subprocess.Popen] = {}

    # --- the network -------------------------------------------------------------------------
    def _network(self) -> None:
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.ctl_address}/{self.prefix}", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        if BRIDGE_NF.exists():
            self.bridge_nf = BRIDGE_NF.read_text().strip()
            BRIDGE_NF.write_text("0")
        for node in NODES:
            ns, (host_end, node_end) = self.namespaces[node], self.veths[node]
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end)
            _sh("ip", "link", "set", node_end, "netns", ns)
            _sh("ip", "link", "set", host_end, "master", self.bridge, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.addresses[node]}/{self.prefix}",
                "dev", node_end)  # fmt: skip
            _sh("ip", "-n", ns, "link", "set", node_end, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        hosts = ["127.0.0.1 localhost", f"{self.ctl_address} ctl"]
        hosts += [f"{address} {node}" for node, address in self.addresses.items()]
        (self.root / "hosts").write_text("\n".join(hosts) + "\n")

    def _teardown_network(self) -> None:
        for ns in self.namespaces.values():
            self._kill_namespace(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        if self.bridge_nf is not None:
            with contextlib.suppress(OSError):
                BRIDGE_NF.write_text(self.bridge_nf)

    @staticmethod
    def _kill_namespace(ns: str) -> None:
        """SIGKILL every process in network namespace ``ns``: a node's tasks outlive its slurmd."""
        pids = subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    # --- the daemons -------------------------------------------------------------------------
    def start(self) -> TwoNodeCluster:
        try:
            self._network()
        except subprocess.CalledProcessError as exc:
            self.stop()
            raise RuntimeError(
                f"the two-node cluster's network could not be set up: {' '.join(exc.cmd)}: "
                f"{exc.stderr.strip()}"
            ) from None
        socket_path = self.start_munge()
        cpus = len(os.sched_getaffinity(0))
        for node in NODES:
            (self.root / node / "spool").mkdir(parents=True, mode=0o755)
        lines = self.common_conf(socket_path) + [
            f"SlurmctldHost=ctl({self.ctl_address})",
            f"SlurmdSpoolDir={self.root / '%n' / 'spool'}",
            f"SlurmdPidFile={self.root / '%n' / 'slurmd.pid'}",
            f"SlurmdLogFile={self.root / '%n' / 'slurmd.log'}",
            f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        ]
        lines += [
            f"NodeName={node} NodeAddr={address} NodeHostname={node} CPUs={cpus} State=UNKNOWN"
            for node, address in self.addresses.items()
        ]
        lines.append(
            f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")
        self._start(
            "slurmctld",
            ["unshare", "--uts", "sh", "-c",
             f'hostname ctl && exec slurmctld -D -i -f "{self.conf}"'],
        )  # fmt: skip
        for node in NODES:
            self.restart_node(node, wait=False)
        self._wait(self._nodes_idle, "both nodes to be idle")
        return self

    def restart_node(self, node: str, wait: bool = True) -> None:
        """Start ``node``'s slurmd in its namespaces (again, after ``kill_node``)."""
        script = (
            f'mount --bind "{self.root / "hosts"}" /etc/hosts && hostname {node} && '
            f'exec slurmd -D -N {node} -f "{self.conf}"'
        )
        self._start(
            f"slurmd-{node}",
            ["nsenter", f"--net=/run/netns/{self.namespaces[node]}",
             "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", script],
        )  # fmt: skip
        self.slurmd[node] = self.procs[-1]
        if wait:
            self._wait(self._nodes_idle, f"{node} to be back and idle")

    def kill_node(self, node: str) -> None:
        """``node`` dies: its slurmd and everything running in its namespace, at once."""
        proc = self.slurmd.pop(node)
        self.procs.remove(proc)
        self._kill_namespace(self.namespaces[node])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def node_states(self) -> dict[str, str]:
        answer = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        if answer.returncode != 0:
            return {}
        return dict(line.split() for line in answer.stdout.splitlines() if line.strip())

    def _nodes_idle(self) -> bool:
        states = self.node_states()
        return all(states.get(node) == "idle" for node in NODES)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.run("scancel", "--user", "root", check=False)
        self._teardown_network()
        super().stop()
