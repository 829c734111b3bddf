"""Repeated runs (``invocations``) and A/A duplicate arms (``aa_copy``) as campaign features.

The verdicts' unit of replication is the run, so one ``fwbench run`` may make N of them, each
with its own folder and manifest, resumable as a series; and a step may run every cell twice
so that A/A comparisons accrue beside the real ones.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest

from fwbench import cli
from fwbench.pipeline import environment
from fwbench.pipeline.campaign import (
    CampaignError,
    load_campaign,
)
from fwbench.pipeline.notebook_params import read_parameters
from fwbench.report.arms import variant as _variant
from fwbench.results.layout import slug_settings, slug_without_trial
from tests.conftest import REPO, STANDIN, run_cli

# rerun_shared 0: the tests share their cores with other work, and a re-run only costs time here
SERIES = """
campaign: series
order: interleaved
seed: 5
rerun_shared: 0
steps:
  - notebook: STANDIN
    grid: {x: [1, 2]}
    trials: 2
"""
# a notebook with an aa_copy parameter, light enough for the campaign tests
COPYABLE = (
    '# %% tags=["parameters"]\nx = 1\nlabel = "a"\naa_copy = 0  # one of: 0, 1\n\n# %%\nprint(x)\n'
)


def manifests(out, campaign):
    return [json.loads(p.read_text()) for p in sorted((out / campaign).glob("*/manifest.json"))]


# --------------------------------------------------------------------------- invocations


def test_invocations_make_separate_runs_of_one_series_and_report_once(
    write_campaign, tmp_path, monkeypatch
):
    from fwbench.lab import Lab

    reports = []
    monkeypatch.setattr(
        Lab, "report", lambda self, name, run_id, **kw: reports.append((name, run_id)) or "ok"
    )
    path = write_campaign(SERIES.replace("rerun_shared: 0", "rerun_shared: 0\nreport: true"))
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out), "--invocations", "2"]) == 0

    runs = manifests(out, "series")
    assert len(runs) == 2 and runs[0]["run_id"] != runs[1]["run_id"]
    assert [m["invocation"] for m in runs] == [1, 2]
    assert {m["invocations"] for m in runs} == {2}
    assert {m["series_id"] for m in runs} == {runs[0]["run_id"]}
    for m in runs:
        assert {c["status"] for c in m["cells"].values()} == {"ok"} and len(m["cells"]) == 4
    # each run draws its own rounds: the campaign's seed, then the next
    assert [m["run_order"]["seed"] for m in runs] == [5, 6]
    # the report runs once, after the last run
    assert reports == [("series", runs[1]["run_id"])]

    source = hashlib.sha256(STANDIN.with_suffix(".py").read_bytes()).hexdigest()[:16]
    assert runs[0]["environment"]["notebook_sources"] == {"standin": source}
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    indexed = con.execute("select run_id, environment from runs order by run_id").fetchall()
    assert [r[0] for r in indexed] == [m["run_id"] for m in runs]
    assert all(json.loads(r[1])["notebook_sources"] == {"standin": source} for r in indexed)


def test_a_resumed_series_finishes_its_run_then_starts_the_runs_it_lacks(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign(
        "campaign: series\nrerun_shared: 0\ninvocations: 3\nsteps:\n  - notebook: STANDIN\n"
        "    params: {behaviour: sleep_unless_env, seconds: 60.0}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "STANDIN_OK"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwbench", "run", str(path), "--out", str(out)],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(out.rglob(".*.partial.ipynb")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # stopped in the first of three runs
    proc.wait()
    (first,) = manifests(out, "series")
    assert (first["invocation"], first["invocations"]) == (1, 3)

    dry = run_cli("run", path, "--out", out, "--resume", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split() == ["standin/default"]
    assert "0 of the 1 selected cells are done" in dry.stderr
    assert "then 2 new runs of its series (invocations 2 to 3 of 3)" in dry.stderr

    done = run_cli("run", path, "--out", out, "--resume", env={"STANDIN_OK": "1"})
    assert done.returncode == 0, done.stderr
    runs = manifests(out, "series")
    assert runs[0]["run_id"] == first["run_id"]  # finished in place, not started again
    assert [m["invocation"] for m in runs] == [1, 2, 3]
    assert {m["series_id"] for m in runs} == {first["run_id"]}
    assert all(m["cells"]["standin/default"]["status"] == "ok" for m in runs)
    assert "(invocation 3 of 3)" in done.stdout

    # the series is complete: another resume starts nothing and rewrites no manifest
    written = {p: p.read_bytes() for p in out.rglob("manifest.json")}
    time.sleep(1.1)  # a rewritten finished_at would differ by a second
    again = run_cli("run", path, "--out", out, "--resume", env={"STANDIN_OK": "1"})
    assert again.returncode == 0, again.stderr
    assert len(manifests(out, "series")) == 3
    assert {p: p.read_bytes() for p in out.rglob("manifest.json")} == written


def test_a_run_made_before_series_counts_as_the_first_of_its_own(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign("campaign: old\nrerun_shared: 0\nsteps:\n  - notebook: STANDIN\n")
    assert run_cli("run", path, "--out", out).returncode == 0
    (manifest_path,) = (out / "old").glob("*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    for key in ("series_id", "invocation", "invocations"):
        manifest.pop(key)
    manifest_path.write_text(json.dumps(manifest))
    proc = run_cli("run", path, "--out", out, "--resume", "--invocations", "2")
    assert proc.returncode == 0, proc.stderr
    runs = manifests(out, "old")
    assert len(runs) == 2 and runs[1]["series_id"] == runs[0]["run_id"]
    assert (runs[1]["invocation"], runs[1]["invocations"]) == (2, 2)


def test_resume_goes_on_with_the_series_of_this_machine_and_passes_over_others(
    write_campaign, tmp_path
):
    # a campaign may hold one series per CPU model; a later series started on another CPU must
    # not stop this machine's series from being resumed, nor be resumed here
    out = tmp_path / "out"
    path = write_campaign("campaign: two\nrerun_shared: 0\nsteps:\n  - notebook: STANDIN\n")
    for _ in range(2):
        assert run_cli("run", path, "--out", out, "--invocations", "1").returncode == 0
    here, elsewhere = sorted((out / "two").glob("*/manifest.json"))
    manifest = json.loads(elsewhere.read_text())
    manifest["environment"]["cpu"] = {"name": "Other CPU", "family": 99, "model": 1}
    elsewhere.write_text(json.dumps(manifest))

    proc = run_cli("run", path, "--out", out, "--resume", "--invocations", "2")
    assert proc.returncode == 0, proc.stderr
    runs = manifests(out, "two")
    assert len(runs) == 3
    mine = json.loads(here.read_text())["run_id"]
    assert runs[2]["series_id"] == mine and runs[2]["invocation"] == 2
    assert runs[1]["environment"]["cpu"]["family"] == 99  # the other series is left as it was

    # with every run made elsewhere, --resume refuses in one line and writes nothing
    for p in (out / "two").glob("*/manifest.json"):
        other = json.loads(p.read_text())
        other["environment"]["cpu"] = {"name": "Other CPU", "family": 99, "model": 1}
        p.write_text(json.dumps(other))
    before = sorted(q.name for q in (out / "two").iterdir())
    refused = run_cli("run", path, "--out", out, "--resume")
    assert refused.returncode == 2
    assert "no run of it was made on this machine" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert sorted(q.name for q in (out / "two").iterdir()) == before


def test_dry_run_lists_the_cells_once_and_multiplies_the_estimate(write_campaign, tmp_path):
    from fwbench.results import db

    index = tmp_path / "idx.duckdb"
    con = db.connect(index)
    con.execute(
        "insert into cells (run_id, campaign, notebook, cell, status, duration_s, parameters) "
        "values ('r', 'series', 'standin', 'c', 'ok', 10.0, '{}')"
    )
    con.close()
    path = write_campaign(SERIES.replace("seed: 5", "seed: 5\ninvocations: 2"))
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", out, "--dry-run", "--db", index, "--invocations", "3")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split()) == 4  # once, not once per run
    assert "4 cells × 3 invocations; campaign file is valid" in proc.stderr
    assert "estimated total: ~40 s a run × 3 invocations = ~2 min 00 s" in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_a_bad_invocations_option_is_one_line_exit_2_nothing_written(
    write_campaign, tmp_path, value
):
    out = tmp_path / "out"
    proc = run_cli("run", write_campaign(SERIES), "--out", out, "--invocations", value)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().count("\n") == 0 and "--invocations must be a positive" in proc.stderr
    )
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "true", "'2'", "1.5"])
def test_a_bad_invocations_key_is_one_line_exit_2_nothing_written(write_campaign, tmp_path, value):
    out = tmp_path / "out"
    path = write_campaign(SERIES.replace("seed: 5", f"seed: 5\ninvocations: {value}"))
    proc = run_cli("run", path, "--out", out)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "'invocations' must be a positive integer" in proc.stderr
    assert not out.exists()


# --------------------------------------------------------------------------- A/A copies


def test_a_copy_is_a_cell_of_its_own_with_the_aa_copy_parameter(write_campaign, tmp_path):
    nb = tmp_path / "copyable.py"
    nb.write_text(COPYABLE)
    path = write_campaign(
        f"campaign: aa\norder: interleaved\nsteps:\n  - notebook: {nb.with_suffix('')}\n"
        "    grid: {x: [1, 2]}\n    trials: 3\n    aa_copy: true\n"
    )
    campaign = load_campaign(path)
    assert len(campaign.cells) == 2 * 3 * 2
    copies = [c for c in campaign.cells if c.aa_copy]
    originals = [c for c in campaign.cells if not c.aa_copy]
    assert len(copies) == len(originals) == 6
    assert all(c.parameters == {"x": c.parameters["x"], "aa_copy": 1} for c in copies)
    assert all("aa_copy" not in c.parameters for c in originals)
    assert "copyable/x=1__aa_copy=1__trial=2" in {c.key for c in copies}
    assert len({c.key for c in campaign.cells}) == 12
    # slug helpers read a copy's slug as any other: its trials group, the mark stays
    copy = next(c for c in copies if c.parameters["x"] == 1 and c.trial == 2)
    assert slug_without_trial(copy.slug) == "x=1__aa_copy=1"
    assert slug_settings(copy.slug) == {"x": "1", "aa_copy": "1", "trial": "2"}
    # interleaved like any cell: every round holds both arms of every grid point
    for keys in campaign.run_order().rounds:
        assert len(keys) == 4 and sum("aa_copy=1" in k for k in keys) == 2


@pytest.mark.parametrize(
    "step, message",
    [
        ("    aa_copy: true\n", "needs a notebook with an aa_copy parameter"),
        ("    aa_copy: yes please\n", "'aa_copy' must be true or false"),
        ("    params: {aa_copy: 1}\n", "not set by hand"),
    ],
)
def test_bad_aa_copy_steps_are_refused(write_campaign, step, message):
    # the stand-in has no aa_copy parameter, and nobody sets the parameter by hand
    path = write_campaign(f"campaign: aa\nsteps:\n  - notebook: STANDIN\n{step}")
    with pytest.raises(CampaignError, match=message):
        load_campaign(path)


def test_a_duet_refuses_copies(write_campaign, tmp_path):
    nb = tmp_path / "copyable.py"
    nb.write_text(COPYABLE)
    step = f"  - notebook: {nb.with_suffix('')}\n    trials: 2\n    grid: {{x: [1]}}\n"
    path = write_campaign(
        f"campaign: aa\norder: duet\nsteps:\n{step}    params: {{label: a}}\n    aa_copy: true\n"
        f"{step}    params: {{label: b}}\n"
    )
    with pytest.raises(CampaignError, match="order 'duet'.*aa_copy"):
        load_campaign(path)


def test_the_measuring_notebooks_declare_aa_copy():
    for name in ("10_inference", "11_training"):
        declared = read_parameters(REPO / "notebooks" / f"{name}.py")["aa_copy"]
        assert declared.default == 0 and declared.choices == (0, 1)


def test_a_copy_estimates_from_its_originals_history(write_campaign, tmp_path):
    from fwbench.pipeline.estimate import estimate
    from fwbench.results import db

    nb = tmp_path / "copyable.py"
    nb.write_text(COPYABLE)
    campaign = load_campaign(
        write_campaign(
            f"campaign: aa\nsteps:\n  - notebook: {nb.with_suffix('')}\n    aa_copy: true\n"
        )
    )
    index = tmp_path / "idx.duckdb"
    con = db.connect(index)
    con.execute(
        "insert into cells (run_id, campaign, notebook, cell, status, duration_s, parameters) "
        "values ('r', 'aa', 'copyable', 'c', 'ok', 12.0, '{}')"
    )
    con.close()
    (step,) = estimate(campaign, campaign.cells, index)
    assert step.seconds == 24.0 and "same parameters" in step.basis


def test_variant_marks_a_copy_after_channels_last():
    assert _variant("torch", "eager", {"channels_last": True, "aa_copy": 1}) == (
        "eager+channels_last#copy"
    )
    assert _variant("jax", "jit", {"aa_copy": 1}) == "jit#copy"
    assert _variant("jax", "jit", {}) == "jit"


def test_10_inference_records_aa_copy_on_the_copy_only(write_campaign, tmp_path):
    """Two tiny PyTorch cells, the original and its copy, through the runner and the index."""
    path = write_campaign(
        f"campaign: aa_inf\nrerun_shared: 0\nsteps:\n  - notebook: {REPO}/notebooks/10_inference\n"
        "    params: {framework: torch, device: cpu, model: mobilenet_v3_small, image_size: 32,\n"
        "             batch_sizes: [1], min_iters: 2, min_seconds: 0.05, warmup: 1,\n"
        "             block_size: 2}\n"
        "    aa_copy: true\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute(
        "select cell, extra from measurements where metric = 'throughput_img_s'"
    ).fetchall()
    marks = {cell: json.loads(extra).get("aa_copy") for cell, extra in rows}
    assert marks == {"default": None, "aa_copy=1": 1}


def test_capture_hashes_each_notebook_source(tmp_path):
    nb = tmp_path / "a.py"
    nb.write_bytes(b"print(1)\n")
    env = environment.capture(tmp_path, frameworks=False, notebooks={"a": nb})
    assert env["notebook_sources"] == {"a": hashlib.sha256(b"print(1)\n").hexdigest()[:16]}
    assert "notebook_sources" not in environment.capture(tmp_path, frameworks=False)
