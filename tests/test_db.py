import json

import nbformat
import pytest

from fwbench.results import db
from fwbench.results.records import RECORDS_MIME, Recorder
from tests.conftest import run_cli


def make_run(root, run_id="20260101T000000Z", rows=None, status="ok", machine=None):
    run_dir = root / "demo" / run_id
    (run_dir / "nb").mkdir(parents=True)
    (run_dir / "manifest.json").write_text(
        json.dumps(
            {"campaign": "demo", "run_id": run_id, "environment": {"host": "h"}, "cells": {}}
        )
    )
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    if rows is None:
        rec = Recorder("inference", model="resnet50", framework="jax", batch_size=8)
        rec.add("throughput_img_s", 123.0, "img/s", n=10, ci_low=120.0, ci_high=125.0)
        rows = rec.rows
    cell.outputs = [nbformat.v4.new_output("display_data", data={RECORDS_MIME: rows})]
    nb.cells = [cell]
    nb.metadata["fwbench"] = {
        "run_id": run_id,
        "campaign": "demo",
        "notebook": "10_inference",
        "cell": "model=resnet50",
        "trial": 0,
        "status": status,
        "error": None if status == "ok" else "boom",
        "parameters": {"model": "resnet50", "framework": "jax"},
        **(machine or {}),
    }
    nbformat.write(nb, str(run_dir / "nb" / "model=resnet50.ipynb"))
    return run_dir


def test_ingest_is_idempotent(tmp_path):
    make_run(tmp_path)
    dbp = tmp_path / "x.duckdb"
    assert db.ingest(tmp_path, dbp)["measurements"] == 1
    assert db.ingest(tmp_path, dbp)["measurements"] == 1
    frame = db.query("select * from measurements", dbp)
    assert len(frame) == 1
    row = frame.iloc[0]
    assert (row.model, row.framework, row.value, row.ci_low) == ("resnet50", "jax", 123.0, 120.0)
    assert db.query("select count(*) as n from runs", dbp).n[0] == 1


def test_a_run_deleted_from_disk_leaves_the_index_on_the_next_ingest_of_its_folder(tmp_path):
    import shutil

    kept = make_run(tmp_path)
    gone = make_run(tmp_path, run_id="20260102T000000Z")
    dbp = tmp_path / "x.duckdb"
    assert db.ingest(tmp_path, dbp)["runs"] == 2
    shutil.rmtree(gone)
    # a run folder given alone says nothing of its campaign's other runs: nothing is dropped
    assert db.ingest(kept, dbp)["dropped"] == 0
    assert len(db.query("select * from runs", dbp)) == 1 + 1
    counts = db.ingest(tmp_path, dbp)
    assert (counts["runs"], counts["dropped"]) == (1, 1)
    for table in ("runs", "cells", "measurements"):
        ids = db.query(f"select distinct run_id from {table}", dbp).run_id.tolist()
        assert ids == ["20260101T000000Z"], table
    proc = run_cli("ingest", tmp_path, "--db", dbp)
    assert proc.returncode == 0 and "dropped" not in proc.stdout


def test_the_machine_share_of_a_cell_is_indexed_and_absent_readings_are_null(tmp_path):
    machine = {
        "load_average": {"before": [2.5, 1.0, 0.5], "after": [3.0, 1.2, 0.6], "cpus": 2},
        "contention": {"other_cpu_frac": 0.4, "steal_frac": 0.05, "cpus": 2, "shared": True},
    }
    make_run(tmp_path, machine=machine)
    make_run(tmp_path, run_id="20260102T000000Z")  # written before the meter existed
    dbp = tmp_path / "x.duckdb"
    db.ingest(tmp_path, dbp)
    cols = "load_1m_before, other_cpu_frac, steal_frac, shared_machine"
    rows = db.query(f"select run_id, {cols} from cells order by run_id", dbp)
    assert rows.iloc[0][1:].tolist() == [2.5, 0.4, 0.05, True]
    assert rows.iloc[1][1:].isna().all()


def test_an_index_built_before_the_machine_columns_gains_them(tmp_path):
    import duckdb

    dbp = tmp_path / "old.duckdb"
    con = duckdb.connect(str(dbp))
    con.execute(
        "CREATE TABLE cells (run_id VARCHAR, campaign VARCHAR, notebook VARCHAR, cell VARCHAR, "
        "trial INTEGER, status VARCHAR, error VARCHAR, duration_s DOUBLE, retried BOOLEAN, "
        "retry_env JSON, parameters JSON, path VARCHAR)"
    )
    con.close()
    make_run(tmp_path / "runs")
    db.ingest(tmp_path / "runs", dbp)
    assert "shared_machine" in db.query("select * from cells", dbp).columns


