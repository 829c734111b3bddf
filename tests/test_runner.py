import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import nbformat

from fwbench.results.records import RECORDS_MIME
from tests.conftest import REPO, run_cli

HEALTHY_AND_ABORT = """
campaign: iso
steps:
  - notebook: STANDIN
    grid: {x: [1, 2]}
  - notebook: STANDIN
    params: {behaviour: abort}
"""


def only_run_dir(out, campaign):
    runs = [p for p in (out / campaign).iterdir() if p.is_dir()]
    assert len(runs) == 1
    return runs[0]


def test_a_dying_kernel_is_recorded_and_the_others_still_run(write_campaign, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("run", write_campaign(HEALTHY_AND_ABORT), "--out", out)
    assert proc.returncode == 1, proc.stderr
    run_dir = only_run_dir(out, "iso")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    statuses = {k: c["status"] for k, c in manifest["cells"].items()}
    assert statuses == {
        "standin/behaviour=ok__x=1": "ok",
        "standin/behaviour=ok__x=2": "ok",
        "standin/behaviour=abort": "failed",
    }
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute(
        "select status, metric, value, error from measurements order by cell"
    ).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("failed", "cell_status", None),
        ("ok", "double_x", 2.0),
        ("ok", "double_x", 4.0),
    ]
    assert "Kernel died" in rows[0][3]
    nb = nbformat.read(run_dir / "standin" / "behaviour=ok__x=2.ipynb", as_version=4)
    embedded = [
        o for c in nb.cells for o in c.get("outputs", []) if RECORDS_MIME in o.get("data", {})
    ]
    assert embedded[0]["data"][RECORDS_MIME][0]["cell"] == "behaviour=ok__x=2"


