"""``fwbench report`` end to end on the synthetic campaign of tests/synthetic_run.py.

The report is built twice from the same executed notebooks: first published (the analysis joins
the run and the index), then as a user's report in local/, which only reads the run while the
index holds the first analysis notebook. Both must say the same apart from their "Generated" line
and where their links point.
"""

import json
import re
import struct
from pathlib import Path

import duckdb
import nbformat
import pandas as pd
import pytest

from fwbench import cli
from fwbench.families.distributed import distributed_report
from fwbench.lab import Lab, ReportError
from fwbench.pipeline import runner
from fwbench.publish import readme, render
from fwbench.report import blocks
from tests.conftest import run_cli
from tests.synthetic_run import (
    BASELINE_RUN,
    CAMPAIGN,
    CURRENT_RUN,
    FIGURES,
    PEAK_TFLOPS,
    TRAIN_FLOPS_PER_STEP,
    build_synthetic,
    expected_ratio,
)

LINK_RE = re.compile(r"\]\(([^)]+)\)")
BEGIN, END = blocks.markers(CAMPAIGN)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    out, current = build_synthetic(tmp)
    published = {
        "report_dir": tmp / "report" / CAMPAIGN,
        "figures_dir": tmp / "figures" / CAMPAIGN,
    }
    dirs = {
        "report_dir": tmp / "local" / "report" / CAMPAIGN,
        "figures_dir": tmp / "local" / "figures" / CAMPAIGN,
    }
    db_path = tmp / "index.duckdb"  # absent: the report indexes first
    first = Lab(out, db_path).report(CAMPAIGN, publish=True, **published)
    run_files = {
        p: p.read_bytes() for p in (out / CAMPAIGN / CURRENT_RUN).rglob("*") if p.is_file()
    }
    # what a report of another run left behind: a table and a figure this run does not make
    stale = [dirs["report_dir"] / "tables" / "gone.csv", dirs["figures_dir"] / "gone.png"]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("from an earlier report")
    second = Lab(out, db_path).report(CAMPAIGN, **dirs)
    return {
        "out": out,
        "db": db_path,
        "current": current,
        "md": second,
        "first": first.read_text(),
        "stale": stale,
        "text": second.read_text(),
        "run_files": run_files,
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
    assert "[PNG](" in built["text"] and "[interactive](" in built["text"]


def test_a_published_report_commits_its_figures_as_svg_alone(built):
    published = built["out"].parent / "figures" / CAMPAIGN
    assert {p.suffix for p in published.iterdir()} == {".svg"}
    assert {p.stem for p in published.iterdir()} == set(FIGURES)
    # its markdown links no format it did not write
    assert "[PNG](" not in built["first"] and "[interactive](" not in built["first"]


def test_summary_sentences_match_the_inserted_samples(built):
    summary = section(built["text"], "Executive summary")
    for comparison, label in (("best", "best modes"), ("defaults", "defaults")):
        ratio = expected_ratio(built["current"], "resnet50", 8, comparison)
        assert (
            f"Within one run on ResNet-50 at batch 8 in fp32 with 2 threads on Test CPU 9000 "
            f"({label}:"
            in summary
            and f"JAX ÷ PyTorch throughput {ratio:.2f}× [" in summary
        )
    # one run has no between-run term: no ratio of it calls a winner
    assert "JAX is 1" not in summary and "PyTorch is 1" not in summary
    assert "1 failed, 1 oom" in summary


def test_regression_is_flagged_in_history(built):
    history = pd.read_csv(built["report_dir"] / "tables" / "history.csv")
    regressed = history[
        (history.metric == "throughput_img_s")
        & history.configuration.str.contains(
            "family=inference model=resnet50 framework=jax mode=jit"
        )
        & history.configuration.str.endswith("batch_size=8")
    ]
    assert regressed.direction.tolist() == ["regression"]
    assert regressed.run_id.tolist() == [BASELINE_RUN]
    assert "| regression |" in section(built["text"], "History")


def test_the_why_section_names_the_category_behind_each_gap(built):
    why = section(built["text"], "Why")
    # ResNet-50 at batch 8: JAX (180 img/s) beats PyTorch eager (100): per call 80 vs 44.4 ms,
    # 90% of each in convolution and elementwise ops, which the synthetic JAX profile (it names
    # no fusion) sets against PyTorch's as one block; the rest lies outside the profiled ops
    assert "PyTorch eager on ResNet-50 at batch 8 in fp32 with 2 threads is " in why
    assert "convolution with its fused elementwise/activation +" in why
    assert "unattributed (time outside the profiled ops) +" in why
    gaps = pd.read_csv(built["report_dir"] / "tables" / "gaps.csv")
    for _, parts in gaps.groupby(["model", "batch_size", "slower_variant", "faster_variant"]):
        assert parts.gap_ms.sum() == pytest.approx(parts.slower_ms.sum() - parts.faster_ms.sum())
    assert "why_resnet50.svg" in why and "why_vit_b_16.svg" in why


def test_failures_and_retries_are_reported(built):
    failures = section(built["text"], "Failures and workarounds")
    assert "XlaRuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS" in failures
    assert "XLA_FLAGS=--xla_gpu_autotune_level=0" in failures
    assert "OutOfMemoryError" in failures


def test_links_resolve_and_tables_are_saved(built):
    links = [m for m in LINK_RE.findall(built["text"]) if not m.startswith("http")]
    notebooks = [ln for ln in links if ln.endswith(".ipynb")]
    assert any("/10_inference/" in ln for ln in notebooks)
    assert any("20_analysis/" in ln for ln in notebooks)
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
        # the published report (first) links only its SVG: the other formats' links go
        lines = text.splitlines()
        return [
            LINK_RE.sub("]()", ln).replace(" ([interactive](), [PNG]())", "")
            for ln in lines
            if not ln.startswith(render.GENERATED_PREFIX)
        ]

    assert strip(built["first"]) == strip(built["text"])


def test_a_report_that_is_not_published_leaves_the_run_and_the_index_as_they_were(built):
    run_dir = built["out"] / CAMPAIGN / CURRENT_RUN
    now = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert now == built["run_files"]
    analysis = built["report_dir"] / "20_analysis" / "campaign=synth.ipynb"
    assert analysis.is_file()
    assert f"]({analysis.relative_to(built['report_dir'])})" in built["text"]
    assert f"](../../executed/{CAMPAIGN}/{CURRENT_RUN}/20_analysis/" in built["first"]


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


def test_the_analysis_cell_is_recorded_like_any_other_with_its_contention_reading(built):
    run_dir = built["out"] / CAMPAIGN / CURRENT_RUN
    entry = json.loads((run_dir / "manifest.json").read_text())["cells"][
        "20_analysis/campaign=synth"
    ]
    metadata = nbformat.read(run_dir / entry["path"], as_version=4).metadata["fwbench"]
    assert entry["contention"] is not None and entry["contention"] == metadata["contention"]
    con = duckdb.connect(str(built["db"]), read_only=True)
    (reading,) = con.execute(
        "select other_cpu_frac from cells where notebook = '20_analysis'"
    ).fetchall()
    con.close()
    assert reading[0] == metadata["contention"]["other_cpu_frac"]


def test_a_report_waits_for_no_runner_holding_the_output_folder(built):
    dirs = {"report_dir": built["report_dir"], "figures_dir": built["figures_dir"]}
    before = (built["out"] / CAMPAIGN / CURRENT_RUN / "manifest.json").read_text()
    with runner.output_lock(built["out"]):
        with pytest.raises(ReportError, match="another fwbench run is using"):
            Lab(built["out"], built["db"]).report(CAMPAIGN, **dirs)
    assert (built["out"] / CAMPAIGN / CURRENT_RUN / "manifest.json").read_text() == before


def test_mfu_records_of_the_analysis_sit_beside_the_measurements(built):
    con = duckdb.connect(str(built["db"]), read_only=True)
    rows = con.execute(
        "select family, model, framework, mode, precision, batch_size, value, extra "
        "from measurements where metric = 'mfu' and notebook = '20_analysis' and run_id = ?",
        [CURRENT_RUN],
    ).fetchall()
    con.close()
    assert {r[0] for r in rows} == {"inference", "training"}
    training = {r[2]: r for r in rows if r[0] == "training"}
    for framework, mode, step_ms in (("torch", "eager", 100.0), ("jax", "jit", 80.0)):
        family, model, _, got_mode, precision, batch_size, value, extra = training[framework]
        assert (model, got_mode, precision, batch_size) == ("resnet50", mode, "fp32", 8)
        achieved = TRAIN_FLOPS_PER_STEP / (step_ms / 1e3) / 1e12
        # one ceiling for both frameworks: the best either measured on the device
        assert value == pytest.approx(achieved / max(PEAK_TFLOPS.values()))
        extra = json.loads(extra)
        assert extra["ceiling_run_id"] == CURRENT_RUN
        assert extra["device_peak_tflops"] == max(PEAK_TFLOPS.values())
        assert extra["framework_peak_tflops"] == PEAK_TFLOPS[framework]
        assert extra["framework_efficiency"] == pytest.approx(achieved / PEAK_TFLOPS[framework])
    assert all(r[6] is not None for r in rows)
    mfu = pd.read_csv(built["report_dir"] / "tables" / "mfu.csv")
    assert set(mfu.family) == {"inference", "training"} and mfu.mfu.notna().all()
    assert "| training | resnet50 | jax | jit |" in section(built["text"], "MFU")


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _readme_around(built, text):
    path = built["report_dir"].parent.parent / "README.md"
    path.write_text(text)
    return path


# a second campaign's block, which quoting this campaign must leave as it is
OTHER_BLOCK = "\n".join(blocks.markers("other")).replace("\n", "\nother quote\n") + "\n"
README_AROUND = (
    "# Title\n\nintro kept\n\n{begin}\nold quote\n{end}\n\n## After\nkept too\n" + OTHER_BLOCK
)


def readme_cli(capsys, *args):
    """``fwbench readme`` in this process (the command line, without a second interpreter)."""
    code = cli.main(["readme", CAMPAIGN, *map(str, args)])
    return code, capsys.readouterr()


def test_readme_block_is_written_from_the_report_only_between_the_markers(built, capsys):
    text = README_AROUND.format(begin=BEGIN, end=END)
    path = _readme_around(built, text)
    code, output = readme_cli(capsys, "--readme", path, "--out", built["out"])
    assert code == 0, output.err
    new = path.read_text()
    head, rest = new.split(BEGIN + "\n")
    block, tail = rest.split(END)
    assert head + BEGIN + "\n" == text.split("old quote")[0]
    assert END + tail == text.split("old quote\n")[1] and tail.endswith(OTHER_BLOCK)
    assert "old quote" not in block and f"run `{CURRENT_RUN}`" in block
    ratio = expected_ratio(built["current"], "resnet50", 8, "best")
    assert "| ResNet-50 | " in block and f"{ratio:.2f}× [" in block
    assert "(within one run)" in block and "(tie)" not in block
    assert "Over the " in block and "cells with a contention reading" in block
    # a campaign of single trials says so where the README quotes its ratios
    assert "its ratios are within one run and call no winner" in block
    mfu = pd.read_csv(built["report_dir"] / "tables" / "mfu.csv")
    jax_train = mfu[(mfu.family == "training") & (mfu.framework == "jax")].mfu.iloc[0]
    assert "| training | ResNet-50 | JAX jit | fp32 with 2 threads | " in block
    assert f"| {readme.percent(jax_train)} |" in block and "ceilings from this run" in block
    headings = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", built["text"], re.M)}
    for link in LINK_RE.findall(block):
        target, _, anchor = link.partition("#")
        assert (path.parent / target).exists(), link
        assert not anchor or anchor in headings, link
    code, output = readme_cli(capsys, "--readme", path, "--out", built["out"])
    assert code == 0 and "already up to date" in output.out
    assert path.read_text() == new


def test_readme_without_markers_exits_2_and_is_left_alone(built, capsys):
    text = "# Title\n\nno markers here\n"
    path = _readme_around(built, text)
    code, output = readme_cli(capsys, "--readme", path, "--out", built["out"])
    assert code == 2
    lines = output.err.strip().splitlines()
    assert len(lines) == 1 and BEGIN in lines[0] and END in lines[0]
    assert path.read_text() == text
    swapped = _readme_around(built, f"{END}\n{BEGIN}\n")
    assert readme_cli(capsys, "--readme", swapped)[0] == 2
    # markers of another campaign are not this one's
    marked = _readme_around(built, f"{BEGIN}\n{END}\n")
    assert cli.main(["readme", "nosuch", "--readme", str(marked)]) == 2
    assert "<!-- results:nosuch:start -->" in capsys.readouterr().err
    nosuch = "\n".join(blocks.markers("nosuch")) + "\n"
    marked = _readme_around(built, nosuch)
    assert cli.main(["readme", "nosuch", "--readme", str(marked)]) == 2
    assert "no report at" in capsys.readouterr().err
    assert marked.read_text() == nosuch


def test_the_readme_says_how_much_of_an_unfinished_run_it_quotes(tmp_path):
    manifest = tmp_path / "manifest.json"
    order = {"before_rounds": ["00_setup/a"], "rounds": [["10/x__trial=1"], ["10/x__trial=2"]]}
    cells = {"00_setup/a": {"status": "ok"}, "10/x__trial=1": {"status": "ok"}}
    cells["10/x__trial=2"] = {"status": "pending"}
    spec = {"campaign_file": "params/study.yaml", "run_order": order, "cells": cells}
    manifest.write_text(json.dumps(spec))
    sentence = readme.progress_sentence(manifest)
    assert "2 of its 3 cells have run" in sentence
    assert "`--resume` refuses it" in sentence  # no record of its CPU's family and model
    cpu = {"name": "AMD EPYC", "family": 25, "model": 17, "isa": []}
    manifest.write_text(json.dumps({**spec, "environment": {"cpu": cpu}}))
    sentence = readme.progress_sentence(manifest)
    assert "`fwbench run params/study.yaml --resume` continues it on AMD EPYC (family 25, " in (
        sentence
    )
    cells["10/x__trial=2"]["status"] = "ok"
    manifest.write_text(json.dumps(spec))
    assert readme.progress_sentence(manifest) == ""
    assert readme.progress_sentence(tmp_path / "absent.json") == ""


def test_a_second_report_of_one_campaign_has_its_own_folder_and_block(built, capsys):
    """The same study on another CPU: report/NAME and the README block marked NAME, the
    campaign's own block left alone."""
    import shutil

    root = built["report_dir"].parent.parent
    shutil.copytree(built["report_dir"], root / "report" / "second", dirs_exist_ok=True)
    shutil.copytree(built["figures_dir"], root / "figures" / "second", dirs_exist_ok=True)
    second = "\n".join(blocks.markers("second")) + "\n"
    path = _readme_around(built, f"{BEGIN}\nfirst\n{END}\n{second}")
    code, output = readme_cli(capsys, "--into", "second", "--readme", path, "--out", built["out"])
    assert code == 0, output.err
    text = path.read_text()
    assert f"{BEGIN}\nfirst\n{END}" in text
    assert f"`fwbench readme {CAMPAIGN} --into second`" in text
    assert f"run `{CURRENT_RUN}`" in text.split(blocks.markers("second")[0])[1]
    with pytest.raises(SystemExit) as exit_info:
        readme_cli(capsys, "--into", "../elsewhere", "--readme", path)
    assert exit_info.value.code == 2


def test_the_readme_quotes_each_strategy_with_the_float64_gate_it_passed():
    import pandas as pd

    from fwbench.families.distributed import distributed_report

    table = pd.DataFrame(
        {
            "model": ["m", "m"],
            "framework": ["torch", "torch"],
            "strategy": ["ddp", "ddp"],
            "precision": ["fp32", "fp32"],
            "world_size": [2, 1],
            "step_ms": [30.0, 20.0],
            "compute_only_step_ms": [15.0, float("nan")],
            "comm_overhead_frac": [0.5, float("nan")],
            "scaling_efficiency": [0.67, float("nan")],
            "state_bytes_per_rank": [2 * 2**20, 2 * 2**20],
        }
    )
    parity = pd.DataFrame(
        {
            "model": ["m"],
            "framework": ["torch"],
            "strategy": ["ddp"],
            "world_size": [2],
            "dist_fp64_loss_parity_max_rel": [1e-15],
            "dist_fp64_cross_framework_max_rel": [3e-13],
            "status": ["ok"],
        }
    )
    heading, markdown = distributed_report.readme_lines(table, parity, "r.md")
    assert heading.startswith("Distributed training (fp32, one core per process)")
    lines = markdown.splitlines()
    # one process first, then two, the gate (the larger gap) on the distributed row only
    assert lines[2] == "| m | torch ddp | 1 | 20.0 |  |  | 2.0 |  |"
    assert lines[3] == "| m | torch ddp | 2 | 30.0 | 50% | 0.67 | 2.0 | 3.0e-13 (ok) |"
    assert distributed_report.readme_lines(table.iloc[0:0], parity, "r.md") == []


def test_the_bus_bandwidth_chart_draws_from_the_distributed_records_alone():
    import pandas as pd

    from fwbench.report import charts

    def row(framework, model, size, busbw):
        return {
            "family": "distributed",
            "metric": "allreduce_busbw_gbs",
            "status": "ok",
            "framework": framework,
            "model": model,
            "value": busbw,
            "extra": {"world_size": 2, "message_bytes": size, "algbw_gbs": busbw},
        }

    meas = pd.DataFrame(
        [row("torch", "a", 1024, 0.1), row("torch", "b", 1024, 0.3), row("jax", "a", 1024, 0.2)]
    )
    table = distributed_report.busbw_table(meas)
    # the two models' sweeps of one framework and world size are one point, their median
    assert table.sort_values("framework").busbw_gbs.tolist() == [0.2, 0.2]
    spec = charts.busbw_chart(table).to_dict()
    assert {"PyTorch x2", "JAX x2"} == {v["series"] for v in spec["datasets"].popitem()[1]}


def test_the_brief_block_quotes_verdicts_and_trust_and_names_no_run(built, capsys):
    path = _readme_around(built, README_AROUND.format(begin=BEGIN, end=END))
    code, output = readme_cli(capsys, "--brief", "--readme", path, "--out", built["out"])
    assert code == 0, output.err
    block = path.read_text().split(BEGIN)[1].split(END)[0]
    assert f"`fwbench readme {CAMPAIGN} --brief`" in block
    assert "| ResNet-50 | " in block and "How far these ratios can be trusted" in block
    assert "MFU:" not in block and "![" not in block and "Why (" not in block
    assert not re.search(r"\d{8}T\d{6}Z", block), "the front page names no run"
    for link in LINK_RE.findall(block):
        assert (path.parent / link.partition("#")[0]).exists(), link


def test_a_ratios_only_block_keeps_the_table_and_leaves_the_trust_figures(built, capsys):
    path = _readme_around(built, README_AROUND.format(begin=BEGIN, end=END))
    code, output = readme_cli(capsys, "--ratios-only", "--readme", path, "--out", built["out"])
    assert code == 0, output.err
    block = path.read_text().split(BEGIN)[1].split(END)[0]
    assert f"`fwbench readme {CAMPAIGN} --ratios-only`" in block
    assert "| ResNet-50 | " in block and "How far these ratios can be trusted" not in block
    assert not re.search(r"\d{8}T\d{6}Z", block), "the front page names no run"


def test_the_results_index_lists_every_report_and_links_it(built, capsys, tmp_path):
    import shutil

    root = tmp_path / "report"
    shutil.copytree(built["report_dir"], root / CAMPAIGN)
    shutil.copytree(built["report_dir"], root / "second")
    (root / "not_a_report").mkdir()
    args = ["results-index", "--reports", str(root), "--out", str(built["out"])]
    assert cli.main(args) == 0, capsys.readouterr().err
    text = (root / "index.md").read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| [")]
    assert len(rows) == 2 and "not_a_report" not in text
    content = json.loads((root / CAMPAIGN / "content.json").read_text())
    row = next(r for r in rows if r.startswith(f"| [{CAMPAIGN}]"))
    from fwbench.publish import results_index

    told = results_index.headline(content)
    assert not results_index._routine(told) and told == content["summary"][1]
    assert f"`{CURRENT_RUN}`" in row and told.replace("|", "/") in row
    assert CURRENT_RUN[:4] + "-" in row  # the run's date
    for link in LINK_RE.findall(text):
        assert (root / link).exists(), link
    assert "<table>" in (root / "index.html").read_text()
    assert cli.main(args) == 0 and "already up to date" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["results-index", "--reports", str(empty)]) == 2
    assert not (empty / "index.md").exists()


def test_a_preface_beside_the_campaign_opens_its_report(built, monkeypatch, tmp_path):
    content = json.loads((built["report_dir"] / "content.json").read_text())
    content["figures_dir"] = str(built["figures_dir"])
    args = (content, built["out"], built["report_dir"], built["report_dir"] / "x.ipynb", "now")
    monkeypatch.setattr(render, "repo_root", lambda: tmp_path)
    assert "## Context" not in render.markdown_report(*args)
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / f"{CAMPAIGN}.md").write_text("What this campaign asks.\n")
    text = render.markdown_report(*args)
    assert text.index("## Context") < text.index("## Executive summary")
    assert "What this campaign asks." in section(text, "Context")


