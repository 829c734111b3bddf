"""Rough edges a new user hit: which way a metric is better, sizes and timeouts of zero or less,
the runner's notices on stdout, a silent ingest, recommend's "nothing fits" status and the
kernels' warning about unencrypted TCP. Each test runs in-process on a few small files."""

import os
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from fwbench import cli, vocab
from fwbench.commands import common
from fwbench.pipeline import trial
from fwbench.pipeline.campaign import CampaignError, Cell, load_campaign
from fwbench.report import regressions, sentences
from fwbench.results import db
from tests.conftest import REPO
from tests.test_db import make_run

# --------------------------------------------------------------------------- metric directions

# a level of 50 for four runs, then of 80: one change, at the fifth run
STEP_UP = [50.0, 51.0, 49.0, 50.5, 80.0, 79.0, 81.0, 80.5]


def history(metric: str, unit: str, values=STEP_UP) -> pd.DataFrame:
    """One configuration's history of ``metric``, as ``regressions.load_histories`` returns it."""
    run_ids = [f"2026010{i + 1}T000000Z" for i in range(len(values))]
    return pd.DataFrame(
        {
            "campaign": "demo",
            "metric": metric,
            "family": "prediction",
            "model": "resnet50",
            "framework": "torch",
            "mode": "eager",
            "device_name": "Test CPU",
            "precision": "fp32",
            "threads": 2,
            "batch_size": 1,
            "run_id": run_ids,
            "value": values,
            "unit": unit,
            "run_order": run_ids,
        }
    )


def test_a_rise_in_a_share_where_more_is_better_is_an_improvement():
    found = regressions.find_regressions(history("correct_winner_rate", "%"))
    assert found.direction.tolist() == ["improvement"]
    assert found.run_id.tolist() == ["20260105T000000Z"]


def test_the_vocabulary_gives_each_metric_its_better_side_by_name_then_unit():
    assert vocab.metric_direction("correct_winner_rate", "%") == vocab.HIGHER_IS_BETTER
    assert vocab.metric_direction("mape_pct", "%") == vocab.LOWER_IS_BETTER
    assert vocab.metric_direction("mfu", "ratio") == vocab.HIGHER_IS_BETTER
    assert vocab.metric_direction("throughput_img_s", "img/s") == vocab.HIGHER_IS_BETTER
    # a name the table lacks, in a unit that only ever moves one way
    assert vocab.metric_direction("latency_p99_ms", "ms") == vocab.LOWER_IS_BETTER
    assert vocab.metric_direction("interval_coverage_pct", "%") is None
    assert vocab.metric_direction("param_count_torch", "params") is None


def test_a_metric_without_a_better_side_is_called_a_change_not_a_regression():
    found = regressions.find_regressions(history("interval_coverage_pct", "%"))
    assert found.direction.tolist() == [regressions.UNDIRECTED]
    text = sentences.history_sentence(found, len(STEP_UP), "20260108T000000Z")
    assert "0 regressions, 0 improvements and 1 in metrics with no better side" in text
    assert "largest regression" not in text


def test_the_command_names_the_metrics_it_could_not_judge_on_stderr(tmp_path, monkeypatch, capsys):
    index = tmp_path / "x.duckdb"
    index.write_bytes(b"")  # the command only checks that the index exists before reading it
    frame = pd.concat([history("interval_coverage_pct", "%"), history("correct_winner_rate", "%")])
    monkeypatch.setattr(regressions, "campaigns", lambda _path: ["demo"])
    monkeypatch.setattr(regressions, "load_histories", lambda _path, _campaign: frame)
    assert cli.main(["regressions", "--campaign", "demo", "--db", str(index)]) == 0
    out, err = capsys.readouterr()
    rows = out.splitlines()[1:]
    assert sorted(row.split(",")[0] + "," + row.split(",")[-1] for row in rows) == [
        "correct_winner_rate,improvement",
        "interval_coverage_pct,change",
    ]
    assert err.count("\n") == 1 and "interval_coverage_pct" in err
    assert "correct_winner_rate" not in err


# --------------------------------------------------------------------------- sizes and timeouts


def notebook_step(write_campaign, notebook: str, params: str) -> Path:
    return write_campaign(
        f"campaign: demo\nsteps:\n  - notebook: {REPO}/notebooks/{notebook}\n    params: {params}\n"
    )


@pytest.mark.parametrize(
    "notebook, params, parameter",
    [
        ("10_inference", "{batch_sizes: [-4]}", "batch_sizes"),
        ("10_inference", "{batch_sizes: [1, 0]}", "batch_sizes"),
        ("10_inference", "{image_size: 0}", "image_size"),
        ("11_training", "{batch_size: -1}", "batch_size"),
        ("12_memory", "{seq_len: -32}", "seq_len"),
        ("02_calibrate", "{timer_check_batch: 0}", "timer_check_batch"),
    ],
)
def test_a_size_below_one_is_refused_though_its_notebook_has_no_marker(
    write_campaign, notebook, params, parameter
):
    refused = f"parameter '{parameter}': every value must be above 0"
    with pytest.raises(CampaignError, match=refused):
        load_campaign(notebook_step(write_campaign, notebook, params))


def test_a_size_given_as_a_word_keeps_its_choices_only(write_campaign):
    # encoder_size is a size by name but a word by type: its "one of" comment decides
    campaign = load_campaign(notebook_step(write_campaign, "12_memory", "{encoder_size: small}"))
    assert campaign.cells[0].parameters["encoder_size"] == "small"


