"""The executors behind one interface: chosen by name, each grouping the cells a run lacks and
yielding one result per cell in the group's order (the local one through ``trial.run_trial``)."""

import pytest

from fwbench.pipeline import executors, trial
from fwbench.pipeline.campaign import Cell, RunOrder
from fwbench.pipeline.slurm import SlurmExecutor


def cells(tmp_path, *slugs, interleaved=False):
    return [Cell("standin", tmp_path / "standin.py", s, {}, interleaved=interleaved) for s in slugs]


def test_each_executor_is_found_by_its_name_and_an_unknown_one_is_refused(tmp_path):
    assert isinstance(executors.make("local", tmp_path), executors.LocalExecutor)
    assert isinstance(executors.make("duet", tmp_path), executors.DuetExecutor)
    with pytest.raises(ValueError, match="no executor called 'gpu'"):
        executors.make("gpu", tmp_path)
    # what the command line offers: every name has an executor behind it
    assert set(executors.EXECUTORS) <= {"local", "duet", "slurm"}
    assert callable(SlurmExecutor.groups) and callable(SlurmExecutor.run)


def test_the_local_executor_runs_one_cell_at_a_time_in_the_order_given(tmp_path, monkeypatch):
    ran = []

    def run_trial(cell, run_dir, context, timeout, rerun_shared):
        ran.append((cell.slug, timeout, rerun_shared))
        return trial.CellResult("ok", None, 1.0)

    monkeypatch.setattr(executors, "run_trial", run_trial)
    todo = cells(tmp_path, "b", "a")
    todo[1].timeout = 5.0
    local = executors.make("local", tmp_path)
    groups = local.groups(None, todo)
    assert [[c.slug for c in g] for g in groups] == [["b"], ["a"]]
    results = [r for g in groups for r in local.run(g, tmp_path, {}, 9.0, 2)]
    assert [r.status for r in results] == ["ok", "ok"]
    # a cell's own timeout wins over the run's
    assert ran == [("b", 9.0, 2), ("a", 5.0, 2)]


def test_the_duet_executor_pairs_each_round_and_runs_the_rest_alone(tmp_path):
    setup = cells(tmp_path, "setup")
    arms = cells(tmp_path, "x__trial=1", "y__trial=1", "x__trial=2", "y__trial=2", interleaved=True)
    order = RunOrder(
        "duet", 0, ["standin/setup"], [[c.key for c in arms[:2]], [c.key for c in arms[2:]]]
    )
    groups = executors.make("duet", tmp_path).groups(order, setup + arms[1:])
    # the first round's x already has a result (as after --resume): its partner runs alone
    assert [[c.slug for c in g] for g in groups] == [
        ["setup"],
        ["y__trial=1"],
        ["x__trial=2", "y__trial=2"],
    ]
