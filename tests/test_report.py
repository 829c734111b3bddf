"""``fwbench report`` end to end on the synthetic campaign of tests/test_analysis.py.

The report is built twice from the same executed notebooks (the second time the index also holds
the first analysis notebook), and must come out the same apart from its "Generated" line.
"""

import json
import re
import struct

import duckdb
import pandas as pd
import pytest

from fwbench import report
from tests.conftest import run_cli
from tests.test_analysis import CAMPAIGN, CURRENT_RUN, build_synthetic, expected_ratio

FIGURES = [
    "ratio_matrix",
    "throughput_scaling",
    "latency_batch1",
    "memory_scaling",
    "memory_efficiency",
    "compile_time",
    "roofline_1",
    "cnn_vs_transformer",
    "training_ratio_matrix",
    "training_throughput",
    "training_parity",
    "training_convergence",
    "memory_methods",
]
LINK_RE = re.compile(r"\]\(([^)]+)\)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    out, current = build_synthetic(tmp)
    dirs = {"report_dir": tmp / "report" / CAMPAIGN, "figures_dir": tmp / "figures" / CAMPAIGN}
    db_path = tmp / "index.duckdb"  # absent: build_report ingests first
    first = report.build_report(CAMPAIGN, out=out, db_path=db_path, **dirs).read_text()
    # what a report of another run left behind: a table and a figure this run does not make
    stale = [dirs["report_dir"] / "tables" / "gone.csv", dirs["figures_dir"] / "gone.png"]
    for path in stale:
        path.write_text("from an earlier report")
    second = report.build_report(CAMPAIGN, out=out, db_path=db_path, **dirs)
    return {
        "out": out,
        "db": db_path,
        "current": current,
        "md": second,
        "first": first,
        "stale": stale,
        "text": second.read_text(),
        **dirs,
    }


def section(text, title):
    """The markdown between heading ``title`` and the next heading of the same or higher level."""
    level = "#" * (3 if f"\n### {title}" in text else 2)
    start = text.index(f"\n{level} {title}")
    end = text.find(f"\n{level} ", start + 1)
    return text[start : end if end > 0 else None]


def png_size(path):
    with open(path, "rb") as fh:
        header = fh.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_figures_are_written_in_three_formats(built):
    for name in FIGURES:
        base = built["figures_dir"] / name
        width, height = png_size(f"{base}.png")
        assert width >= 800 and height >= 300, name  # scale 2: legible when shrunk into a page
        assert "<svg" in (base.with_suffix(".svg")).read_text()[:500]
        html = base.with_suffix(".html").read_text()
        assert "vegaEmbed" in html and '"tooltip"' in html, name


def test_summary_sentences_match_the_inserted_samples(built):
    summary = section(built["text"], "Executive summary")
    for comparison, label in (("best", "best modes"), ("defaults", "defaults")):
        ratio = expected_ratio(built["current"], "resnet50", 8, comparison)
        assert (
            f"JAX is {ratio:.2f}× [" in summary
            and f"on ResNet-50 at batch 8 in fp32 on Test CPU 9000 ({label}:" in summary
        )
    assert "JAX and PyTorch are tied on ViT-B/16 at batch 8" in summary
    assert "1 failed, 1 oom" in summary


def test_regression_is_flagged_in_history(built):
    history = pd.read_csv(built["report_dir"] / "tables" / "history.csv")
    regressed = history[
        (history.metric == "throughput_img_s")
        & (history.model == "resnet50")
        & (history.framework == "jax")
        & (history.batch_size == 8)
    ]
    assert regressed.flag.tolist() == ["regression"]
    assert "| regression |" in section(built["text"], "History")


def test_failures_and_retries_are_reported(built):
    failures = section(built["text"], "Failures and workarounds")
    assert "XlaRuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS" in failures
    assert "XLA_FLAGS=--xla_gpu_autotune_level=0" in failures
    assert "OutOfMemoryError" in failures


def test_links_resolve_and_tables_are_saved(built):
    links = [m for m in LINK_RE.findall(built["text"]) if not m.startswith("http")]
    notebooks = [ln for ln in links if ln.endswith(".ipynb")]
    assert any("/10_inference/" in ln for ln in notebooks)
    assert any("/20_analysis/" in ln for ln in notebooks)
    for link in links:
        assert (built["report_dir"] / link).exists(), link
    assert (built["report_dir"] / "tables" / "ratio_matrix.tex").read_text().startswith("\\begin")
    assert "<table>" in (built["report_dir"] / "report.html").read_text()


def test_absent_family_is_skipped_with_a_note(built):
    assert "No validation records in this run." in section(built["text"], "Validation")


def test_analysis_notebook_joins_the_audit_trail(built):
    run_dir = built["out"] / CAMPAIGN / CURRENT_RUN
    manifest = json.loads((run_dir / "manifest.json").read_text())
    entry = manifest["cells"]["20_analysis/campaign=synth"]
    assert entry["status"] == "ok" and (run_dir / entry["path"]).is_file()
    con = duckdb.connect(str(built["db"]), read_only=True)
    rows = con.execute("select status from cells where notebook = '20_analysis'").fetchall()
    con.close()
    assert rows == [("ok",)]


def test_rebuilding_gives_the_same_report(built):
    def strip(text):
        return [ln for ln in text.splitlines() if not ln.startswith(report.GENERATED_PREFIX)]

    assert strip(built["first"]) == strip(built["text"])


def test_a_rebuild_removes_what_an_earlier_report_left(built):
    assert not any(path.exists() for path in built["stale"])
    for name in FIGURES:
        assert (built["figures_dir"] / f"{name}.png").is_file(), name
    assert (built["report_dir"] / "tables" / "ratio_matrix.csv").is_file()


def test_unknown_campaign_exits_2_with_one_message(built):
    proc = run_cli("report", "nosuch", "--out", built["out"], "--db", built["db"])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no runs of campaign 'nosuch'" in lines[0]
    assert "known campaigns: synth" in lines[0]