def test_a_dry_run_with_a_negative_batch_size_is_one_line_exit_2(write_campaign, tmp_path, capsys):
    out = tmp_path / "out"
    path = notebook_step(write_campaign, "10_inference", "{batch_sizes: [-4]}")
    assert cli.main(["run", str(path), "--out", str(out), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "batch_sizes" in captured.err
    assert not out.exists()


@pytest.mark.parametrize("value", ["-1", "0", "-0.5"])
def test_a_step_timeout_of_zero_or_less_is_refused(write_campaign, value):
    path = write_campaign(f"campaign: demo\nsteps:\n  - notebook: STANDIN\n    timeout: {value}\n")
    with pytest.raises(CampaignError, match="'timeout' must be a positive number of seconds"):
        load_campaign(path)


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_a_timeout_option_of_zero_or_less_is_one_line_exit_2_nothing_run(
    write_campaign, tmp_path, capsys, value
):
    out = tmp_path / "out"
    path = write_campaign("campaign: demo\nsteps:\n  - notebook: STANDIN\n")
    assert cli.main(["run", str(path), "--out", str(out), "--timeout", value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "--timeout must be a positive number of seconds" in captured.err
    assert not out.exists()


# --------------------------------------------------------------------------- the runner's notices


def test_a_notice_goes_to_stderr_never_stdout(capsys):
    trial.notice("  standin/default: ran on a shared machine")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "ran on a shared machine" in captured.err


def test_a_rerun_for_a_shared_machine_says_so_on_stderr(monkeypatch, tmp_path, capsys):
    shared = {"shared": True, "other_cpu_frac": 0.5, "steal_frac": 0.0}

    def execute_cell(cell, run_dir, context, timeout, reruns=None, duet=None):
        return trial.CellResult("ok", None, 1.0, contention=shared, reruns=list(reruns or []))

    monkeypatch.setattr(trial, "execute_cell", execute_cell)
    cell = Cell("standin", tmp_path / "standin.py", "default", {}, interleaved=True)
    result = trial.run_trial(cell, tmp_path, {"run_id": "r", "campaign": "demo"}, None, 1)
    assert len(result.reruns) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # `fwbench predict --json` prints its JSON there
    assert "running it again (1 of at most 1)" in captured.err


# --------------------------------------------------------------------------- ingest's progress


def test_ingest_hands_every_notebook_to_its_progress_callable(tmp_path):
    make_run(tmp_path)
    make_run(tmp_path, run_id="20260102T000000Z")
    seen = []

    def progress(notebooks):
        seen.extend(notebooks)
        return notebooks

    counts = db.ingest(tmp_path, tmp_path / "x.duckdb", progress=progress)
    assert counts["cells"] == 2
    assert len(seen) == 2


def test_the_ingest_command_shows_a_bar_over_the_notebooks(tmp_path, monkeypatch, capsys):
    make_run(tmp_path)
    bars = []

    def fake_tqdm(items, **kwargs):
        bars.append((list(items), kwargs))
        return items

    monkeypatch.setattr("tqdm.auto.tqdm", fake_tqdm)
    assert cli.main(["ingest", str(tmp_path), "--db", str(tmp_path / "x.duckdb")]) == 0
    assert len(bars) == 1 and len(bars[0][0]) == 1
    assert "file" not in bars[0][1]  # tqdm's own default: stderr
    assert capsys.readouterr().out.count("\n") == 1  # stdout keeps the one line of counts


# --------------------------------------------------------------------------- recommend's status


def test_nothing_fitting_has_its_own_exit_status_in_the_help(capsys):
    assert common.EXIT_NOTHING_FITS == 3
    assert common.EXIT_NOTHING_FITS not in (
        common.EXIT_OK,
        common.EXIT_CELL_FAILED,
        common.EXIT_BAD_INPUT,
    )
    with pytest.raises(SystemExit) as done:
        cli.main(["recommend", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "3 nothing meets the limits" in text


# --------------------------------------------------------------------------- kernels over IPC


def test_runner_kernels_use_unix_sockets_with_absolute_short_names():
    zmq = pytest.importorskip("zmq")
    if not zmq.has("ipc"):
        pytest.skip("this ZeroMQ has no IPC transport; the runner keeps TCP")
    manager = trial.kernel_manager_class()()
    assert manager.transport == "ipc"
    assert Path(manager.connection_file).parent == Path(tempfile.gettempdir())
    assert os.path.isabs(manager.ip) and len(f"ipc://{manager.ip}-5") < 100
    # each kernel its own socket names, so a duet's two kernels never meet
    assert trial.kernel_manager_class()().connection_file != manager.connection_file


def test_every_cell_is_started_with_the_runners_kernel_manager(monkeypatch, tmp_path):
    papermill = pytest.importorskip("papermill")
    given = {}
    monkeypatch.setattr(papermill, "execute_notebook", lambda *args, **kwargs: given.update(kwargs))
    cell = Cell("standin", tmp_path / "standin.py", "default", {})
    status, error, _, _ = trial._execute_attempts(
        None, tmp_path / "out.ipynb", cell, [{}], "python3", None
    )
    assert (status, error) == ("ok", None)
    assert given["kernel_manager_class"] is trial.kernel_manager_class()


def test_lab_kernels_use_unix_sockets_too():
    config = (REPO / "jupyter_config" / "jupyter_server_config.py").read_text()
    assert 'c.KernelManager.transport = "ipc"' in config