def test_the_slides_stand_alone_and_render_in_chromium(built, capsys, tmp_path):
    """The deck opens offline (nothing fetched) and every slide draws within one screen; the
    screenshots are kept in tests/artifacts/ for a person to look at."""
    import importlib.util
    import os
    import shutil

    root = tmp_path / "report"
    shutil.copytree(built["report_dir"], root / CAMPAIGN)
    shutil.copytree(built["figures_dir"], tmp_path / "figures" / CAMPAIGN)
    assert cli.main(["slides", CAMPAIGN, "--reports", str(root)]) == 0
    deck = root / CAMPAIGN / "slides.html"
    page_html = deck.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page_html), "fetches something"
    n_slides = page_html.count('<section class="slide"')
    figures = json.loads((root / CAMPAIGN / "content.json").read_text())
    n_figures = sum(i["kind"] == "figure" for s in figures["sections"] for i in s["items"])
    assert page_html.count("data:image/svg+xml;base64,") == n_figures
    # a saved figure carries its own caption: a slide does not print it twice
    assert "<figcaption" not in page_html
    assert n_slides >= 4 + min(n_figures, 1)
    assert cli.main(["slides", "nosuch", "--reports", str(root)]) == 2

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists() or importlib.util.find_spec("playwright") is None:
        if os.environ.get("FWBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium or playwright to render the slides")
        pytest.skip("no Chromium or playwright to render the slides (make browser)")
    from playwright.sync_api import sync_playwright

    artifacts = Path(__file__).resolve().parent / "artifacts" / "slides"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        fetched = []
        page.on("request", lambda r: fetched.append(r.url))
        page.goto(deck.as_uri())
        boxes = page.eval_on_selector_all(
            "section.slide",
            "els => els.map(e => [e.scrollHeight, e.clientHeight, "
            "Array.from(e.querySelectorAll('img')).every(i => i.complete && i.naturalWidth > 0), "
            # the share of its figure's box each image is drawn in (object-fit scales within it)
            "Array.from(e.querySelectorAll('img')).map(i => { const f = i.parentElement"
            ".getBoundingClientRect(), r = i.getBoundingClientRect(); "
            "return Math.min(r.width / f.width, r.height / f.height); })])",
        )
        for n, (scroll_h, client_h, images_ok, fills) in enumerate(boxes, 1):
            assert images_ok, f"slide {n}: an image did not load"
            assert scroll_h <= client_h + 1, f"slide {n} overflows its screen"
            # a figure scales up to the space its slide leaves it, not its drawn size
            assert all(share > 0.95 for share in fills), f"slide {n}: a figure is not scaled"
            page.locator(f"#s{n}").scroll_into_view_if_needed()
            page.screenshot(path=str(artifacts / f"slide_{n:02d}.png"))
        page.keyboard.press("ArrowDown")
        browser.close()
    assert len(boxes) == n_slides
    assert all(u.startswith(("file:", "data:")) for u in fetched), fetched