def test_raise_and_timeout_are_classified(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign(
        """
campaign: errs
steps:
  - notebook: STANDIN
    params: {behaviour: raise}
  - notebook: STANDIN
    params: {behaviour: sleep, seconds: 30.0}
"""
    )
    proc = run_cli("run", path, "--out", out, "--timeout", "3")
    assert proc.returncode == 1
    cells = json.loads((only_run_dir(out, "errs") / "manifest.json").read_text())["cells"]
    raised = cells["standin/behaviour=raise__seconds=0.0"]
    assert raised["status"] == "failed" and "stand-in asked to fail" in raised["error"]
    assert cells["standin/behaviour=sleep__seconds=30.0"]["status"] == "timeout"


def test_kernel_env_is_the_kernels_environment_from_the_first_attempt(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign(
        """
campaign: kenv
steps:
  - notebook: STANDIN
    params: {behaviour: abort_unless_env}
    kernel_env: {STANDIN_OK: "1"}
"""
    )
    proc = run_cli("run", path, "--out", out)
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out, "kenv")
    cell = json.loads((run_dir / "manifest.json").read_text())["cells"]["standin/default"]
    assert cell["status"] == "ok" and cell["retried"] is False
    nb = nbformat.read(run_dir / "standin" / "default.ipynb", as_version=4)
    assert nb.metadata["fwbench"]["kernel_env"]["STANDIN_OK"] == "1"


def test_retry_env_rescues_a_dead_kernel_and_is_recorded(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign(
        """
campaign: retry
steps:
  - notebook: STANDIN
    params: {behaviour: abort_unless_env}
    retry_env: {STANDIN_OK: "1"}
"""
    )
    proc = run_cli("run", path, "--out", out)
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(out, "retry")
    cell = json.loads((run_dir / "manifest.json").read_text())["cells"]["standin/default"]
    assert cell["status"] == "ok" and cell["retried"] is True
    nb = nbformat.read(run_dir / "standin" / "default.ipynb", as_version=4)
    assert nb.metadata["fwbench"]["retry_env"] == {"STANDIN_OK": "1"}
    load = nb.metadata["fwbench"]["load_average"]
    assert len(load["before"]) == len(load["after"]) == 3 and load["cpus"] >= 1
    contention = nb.metadata["fwbench"]["contention"]
    assert set(contention) == {"other_cpu_frac", "steal_frac", "cpus", "own_cpu_s", "shared"}
    assert 0 <= contention["other_cpu_frac"] <= 1 and cell["contention"] == contention


def test_resume_reruns_only_cells_without_an_ok_result(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign(
        HEALTHY_AND_ABORT.replace("behaviour: abort", "behaviour: abort_unless_env")
    )
    assert run_cli("run", path, "--out", out).returncode == 1
    run_dir = only_run_dir(out, "iso")
    ok_nb = run_dir / "standin" / "behaviour=ok__x=1.ipynb"
    mtime = ok_nb.stat().st_mtime_ns
    # a dry run of the resume lists the one cell it would run
    dry = run_cli("run", path, "--out", out, "--resume", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split() == ["standin/behaviour=abort_unless_env"]
    assert "2 of the 3 selected cells are done" in dry.stderr
    # the environment now lets the failed cell pass; resume re-runs it alone, in the same run
    proc = run_cli("run", path, "--out", out, "--resume", env={"STANDIN_OK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert only_run_dir(out, "iso") == run_dir
    assert ok_nb.stat().st_mtime_ns == mtime
    cells = json.loads((run_dir / "manifest.json").read_text())["cells"]
    assert {c["status"] for c in cells.values()} == {"ok"}
    assert "1 ok, 0 not ok" in proc.stdout


def test_a_run_is_never_resumed_on_another_cpu(write_campaign, tmp_path):
    """Two CPUs sold under one name (a VM's "AMD EPYC") differ in family and model; a run started
    on one is refused on the other, and so is a run that predates the record, before any work."""
    out = tmp_path / "out"
    path = write_campaign(
        HEALTHY_AND_ABORT.replace("behaviour: abort", "behaviour: abort_unless_env")
    )
    assert run_cli("run", path, "--out", out).returncode == 1
    manifest_path = only_run_dir(out, "iso") / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    cpu = manifest["environment"]["cpu"]
    assert cpu["name"] and "isa" in cpu
    for other in ({**cpu, "model": (cpu["model"] or 0) + 1, "family": cpu["family"] or 6}, None):
        manifest["environment"]["cpu"] = other
        manifest_path.write_text(json.dumps(manifest))
        before = manifest_path.read_bytes()
        proc = run_cli("run", path, "--out", out, "--resume", env={"STANDIN_OK": "1"})
        assert proc.returncode == 2
        assert proc.stderr.count("error:") == 1
        assert "start a new one" in proc.stderr
        assert ("does not record" in proc.stderr) == (other is None)
        assert manifest_path.read_bytes() == before


def test_sigkill_leaves_no_result_that_looks_real(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign(
        "campaign: kill\nsteps:\n  - notebook: STANDIN\n    params: {behaviour: sleep, seconds: 60.0}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwbench", "run", str(path), "--out", str(out)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(out.rglob(".*.partial.ipynb")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    run_dir = only_run_dir(out, "kill")
    assert not list(run_dir.glob("*/[!.]*.ipynb"))  # no visible notebook
    ingest = run_cli("ingest", out, "--db", tmp_path / "k.duckdb")
    assert ingest.returncode == 0, ingest.stderr
    con = duckdb.connect(str(tmp_path / "k.duckdb"), read_only=True)
    # the killed cell is indexed as cut (it never ran to the end), never as a result
    rows = con.execute("select status, metric, value from measurements").fetchall()
    assert rows == [("cut", "cell_status", None)]


def test_a_second_runner_on_the_same_folder_is_refused(write_campaign, tmp_path):
    from fwbench.pipeline.runner import RunnerBusy, output_lock

    out = tmp_path / "out"
    with output_lock(out):
        try:
            with output_lock(out):
                raise AssertionError("the second lock should have been refused")
        except RunnerBusy as exc:
            assert "another fwbench run" in str(exc)
        proc = run_cli(
            "run", write_campaign("campaign: busy\nsteps:\n  - notebook: STANDIN\n"), "--out", out
        )
        assert proc.returncode == 2 and "another fwbench run" in proc.stderr


def test_the_kernel_is_told_its_output_folder_absolutely_under_a_relative_out(tmp_path):
    """``make run`` passes a relative ``--out``; the kernel starts in the notebook's folder, so a
    relative FWBENCH_EXECUTED_DIR would name a folder under notebooks/ that does not exist."""
    notebook = REPO / "tests" / "standin" / "executed_dir"
    (tmp_path / "campaign.yaml").write_text(f"campaign: where\nsteps:\n  - notebook: {notebook}\n")
    proc = run_cli("run", "campaign.yaml", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = only_run_dir(tmp_path / "out", "where")
    assert (run_dir / "executed_dir" / "a.marker").is_file()
    con = duckdb.connect(str(tmp_path / "out" / "fwbench.duckdb"), read_only=True)
    (extra,) = con.execute("select extra from measurements").fetchone()
    assert json.loads(extra)["executed_dir"] == str((run_dir / "executed_dir").resolve())