def test_the_thread_count_comes_from_a_loaded_torch_else_the_environment(monkeypatch):
    import os
    import sys
    import types

    from fwbench.results.records import intra_op_threads

    fake_torch = types.SimpleNamespace(get_num_threads=lambda: 3)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    # a process pinned to two cores runs no more than two threads at once, whatever a pool says
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert intra_op_threads() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    rec = Recorder("inference")
    assert rec.add("m", 1.0, "ms")["threads"] == 3
    assert rec.add("m", 1.0, "ms", threads=7)["threads"] == 7  # a notebook that knows better
    monkeypatch.delitem(sys.modules, "torch")
    assert intra_op_threads() == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert intra_op_threads() == 8  # every core the process may use


def test_records_made_before_the_threads_column_ingest_as_null(tmp_path):
    import duckdb

    rec = Recorder("inference", model="resnet50", framework="jax")
    rec.add("throughput_img_s", 1.0, "img/s", threads=4)
    make_run(tmp_path / "runs", rows=rec.rows)
    old_row = {k: v for k, v in rec.rows[0].items() if k != "threads"}
    make_run(tmp_path / "runs", run_id="20250101T000000Z", rows=[old_row])
    # and an index built before the column: it gains it
    dbp = tmp_path / "old.duckdb"
    con = duckdb.connect(str(dbp))
    con.execute(
        "CREATE TABLE measurements (run_id VARCHAR, campaign VARCHAR, notebook VARCHAR, "
        "cell VARCHAR, trial INTEGER, status VARCHAR, error VARCHAR, family VARCHAR, "
        "model VARCHAR, framework VARCHAR, mode VARCHAR, device VARCHAR, device_name VARCHAR, "
        "precision VARCHAR, batch_size INTEGER, metric VARCHAR, value DOUBLE, unit VARCHAR, "
        "n INTEGER, ci_low DOUBLE, ci_high DOUBLE, extra JSON)"
    )
    con.close()
    db.ingest(tmp_path / "runs", dbp)
    rows = db.query("select run_id, threads from measurements order by run_id", dbp)
    assert rows.run_id.tolist() == ["20250101T000000Z", "20260101T000000Z"]
    assert rows.threads.isna().tolist() == [True, False] and rows.threads[1] == 4


def test_failed_cell_gets_a_row_with_its_error(tmp_path):
    make_run(tmp_path, rows=[], status="failed")
    dbp = tmp_path / "x.duckdb"
    db.ingest(tmp_path, dbp)
    frame = db.query("select status, error, family, model from measurements", dbp)
    assert frame.to_dict("records") == [
        {"status": "failed", "error": "boom", "family": "inference", "model": "resnet50"}
    ]


@pytest.mark.parametrize(
    "bad, where",
    [({"value": "fast"}, "value"), ({"status": "great"}, "status"), ({"surprise": 1}, "record")],
)
def test_malformed_record_is_rejected_naming_the_notebook(tmp_path, bad, where):
    row = {"status": "ok", "family": "inference", "metric": "m", "value": 1.0, "unit": "ms"}
    make_run(tmp_path, rows=[{**row, **bad}])
    proc = run_cli("ingest", tmp_path, "--db", tmp_path / "x.duckdb")
    assert proc.returncode == 2
    assert "model=resnet50.ipynb" in proc.stderr and where in proc.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_query_prints_csv(tmp_path):
    make_run(tmp_path)
    dbp = tmp_path / "x.duckdb"
    db.ingest(tmp_path, dbp)
    proc = run_cli("query", "select metric, value from measurements", "--db", dbp)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["metric,value", "throughput_img_s,123.0"]
    bad = run_cli("query", "select nope from measurements", "--db", dbp)
    assert bad.returncode == 2 and "query failed" in bad.stderr


def test_recorder_rejects_unknown_columns_and_statuses():
    rec = Recorder("setup")
    with pytest.raises(ValueError):
        rec.add("m", 1.0, "ms", color="red")
    with pytest.raises(ValueError):
        rec.add("m", 1.0, "ms", status="fine")


def test_no_schema_uses_the_string_format_the_command_goes_without():
    """fwbench's command starts without rfc3987_syntax (cli.py says why): that only removes
    jsonschema's check of the "iri" formats, so no schema fwbench validates may use them."""

    def formats(node):
        if isinstance(node, dict):
            if isinstance(node.get("format"), str):
                yield node["format"]
            for value in node.values():
                yield from formats(value)
        elif isinstance(node, list):
            for value in node:
                yield from formats(value)

    assert not {f for f in formats(db.load_schema()) if f.startswith("iri")}
