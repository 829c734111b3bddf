"""``fwbench run --executor slurm`` on a real single-node Slurm (tests/slurm_cluster.py): the
manifest, the failures, ``--resume`` and the exit status mean what they mean locally."""

import json
import os
import subprocess
import sys
import time

import duckdb

from tests.conftest import REPO, run_cli

THREE_KINDS = """
campaign: kinds
steps:
  - notebook: STANDIN
    grid: {x: [1, 2]}
  - notebook: STANDIN
    params: {behaviour: raise}
  - notebook: STANDIN
    params: {behaviour: abort}
"""


def _run_dir(out, campaign):
    (run,) = [p for p in (out / campaign).iterdir() if p.is_dir()]
    return run


def _cells(run_dir) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())["cells"]


def _squeue(cluster, states: str) -> list[str]:
    """The ids of the test cluster's jobs in ``states`` (finished ones stay listed under "all")."""
    return cluster.run("squeue", "-h", "-t", states, "-o", "%i").stdout.split()


def _number(job: str) -> int:
    """A job id's number ("12" of "12" or of an array task's "12_0")."""
    return int(job.split("_")[0])


def test_a_campaign_on_slurm_leaves_the_manifest_a_local_run_leaves(
    slurm_cluster, write_campaign, tmp_path
):
    path = write_campaign(THREE_KINDS)
    local = run_cli("run", path, "--out", tmp_path / "local")
    slurm = run_cli("run", path, "--out", tmp_path / "slurm", "--executor", "slurm")
    assert local.returncode == slurm.returncode == 1, slurm.stderr
    local_cells = _cells(_run_dir(tmp_path / "local", "kinds"))
    slurm_cells = _cells(_run_dir(tmp_path / "slurm", "kinds"))
    assert (
        {k: c["status"] for k, c in slurm_cells.items()}
        == {k: c["status"] for k, c in local_cells.items()}
        == {
            "standin/behaviour=ok__x=1": "ok",
            "standin/behaviour=ok__x=2": "ok",
            "standin/behaviour=raise": "failed",
            "standin/behaviour=abort": "failed",
        }
    )
    assert "stand-in asked to fail" in slurm_cells["standin/behaviour=raise"]["error"]
    assert "Kernel died" in slurm_cells["standin/behaviour=abort"]["error"]
    # each cell ran in a job of its own on the node, with its own contention reading
    assert all(c["contention"] is not None for c in slurm_cells.values())
    assert list((_run_dir(tmp_path / "slurm", "kinds") / ".slurm").iterdir())
    con = duckdb.connect(str(tmp_path / "slurm" / "fwbench.duckdb"), read_only=True)
    values = con.execute(
        "select value from measurements where metric = 'double_x' order by value"
    ).fetchall()
    assert values == [(2.0,), (4.0,)]


