"""Distributed training across two nodes of a real Slurm (tests/slurm_nodes.py: two slurmd, each
in its own network namespace, hostname and address): one rank on each node in both frameworks,
the float64 gate across the network, and a node that dies in the middle of a job."""

import json
import os
import subprocess
import sys
import time

import duckdb
import pytest

from tests.conftest import REPO, run_cli, running_cluster


@pytest.fixture(scope="module")
def two_nodes():
    from tests.slurm_nodes import TwoNodeCluster, unavailable

    yield from running_cluster(TwoNodeCluster, unavailable)


def _cells(out, campaign) -> dict:
    (run,) = [p for p in (out / campaign).iterdir() if p.is_dir()]
    return json.loads((run / "manifest.json").read_text())["cells"]


def _rows(out, sql: str) -> list[tuple]:
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_world_of_two_puts_one_rank_on_each_node_and_passes_the_float64_gate(
    two_nodes, write_campaign, tmp_path
):
    out = tmp_path / "out"
    # ResNet-18: XLA compiles its float64 step in half MobileNetV3-S's time (tests/test_distributed)
    small = (
        "model: resnet18, world_sizes: [2], nodes: 2, launcher: srun, image_size: 96,\n"
        "             batch_per_worker: 2, steps: 2, warmup: 1, parity_steps: 2,\n"
        "             allreduce_max_bytes: 4096"
    )
    # the float64 gate once, in JAX's cell (its two ranks across the network against one process
    # of each framework); PyTorch's cell trains over the network without it, since the gate of
    # DDP itself is tests/test_distributed.py's and three more launches here cost about a minute
    path = write_campaign(
        "campaign: nodes\nsteps:\n"
        f"  - notebook: 13_distributed\n    params: {{framework: torch, strategy: ddp, {small},\n"
        "             check_parity: false}\n"
        f"  - notebook: 13_distributed\n    params: {{framework: jax, strategy: dp, {small}}}\n"
    )
    proc = run_cli("run", path, "--out", out, "--executor", "slurm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gate = _rows(
        out,
        "select framework, metric, value, status from measurements "
        "where metric like 'dist_fp64_%' order by 1, 2",
    )
    assert [(f, m, s) for f, m, _, s in gate] == [
        ("jax", m, "ok")
        for m in ("dist_fp64_cross_framework_max_rel", "dist_fp64_loss_parity_max_rel")
    ]
    assert all(value <= 1e-9 for _, _, value, _ in gate)
    hosts = _rows(
        out,
        "select framework, extra->>'hosts', extra->>'nodes' from measurements "
        "where metric = 'step_ms' order by 1",
    )
    assert [(f, json.loads(h), n) for f, h, n in hosts] == [
        ("jax", ["n1", "n2"], "2"),
        ("torch", ["n1", "n2"], "2"),
    ]
    # the all-reduce sweep crossed the network too: 1 KB and 4 KB in each framework
    sweep = _rows(
        out,
        "select framework, count(*) from measurements "
        "where metric = 'allreduce_busbw_gbs' group by 1 order by 1",
    )
    assert sweep == [("jax", 2), ("torch", 2)]


def _running_on_both(cluster) -> bool:
    listed = cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%N", check=False).stdout
    return any(line.strip() in ("n[1-2]", "n1,n2") for line in listed.splitlines())


