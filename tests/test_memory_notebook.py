import json

import pytest

from tests.conftest import REPO, run_cli

RECORDS_MIME = "application/vnd.fwbench.records+json"


@pytest.mark.slow
def test_memory_notebook_runs_through_the_runner(tmp_path):
    campaign = tmp_path / "memory.yaml"
    campaign.write_text(
        f"campaign: memory_test\nsteps:\n  - notebook: {REPO}/notebooks/12_memory\n"
        "    params: {model: bert_encoder, encoder_size: tiny, seq_len: 16, batch_sizes: [2],\n"
        "             profile_iters: 1, timing_iters: 1}\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "memory_test").iterdir()
    (executed,) = (run_dir / "12_memory").glob("*.ipynb")
    notebook = json.loads(executed.read_text())
    records = [
        row
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        for row in output.get("data", {}).get(RECORDS_MIME, [])
    ]
    peaks = {r["mode"]: r["value"] for r in records if r["metric"] == "peak_mem_bytes"}
    assert {"none", "graph", "mu_two@0.5", "checkpoint_every_block"} <= set(peaks)
    assert all(v > 0 for v in peaks.values())
    assert all(r["family"] == "memory" and r["status"] == "ok" for r in records)
    errors = [r["value"] for r in records if r["metric"] == "sim_error_pct"]
    assert errors and all(abs(e) <= 10 for e in errors)
