"""A GPU lease's node time counted cell by cell: params/gpu_verdict.yaml fits, one cell more does not.

The lease is the one params/gpu_verdict.yaml's header gives: gpu/run.sh with 00_setup and two runs,
then a second call for the third run. Costs are the H200's (fwbench.pipeline.lease_budget).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from fwbench.pipeline import lease_budget
from fwbench.results.records import RECORDS_MIME
from tests.conftest import REPO

VERDICT = REPO / "params" / "gpu_verdict.yaml"
SETUP = REPO / "params" / "gpu_setup.yaml"


def verdict_lease(verdict=VERDICT, first_runs=2, second_runs=1):
    return [[(SETUP, None), (verdict, first_runs)], [(verdict, second_runs)]]


def _variant(tmp_path, change) -> Path:
    data = yaml.safe_load(VERDICT.read_text())
    change(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_verdict_lease_fits_its_node_time():
    budget = lease_budget.lease_budget(verdict_lease())
    assert budget.problems() == []
    cells = [c for c in budget.cells if c.campaign == "gpu_verdict"]
    assert len(cells) == 3 * 3 * 2  # runs × rounds × frameworks
    assert sum(not c.warm for c in cells) == 2  # one compile per framework, the caches the rest
    assert [c.cell for c in budget.cells if c.campaign == "gpu_setup"] == ["00_setup"]
    assert max(budget.command_seconds()) <= lease_budget.COMMAND_S
    assert budget.total_s <= lease_budget.LEASE_S


def test_one_more_run_or_model_is_past_the_budget(tmp_path):
    more_runs = lease_budget.lease_budget(verdict_lease(second_runs=2))
    assert any("over 600 s" in p for p in more_runs.problems())

    def add_vit(data):
        for step in data["steps"]:
            step["grid"]["model"].append("vit_b_16")

    more_models = lease_budget.lease_budget(verdict_lease(_variant(tmp_path, add_vit)))
    assert any("the lease takes" in p for p in more_models.problems())


def test_without_the_shared_caches_every_cell_pays_its_compile(tmp_path):
    def no_caches(data):
        for step in data["steps"]:
            step.pop("kernel_env")

    budget = lease_budget.lease_budget(verdict_lease(_variant(tmp_path, no_caches)))
    assert not any(c.warm for c in budget.cells)
    assert budget.problems()


def test_a_cell_no_gpu_has_timed_is_unpriced_and_fails_the_check(tmp_path):
    def longer(data):
        data["steps"][0]["params"]["min_seconds"] = 5.0  # a longer measurement than the H200's

    budget = lease_budget.lease_budget(verdict_lease(_variant(tmp_path, longer)))
    assert budget.unpriced == ["gpu_verdict: 10_inference/torch/compile/resnet50/bf16"]
    assert any(p.startswith("no H200 cost for") for p in budget.problems())


def test_the_command_line_prints_the_budget_and_says_whether_it_fits(capsys):
    argv = [str(SETUP), f"{VERDICT}:2", "--then", f"{VERDICT}:1"]
    assert lease_budget.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"^lease: \d+ s \(limit 600 s\)$", out, re.MULTILINE)
    assert lease_budget.main([*argv[:-1], f"{VERDICT}:2"]) == 1
    assert "does not fit" in capsys.readouterr().err
    assert lease_budget.main([f"{VERDICT}:x"]) == 2
    assert lease_budget.main([str(VERDICT), "--then"]) == 2


@pytest.mark.parametrize("name", ["gpu_verdict", "gpu_setup", "gpu_reference"])
def test_the_headers_say_what_runs_and_what_it_costs(name):
    header = (REPO / "params" / f"{name}.yaml").read_text().splitlines()
    header = header[: next(i for i, ln in enumerate(header) if not ln.startswith("#"))]
    assert len(header) <= 15
    assert any(f"fwbench run params/{name}.yaml" in ln for ln in header)
    assert any("Cost" in ln for ln in header)


def _compile_s(notebook_path) -> float:
    """The compile_s a cell's records carry (0 where it has none), read from the notebook's JSON."""
    for cell in json.loads(notebook_path.read_text())["cells"]:
        for output in cell.get("outputs", []):
            rows = output.get("data", {}).get(RECORDS_MIME) or []
            rows = json.loads(rows) if isinstance(rows, str) else rows
            for row in rows:
                if row["metric"] == "compile_s":
                    return row["value"]
    return 0.0


def test_the_h200_table_is_the_committed_runs_measurements():
    """Every cost in the table is a cell of the first lease's runs, as its manifest and records
    give it: the table is where the budget reads them, not a second source."""
    measured = {}
    for manifest_path in sorted((REPO / "executed").glob("gpu_lease*/*/manifest.json")):
        run_dir = manifest_path.parent
        for cell in json.loads(manifest_path.read_text())["cells"].values():
            if cell["status"] == "pending" or cell["notebook"] == "20_analysis":
                continue
            key = lease_budget._key(cell["notebook"], cell["parameters"])
            seconds = round(cell["duration_s"], 1)
            measured[key] = (seconds, round(_compile_s(run_dir / cell["path"]), 1))
    assert measured == lease_budget.H200_CELLS
