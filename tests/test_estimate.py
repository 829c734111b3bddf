"""``fwbench run --dry-run`` estimates each step's duration from the index's earlier cells."""

import json

from fwbench.pipeline.campaign import load_campaign
from fwbench.pipeline.estimate import duration, estimate, render
from fwbench.results import db
from tests.conftest import run_cli

CAMPAIGN = """
campaign: demo
steps:
  - notebook: STANDIN
    params: {label: a}
    grid: {x: [1, 2]}
  - notebook: STANDIN
    params: {label: b}
"""


def _index(path, rows):
    """An index whose cells table holds (campaign, notebook, parameters, status, seconds) rows."""
    con = db.connect(path)
    for i, (campaign, notebook, params, status, seconds) in enumerate(rows):
        con.execute(
            "insert into cells (run_id, campaign, notebook, cell, status, duration_s, parameters) "
            "values (?, ?, ?, ?, ?, ?, ?)",
            [f"r{i}", campaign, notebook, f"c{i}", status, seconds, json.dumps(params)],
        )
    con.close()


def test_estimate_prefers_same_parameters_then_campaign_then_any(write_campaign, tmp_path):
    campaign = load_campaign(write_campaign(CAMPAIGN))
    index = tmp_path / "idx.duckdb"
    _index(
        index,
        [
            ("demo", "standin", {"label": "a", "x": 1}, "ok", 10.0),
            ("demo", "standin", {"label": "a", "x": 1}, "ok", 30.0),  # median 20 for x=1
            ("demo", "standin", {"label": "a", "x": 1}, "failed", 999.0),  # failures don't count
            ("demo", "standin", {"label": "z"}, "ok", 7.0),
            ("other", "standin", {"label": "a", "x": 2}, "ok", 500.0),  # loses to same campaign
        ],
    )
    steps = estimate(campaign, campaign.cells, index)
    assert [s.step for s in steps] == [1, 2]
    # x=1 has its own history (median 20); x=2 and label b fall back to every ok cell of the
    # campaign's notebook (10, 30, 7: median 10), never to the other campaign's 500
    assert steps[0].seconds == 20.0 + 10.0 and steps[0].unknown == 0
    assert "same campaign" in steps[0].basis  # the weakest basis among the step's cells
    assert steps[1].seconds == 10.0


def test_estimate_falls_back_to_other_campaigns_and_says_so(write_campaign, tmp_path):
    campaign = load_campaign(write_campaign(CAMPAIGN))
    index = tmp_path / "idx.duckdb"
    _index(index, [("cpu", "standin", {"label": "q"}, "ok", 60.0)])
    steps = estimate(campaign, campaign.cells, index)
    assert steps[0].seconds == 120.0 and "other hardware" in steps[0].basis
    lines = render(steps)
    assert lines[0] == (
        "step 1 standin: 2 cells, ~2 min 00 s [median of up to 1 earlier cells, "
        "other campaigns, maybe other hardware]"
    )
    assert lines[-1].startswith("estimated total: ~3 min 00 s")


def test_a_notebook_never_run_has_no_estimate(write_campaign, tmp_path):
    campaign = load_campaign(write_campaign(CAMPAIGN))
    index = tmp_path / "idx.duckdb"
    _index(index, [("demo", "10_inference", {}, "ok", 60.0)])
    steps = estimate(campaign, campaign.cells, index)
    assert all(s.seconds is None for s in steps)
    assert render(steps)[-1] == (
        "estimated total: ~0 s, plus 3 cells never run before (kernel start-up included)"
    )


def test_cells_from_this_machines_hardware_win_at_each_level(write_campaign, tmp_path):
    from fwbench.pipeline import environment

    campaign = load_campaign(write_campaign(CAMPAIGN))
    index = tmp_path / "idx.duckdb"
    here = environment.machine()
    elsewhere = {"cpu": {"name": "Some Other CPU", "family": 25, "model": 1}, "gpus": []}
    con = db.connect(index)
    for run, env, seconds in (("r_here", here, 120.0), ("r_there", elsewhere, 90.0)):
        con.execute(
            "insert into runs (run_id, campaign, environment) values (?, 'demo', ?)",
            [run, json.dumps(env)],
        )
        for x in (1, 2):
            con.execute(
                "insert into cells (run_id, campaign, notebook, cell, status, duration_s, "
                "parameters) values (?, 'demo', 'standin', ?, 'ok', ?, ?)",
                [run, f"c{x}", seconds, json.dumps({"label": "a", "x": x})],
            )
    con.close()
    steps = estimate(campaign, campaign.cells, index)
    # this machine's 120 s, not the median of both machines' cells (105 s)
    assert steps[0].seconds == 240.0
    assert steps[0].basis == (
        "median of up to 1 earlier cells, same parameters, this machine's hardware"
    )
    # label b never ran: the campaign's cells, still this machine's first
    assert steps[1].seconds == 120.0 and steps[1].basis.endswith(
        "same campaign, this machine's hardware"
    )
    only_there = tmp_path / "there.duckdb"
    con = db.connect(only_there)
    con.execute(
        "insert into runs (run_id, campaign, environment) values ('r', 'demo', ?)",
        [json.dumps(elsewhere)],
    )
    con.execute(
        "insert into cells (run_id, campaign, notebook, cell, status, duration_s, parameters) "
        "values ('r', 'demo', 'standin', 'c', 'ok', 90.0, ?)",
        [json.dumps({"label": "b"})],
    )
    con.close()
    (step,) = estimate(campaign, campaign.cells[2:], only_there)
    assert step.seconds == 90.0 and step.basis.endswith("same parameters, other hardware")


def test_duration_text():
    assert duration(5) == "5 s"
    assert duration(125) == "2 min 05 s"
    assert duration(3 * 3600 + 7 * 60 + 40) == "3 h 07 min"


def test_dry_run_prints_the_estimate_and_runs_nothing(write_campaign, tmp_path):
    path = write_campaign(CAMPAIGN)
    index = tmp_path / "idx.duckdb"
    _index(index, [("demo", "standin", {"label": "b"}, "ok", 42.0)])
    out = tmp_path / "out"
    proc = run_cli("run", path, "--dry-run", "--db", index, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert (
        "step 2 standin: 1 cell, ~42 s [median of up to 1 earlier cells, same parameters, "
        "maybe other hardware]" in proc.stderr
    )
    assert not out.exists()
    missing = run_cli("run", path, "--dry-run", "--db", tmp_path / "none.duckdb")
    assert missing.returncode == 0 and "no duration estimate: no index at" in missing.stderr
