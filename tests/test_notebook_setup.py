import json

import duckdb

from tests.conftest import REPO, run_cli


def test_setup_notebook_runs_through_the_runner(tmp_path):
    campaign = tmp_path / "setup.yaml"
    campaign.write_text(
        f"campaign: setup_test\nsteps:\n  - notebook: {REPO}/notebooks/00_setup\n"
        "    params: {device: cpu, check_compile: false, matmul_size: 64}\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "setup_test").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["environment"]["packages"]["torch"]
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    checks = con.execute(
        "select framework, status, extra->>'check' from measurements where metric = 'check_passed'"
    ).fetchall()
    assert ("torch", "ok", "fp32 matmul vs float64 numpy") in checks
    assert ("jax", "ok", "fp32 matmul vs float64 numpy") in checks
    assert all(status == "ok" for _, status, _ in checks)