def test_resume_runs_again_a_cell_whose_job_was_cancelled(slurm_cluster, write_campaign, tmp_path):
    out = tmp_path / "out"
    before = max(map(_number, _squeue(slurm_cluster, "all")), default=0)
    path = write_campaign(
        "campaign: cancel\nsteps:\n  - notebook: STANDIN\n"
        "  - notebook: STANDIN\n    params: {behaviour: sleep_unless_env, seconds: 600.0}\n"
    )
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fwbench",
            "run",
            str(path),
            "--out",
            str(out),
            "--executor",
            "slurm",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first, sleeper = (
        "standin/behaviour=ok__seconds=0.0",
        ("standin/behaviour=sleep_unless_env__seconds=600.0"),
    )
    # Cancel the sleeper's job and no other: when the first cell reads ok in the manifest, its
    # own job may still be listed RUNNING while Slurm finishes it. Job ids only grow, so the
    # first cell's job is the lowest one this run submitted and the sleeper's comes after it.
    deadline = time.monotonic() + 180
    first_job: int | None = None
    cancelled = False
    try:
        while time.monotonic() < deadline and not cancelled:
            time.sleep(1)
            if first_job is None:
                runs = list((out / "cancel").glob("*/manifest.json"))
                if not runs or _cells(runs[0].parent).get(first, {}).get("status") != "ok":
                    continue
                first_job = min(
                    n for n in map(_number, _squeue(slurm_cluster, "all")) if n > before
                )
            sleeping = [j for j in _squeue(slurm_cluster, "RUNNING") if _number(j) > first_job]
            if sleeping:
                slurm_cluster.run("scancel", *sleeping)
                cancelled = True
        assert cancelled, "the sleeping cell's job never ran"
        stdout, stderr = runner.communicate(timeout=180)
    finally:
        if runner.poll() is None:
            runner.kill()
            # a job left sleeping would hold the node from the tests after this one
            slurm_cluster.run("scancel", "--user", "root", check=False)
    assert runner.returncode == 1, stderr
    cells = _cells(_run_dir(out, "cancel"))
    assert cells[first]["status"] == "ok"
    assert cells[sleeper]["status"] == "failed"
    assert "CANCELLED" in cells[sleeper]["error"]

    resumed = run_cli(
        "run", path, "--out", out, "--executor", "slurm", "--resume", env={"STANDIN_OK": "1"}
    )
    assert resumed.returncode == 0, resumed.stderr
    cells = _cells(_run_dir(out, "cancel"))
    assert cells[sleeper]["status"] == "ok"
    assert "1 ok, 0 not ok" in resumed.stdout  # only the cancelled cell ran again


def test_bad_executors_are_refused_before_anything_is_written(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign("campaign: bad\nsteps:\n  - notebook: STANDIN\n")
    unknown = run_cli("run", path, "--out", out, "--executor", "kubernetes")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().count("\n") == 0 and "--executor" in unknown.stderr
    # a PATH without any Slurm command: nothing answers
    no_slurm = run_cli(
        "run",
        path,
        "--out",
        out,
        "--executor",
        "slurm",
        env={"PATH": os.path.dirname(sys.executable)},
    )
    assert no_slurm.returncode == 2
    assert no_slurm.stderr.strip().count("\n") == 0 and "no Slurm here" in no_slurm.stderr
    stray = run_cli("run", path, "--out", out, "--partition", "gpu")
    assert stray.returncode == 2 and "--executor slurm" in stray.stderr
    assert not out.exists()


def test_job_arrays_follow_steps_then_rounds_and_cells_ask_for_their_cores():
    from pathlib import Path

    from fwbench.pipeline.campaign import Cell, RunOrder
    from fwbench.pipeline.slurm import cell_cpus, parse_options, slurm_groups

    def cell(name, step, interleaved=False, **params):
        return Cell("nb", Path("nb.py"), name, params, step=step, interleaved=interleaved)

    setup, cal_a, cal_b = cell("setup", 1), cell("cal_a", 2), cell("cal_b", 2)
    t1, t2, u1, u2 = (cell(n, 3 if n[0] == "t" else 4, True) for n in ("t1", "t2", "u1", "u2"))
    order = RunOrder(
        "interleaved",
        0,
        ["nb/setup", "nb/cal_a", "nb/cal_b"],
        [["nb/u1", "nb/t1"], ["nb/t2", "nb/u2"]],
    )
    groups = slurm_groups(order, [setup, cal_a, cal_b, t1, t2, u1, u2])
    assert [[c.slug for c in g] for g in groups] == [
        ["setup"],
        ["cal_a", "cal_b"],
        ["u1", "t1"],
        ["t2", "u2"],
    ]
    # a resumed run: only what is left, in the recorded order
    assert [[c.slug for c in g] for g in slurm_groups(order, [cal_b, u2])] == [["cal_b"], ["u2"]]
    assert cell_cpus(cell("d", 1, world_sizes=[1, 2, 4]), 8) == 4
    assert cell_cpus(cell("i", 1, threads=1), 8) == 1
    assert cell_cpus(cell("w", 1), 8) == 8
    assert parse_options(["time=60", "exclusive=false", "account=ml"]) == {
        "time": 60,
        "exclusive": False,
        "account": "ml",
    }