def test_a_node_that_dies_fails_its_cell_by_name_others_go_on_and_resume_runs_it_again(
    two_nodes, write_campaign, tmp_path
):
    out = tmp_path / "out"
    path = write_campaign(
        "campaign: dies\nsteps:\n"
        "  - notebook: STANDIN\n"
        "    params: {behaviour: sleep_unless_env, seconds: 600.0, nodes: 2}\n"
        "  - notebook: STANDIN\n    params: {x: 3}\n"
    )
    runner = subprocess.Popen(
        [sys.executable, "-m", "fwbench", "run", str(path), "--out", str(out),
         "--executor", "slurm"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _running_on_both(two_nodes):
            time.sleep(1)
        assert _running_on_both(two_nodes), "the two-node job never ran"
        two_nodes.kill_node("n2")
        stdout, stderr = runner.communicate(timeout=240)
    finally:
        if runner.poll() is None:
            runner.kill()
        two_nodes.run("scancel", "--user", "root", check=False)
    assert runner.returncode == 1, stdout + stderr
    cells = _cells(out, "dies")
    (sleeper,) = [k for k, c in cells.items() if c["parameters"].get("nodes") == 2]
    (other,) = [k for k in cells if k != sleeper]
    assert cells[other]["status"] == "ok"
    assert cells[sleeper]["status"] == "failed"
    error = cells[sleeper]["error"]
    # the job's kernel dies, or the job ends without a result: either way Slurm's words
    assert "NODE_FAIL" in error and "n2 down" in error and "Not responding" in error, error

    two_nodes.restart_node("n2")
    resumed = run_cli(
        "run", path, "--out", out, "--executor", "slurm", "--resume", env={"STANDIN_OK": "1"}
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 ok, 0 not ok" in resumed.stdout  # only the cell of the dead node ran again
    assert _cells(out, "dies")[sleeper]["status"] == "ok"
    ran_on = _rows(out, "select extra->>'host' from measurements where metric = 'double_x'")
    assert sorted(h for (h,) in ran_on) == ["n1", "n1"]  # a job's script runs on its first node


def test_spreading_over_nodes_is_refused_without_srun_and_slurm_before_anything_is_written(
    write_campaign, tmp_path
):
    out = tmp_path / "out"
    cell = "framework: torch, strategy: ddp, world_sizes: [2], nodes: 2"
    local = write_campaign(
        f"campaign: bad\nsteps:\n  - notebook: 13_distributed\n    params: {{{cell}}}\n", "a.yaml"
    )
    refused = run_cli("run", local, "--out", out)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "launcher: srun" in refused.stderr
    srun = write_campaign(
        f"campaign: bad\nsteps:\n  - notebook: 13_distributed\n"
        f"    params: {{{cell}, launcher: srun}}\n",
        "b.yaml",
    )
    refused = run_cli("run", srun, "--out", out)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "--executor slurm" in refused.stderr
    assert not out.exists()


def test_ranks_fill_nodes_in_blocks_and_a_cell_asks_for_its_share_of_each_node():
    from pathlib import Path

    from fwbench.families.distributed.launch import rank_hosts
    from fwbench.pipeline.campaign import Cell
    from fwbench.pipeline.slurm import cell_cpus, cell_nodes

    assert rank_hosts(2, ["n1", "n2"]) == ["n1", "n2"]
    assert rank_hosts(4, ["n1", "n2"]) == ["n1", "n1", "n2", "n2"]
    assert rank_hosts(3, ["n1", "n2"]) == ["n1", "n1", "n2"]
    assert rank_hosts(1, ["n1"]) == ["n1"]
    spread = Cell("nb", Path("nb.py"), "d", {"world_sizes": [1, 2, 4], "nodes": 2}, step=1)
    assert (cell_nodes(spread), cell_cpus(spread, 8)) == (2, 2)
    one = Cell("nb", Path("nb.py"), "d", {"world_sizes": [1, 3]}, step=1)
    assert (cell_nodes(one), cell_cpus(one, 8)) == (1, 3)


def test_srun_starts_one_step_of_the_world_one_core_a_rank_and_spreads_it_over_nodes(
    tmp_path, monkeypatch
):
    """The srun command lines, without a cluster: within one node as the single-node executor
    runs them, and over two nodes of an allocation (the two-node cluster runs those for real)."""
    from fwbench.families.distributed.job import Job
    from fwbench.families.distributed.launch import DistributedRunError, commands

    tools = tmp_path / "bin"
    tools.mkdir()
    for name, body in (("srun", "exit 0"), ("scontrol", "echo n7; echo n8; echo n9")):
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[7-9]")
    job = Job(framework="torch", strategy="ddp", world_size=2)
    (one,) = commands(job, tmp_path / "job.json", tmp_path, "srun")
    assert one[:4] == ["srun", "--overlap", "--ntasks=2", "--cpus-per-task=1"]
    assert not any(arg.startswith("--nodes") for arg in one)
    monkeypatch.setattr("socket.gethostbyname", lambda host: {"n7": "10.0.0.7"}[host])
    (two,) = commands(job, tmp_path / "job.json", tmp_path, "srun", nodes=2)
    assert two[:7] == [
        "srun",
        "--overlap",
        "--ntasks=2",
        "--nodes=2",
        "--nodelist=n7,n8",
        "--ntasks-per-node=1",
        "--distribution=block",
    ]
    assert two[two.index("--coordinator") + 1].startswith("10.0.0.7:")
    with pytest.raises(DistributedRunError, match="has 3"):
        commands(job, tmp_path / "job.json", tmp_path, "srun", nodes=4)
    with pytest.raises(DistributedRunError, match="needs launcher srun"):
        commands(job, tmp_path / "job.json", tmp_path, "local", nodes=2)
