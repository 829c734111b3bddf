"""What a GPU lease's reports say of their runs: the commit that ran, the cells the time cap cut.

A node's copy of the checkout once carried a stale ``.git``, so its runs' environments named a
commit that did not run; gpu/run.sh now puts the kit's commit file beside each run's manifest and
the index takes the commit from there. A run the cap stopped leaves cells ``pending`` in its
manifest and no notebook for them; the index holds them as ``cut``, so the report names them
instead of saying that every cell ran and nothing failed.
"""

from __future__ import annotations

import json

import pandas as pd

from fwbench.families.analysis import analysis_report
from fwbench.report import sentences, tables
from fwbench.results import db
from fwbench.vocab import KIT_COMMIT_FILE
from tests.test_db import make_run

STALE = "970d508c18482bc1143c6f64b1f5985159a65f43-dirty"
KIT = "27435bb55624017d62fb3289c4a7a7623e450132"


def _manifest(run_dir, **changes):
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    for key, value in changes.items():
        manifest[key] = {**manifest.get(key, {}), **value}
    path.write_text(json.dumps(manifest))


def _load(tmp_path, run_dir):
    dbp = tmp_path / "x.duckdb"
    db.ingest(tmp_path, dbp)
    con = db.connect(dbp, read_only=True)
    try:
        run_id = run_dir.name
        return (
            tables.load_run(con, "demo", run_id),
            tables.load_cells(con, "demo", run_id),
            tables.load_measurements(con, "demo", run_id),
        )
    finally:
        con.close()


def test_the_report_names_the_kits_commit_not_the_copys_stale_checkout(tmp_path):
    run_dir = make_run(tmp_path)
    _manifest(run_dir, environment={"git_sha": STALE})
    (run_dir / KIT_COMMIT_FILE).write_text(f"{KIT} clean\n")
    run, _, _ = _load(tmp_path, run_dir)
    assert run["git_sha"] == KIT
    words = tables.commit_words(run)
    assert words.startswith(f"`{KIT}`") and "kit" in words and STALE in words


def test_a_dirty_kit_says_so_and_a_run_without_a_kit_keeps_its_own_commit(tmp_path):
    run_dir = make_run(tmp_path)
    _manifest(run_dir, environment={"git_sha": STALE})
    (run_dir / KIT_COMMIT_FILE).write_text(f"{KIT} dirty\n")
    assert _load(tmp_path, run_dir)[0]["git_sha"] == f"{KIT}-dirty"
    (run_dir / KIT_COMMIT_FILE).unlink()
    run = _load(tmp_path, run_dir)[0]
    assert run["git_sha"] == STALE
    assert tables.commit_words(run) == f"`{STALE}`"
    assert tables.commit_words({"environment": {}}) == "an unrecorded commit"


def test_cells_the_cap_cut_are_reported_as_cut(tmp_path):
    run_dir = make_run(tmp_path)
    pending = {
        "notebook": "10_inference",
        "slug": "model=efficientnet_b0",
        "trial": 0,
        "parameters": {"model": "efficientnet_b0", "framework": "jax", "precision": "fp32"},
        "status": "pending",
    }
    setup = {"notebook": "00_setup", "slug": "default", "trial": 0, "parameters": {}}
    ran = {"notebook": "10_inference", "slug": "model=resnet50", "trial": 0, "status": "ok"}
    _manifest(
        run_dir,
        cells={
            "10_inference/model=resnet50": ran,
            "10_inference/model=efficientnet_b0": pending,
            "00_setup/default": {**setup, "status": "pending"},
        },
    )
    _, cells, meas = _load(tmp_path, run_dir)
    cut = db.query("select * from cells where status = 'cut' order by cell", tmp_path / "x.duckdb")
    assert cut.cell.tolist() == ["default", "model=efficientnet_b0"]
    assert cut.path.isna().all() and cut.duration_s.isna().all()
    # the report's cells are those that ran; the cut ones reach it through their records
    assert cells.cell.tolist() == ["model=resnet50"]
    failures = analysis_report.failures_table(meas, cells)
    assert sorted(failures.status) == [db.CUT, db.CUT]
    row = failures[failures.cell == "model=efficientnet_b0"].iloc[0]
    assert (row.model, row.framework, row.precision) == ("efficientnet_b0", "jax", "fp32")
    assert row.error.startswith("not run")
    said = sentences.failure_sentence(failures, analysis_report.retries_table(cells))
    assert not said.startswith("Every cell ran")
    assert "2 cut before they ran to the end" in said


def test_failures_and_cut_cells_are_counted_apart():
    failures = pd.DataFrame({"status": ["failed", db.CUT]})
    said = sentences.failure_sentence(failures, pd.DataFrame())
    assert said.startswith("Not every measurement succeeded: 1 failed, 1 cut before it ran")
    quiet = sentences.failure_sentence(pd.DataFrame(), pd.DataFrame())
    assert quiet.startswith("Every cell ran to completion")
