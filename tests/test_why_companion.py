"""A campaign that times without profiling takes its per-op profiles from ``<campaign>_why``: the
latest run of it on the same CPU model, for the sides the run did not profile itself, and says so.
"""

import json

import nbformat

from fwbench.publish import outline
from fwbench.report import why
from fwbench.results import db
from fwbench.results.records import RECORDS_MIME, Recorder
from fwbench.vocab import OVERHEAD

CPU = {"vendor": "GenuineIntel", "family": 6, "model": 207, "stepping": 2}
OTHER_CPU = {**CPU, "model": 143}
SIDES = (("torch", "compile"), ("jax", "jit"))


def rows(framework: str, mode: str, throughput: float | None, conv_ms: float | None) -> list:
    rec = Recorder(
        "inference",
        model="resnet50",
        framework=framework,
        mode=mode,
        device="cpu",
        threads=2,
        device_name="Test CPU",
        precision="fp32",
        batch_size=1,
    )
    extra = {"channels_last": False} if framework == "torch" else {}
    if throughput is not None:
        samples = [throughput * (1 + 0.01 * i) for i in range(-3, 4)]
        rec.add("throughput_img_s", throughput, "img/s", n=7, extra={**extra, "samples": samples})
    if conv_ms is not None:
        wall = conv_ms + 1.0
        for category, ms in (("convolution", conv_ms), (OVERHEAD, 1.0)):
            rec.add(
                "op_time_ms",
                ms,
                "ms",
                family="profile",
                extra={**extra, "category": category, "wall_ms": wall},
            )
    return rec.rows


def write_run(out, campaign: str, run_id: str, cpu: dict | None, cells: dict) -> None:
    run_dir = out / campaign / run_id
    run_dir.mkdir(parents=True)
    env = {"cpu_model": "Test CPU", **({"cpu": cpu} if cpu else {})}
    (run_dir / "manifest.json").write_text(
        json.dumps({"campaign": campaign, "run_id": run_id, "environment": env, "cells": {}})
    )
    for slug, records in cells.items():
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", data={RECORDS_MIME: records})]
        nb.cells = [cell]
        meta = {"run_id": run_id, "campaign": campaign, "notebook": "10_inference", "cell": slug}
        nb.metadata["fwbench"] = {**meta, "trial": 0, "status": "ok", "parameters": {}}
        (run_dir / "10_inference").mkdir(exist_ok=True)
        nbformat.write(nb, str(run_dir / "10_inference" / f"{slug}.ipynb"))


def index(tmp_path, timed_cpu: dict | None):
    out = tmp_path / "executed"
    # the timed run profiled PyTorch only (its convolution at 5 ms)
    timed = {
        "framework=torch": rows("torch", "compile", 100.0, 5.0),
        "framework=jax": rows("jax", "jit", 80.0, None),
    }
    write_run(out, "tw", "20261201T000000Z", timed_cpu, timed)
    # the companion profiled both sides, once on this CPU model and later on another
    both = zip(SIDES, (7.0, 9.0), strict=True)
    profiled = {f"framework={f}": rows(f, m, 90.0, ms) for (f, m), ms in both}
    write_run(out, "tw_why", "20261201T010000Z", CPU, profiled)
    other = {f"framework={f}": rows(f, m, 90.0, 50.0) for f, m in SIDES}
    write_run(out, "tw_why", "20261202T000000Z", OTHER_CPU, other)
    path = tmp_path / "index.duckdb"
    db.ingest(out, path)
    return db.connect(path, read_only=True)


def analysed(tmp_path, timed_cpu: dict | None):
    """The timed campaign's analysis, from an index that also holds its companion's runs."""
    con = index(tmp_path, timed_cpu)
    try:
        return outline.load(con, "tw", "", "", {})
    finally:
        con.close()


def test_the_sides_a_run_did_not_profile_come_from_the_companion_on_its_cpu_model(tmp_path):
    analysis = analysed(tmp_path, CPU)
    assert analysis.why_run_id == "20261201T010000Z"  # not the later run on another CPU model
    conv = analysis.breakdown[analysis.breakdown.category == "convolution"]
    by_side = dict(zip(conv.framework, conv.ms, strict=True))
    # the run's own PyTorch profile wins over the companion's; JAX's is borrowed
    assert by_side == {"torch": 5.0, "jax": 9.0}
    (line,) = analysis.borrowed_line
    assert "1 side " in line and "20261201T010000Z" in line and "`tw_why`" in line
    sources = analysis.sources(analysis.family("profile"))
    assert sorted(p.split("/")[0] for p in sources) == ["tw", "tw_why"]


def test_a_run_that_did_not_record_its_cpu_borrows_nothing(tmp_path):
    analysis = analysed(tmp_path, None)
    assert analysis.why_run_id == ""
    assert set(analysis.breakdown.framework) == {"torch"}
    assert analysis.borrowed_line == []


def test_a_companion_borrows_from_no_companion_of_its_own(tmp_path):
    con = index(tmp_path, CPU)
    try:
        found = why.companion_why(con, "tw_why", {"cpu": CPU})
    finally:
        con.close()
    assert found[0] == ""
