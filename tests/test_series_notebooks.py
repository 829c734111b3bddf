"""A series keeps its notebooks: a run added to a series after its notebook changed executes the
first run's source, taken from git, so that its runs still pool; a source git lacks stops it."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import run_cli

NOTEBOOK = """# %% [markdown]
# # A notebook whose version a series must keep

# %% tags=["parameters"]
x = 1

# %%
print("{version}")
"""
CAMPAIGN = "campaign: kept\nsteps:\n  - notebook: nb/kept\n    params: {x: 2}\n"


def git(repo, *args):
    subprocess.run(
        ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def make_repo(tmp_path, version: str, commit: bool = True):
    repo = tmp_path / "repo"
    (repo / "nb").mkdir(parents=True)
    (repo / "nb" / "kept.py").write_text(NOTEBOOK.format(version=version))
    (repo / "kept.yaml").write_text(CAMPAIGN)
    git(repo, "init", "-q")
    if commit:
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", version)
    return repo


def manifests(out):
    return [json.loads(p.read_text()) for p in sorted(out.glob("kept/*/manifest.json"))]


def test_a_later_run_of_a_series_executes_its_first_runs_notebook(tmp_path):
    repo = make_repo(tmp_path, "version one")
    out = tmp_path / "out"
    first = run_cli("run", repo / "kept.yaml", "--out", out, "--no-index")
    assert first.returncode == 0, first.stderr[-2000:]
    (repo / "nb" / "kept.py").write_text(NOTEBOOK.format(version="version two"))
    git(repo, "commit", "-qam", "version two")
    more = run_cli(
        "run", repo / "kept.yaml", "--out", out, "--no-index", "--resume", "--invocations", "2"
    )
    assert more.returncode == 0, more.stderr[-2000:]
    one, two = manifests(out)
    assert two["series_id"] == one["run_id"] and two["invocation"] == 2
    sources = one["environment"]["notebook_sources"]
    assert two["environment"]["notebook_sources"] == sources
    assert set(two["series_notebooks"]) == {"kept"}
    (executed,) = (out / "kept" / two["run_id"] / "kept").glob("*.ipynb")
    assert "version one" in executed.read_text() and "version two" not in executed.read_text()


def test_a_series_whose_first_notebook_git_lacks_cannot_go_on(tmp_path):
    repo = make_repo(tmp_path, "never committed", commit=False)
    out = tmp_path / "out"
    first = run_cli("run", repo / "kept.yaml", "--out", out, "--no-index")
    assert first.returncode == 0, first.stderr[-2000:]
    (repo / "nb" / "kept.py").write_text(NOTEBOOK.format(version="changed"))
    more = run_cli(
        "run", repo / "kept.yaml", "--out", out, "--no-index", "--resume", "--invocations", "2"
    )
    assert more.returncode == 2 and "cannot go on" in more.stderr, more.stderr[-2000:]
    assert len(manifests(out)) == 1
