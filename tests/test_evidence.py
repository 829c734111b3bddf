"""A user's runs and reports never change the committed evidence.

The smoke path runs on a clone of this repository, from the clone's root as ``make run`` runs it:
``fwbench run params/smoke.yaml`` (its cheapest step, 00_setup, to keep the test short) and then
``fwbench report smoke``. Afterwards ``git status --porcelain`` names no modified or deleted
tracked file, every committed manifest hashes as before, the new run is a folder of its own and
the report sits in local/, which git ignores. The clone checks out only what the smoke path
reads (sparse), so it costs seconds.
"""

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

SPARSE = ["notebooks", "params", "executed/smoke", "report/smoke", "figures/smoke"]


def git(*args, cwd):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    path = tmp_path_factory.mktemp("evidence") / "clone"
    git("clone", "--quiet", "--sparse", str(REPO), str(path), cwd=REPO)
    git("sparse-checkout", "set", *SPARSE, cwd=path)
    return path


def manifest_hashes(root):
    """The committed manifests the clone checked out (the sparse clone lists the others too)."""
    tracked = git("ls-files", "executed", cwd=root).splitlines()
    return {
        name: hashlib.sha256((root / name).read_bytes()).hexdigest()
        for name in tracked
        if name.endswith("/manifest.json") and (root / name).is_file()
    }


@pytest.mark.slow
def test_the_smoke_path_changes_no_tracked_file(clone):
    before = manifest_hashes(clone)
    committed = {n.split("/")[2] for n in before if n.startswith("executed/smoke/")}
    assert committed, "the clone holds no committed smoke run to protect"
    env = {"FWBENCH_DB": ""}  # the clone's own index, never one this machine points at

    ran = run_cli("run", "params/smoke.yaml", "--only", "00_setup/*", cwd=clone, env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    reported = run_cli("report", "smoke", cwd=clone, env=env)
    assert reported.returncode == 0, reported.stderr[-3000:]

    status = git("status", "--porcelain", "--untracked-files=normal", cwd=clone).splitlines()
    changed = [line for line in status if not line.startswith("??")]
    assert changed == [], changed
    assert manifest_hashes(clone) == before
    # the run is a new folder beside the committed ones; the report went where git does not look
    (new,) = {p.name for p in (clone / "executed" / "smoke").iterdir() if p.is_dir()} - committed
    assert status == [f"?? executed/smoke/{new}/"]
    report = clone / "local" / "report" / "smoke" / "report.md"
    assert Path(reported.stdout.strip()).resolve() == report.resolve()
    assert f"Run `{new}` of campaign `smoke`" in report.read_text()
    git("check-ignore", "--quiet", "local/report/smoke/report.md", cwd=clone)
