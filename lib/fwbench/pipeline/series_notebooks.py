"""A series keeps its notebooks: every run of a series executes the notebook sources its first run
executed, byte for byte, so that its runs pool (reports pool only runs whose notebooks hash the
same, ``environment.notebook_sources``).

When a notebook changed after a series began (a new mode added to it, say), a new run of that
series takes the first run's source out of git, at a commit of the series' own runs or any commit
that touched the file, checked against the hash the first run recorded. The copy is written into
the new run's folder (``series_notebooks/``), which the run's cells execute and its manifest names
(``series_notebooks``: notebook -> the commit it came from). A source git no longer holds is bad
input: the series cannot go on, and a run without ``--resume`` starts a new one.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from fwbench.pipeline.campaign import CampaignError, Cell
from fwbench.pipeline.environment import source_digest

_FOLDER = "series_notebooks"


def _git(args: list[str], cwd: Path) -> bytes | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _source_in_git(path: Path, digest: str, commits: list[str]) -> tuple[bytes, str] | None:
    """The bytes of ``path`` whose hash is ``digest``, and the commit they came from: first at
    ``commits`` (the series' own), then at every commit that changed the file, newest first."""
    folder = path.resolve().parent
    top = _git(["rev-parse", "--show-toplevel"], folder)
    if top is None:
        return None
    relative = path.resolve().relative_to(Path(top.decode().strip())).as_posix()
    history = (_git(["log", "--format=%H", "--", relative], folder) or b"").decode().split()
    for commit in [*commits, *history]:
        data = _git(["show", f"{commit}:{relative}"], folder)
        if data is not None and source_digest(data) == digest:
            return data, commit
    return None


def series_sources(cells: list[Cell], first: dict) -> dict[str, tuple[bytes, str]]:
    """For each notebook of ``cells`` that no longer hashes as in ``first`` (the series' first
    manifest): its first run's bytes and commit. Raises ``CampaignError`` when git lacks them."""
    environment = first.get("environment") or {}
    recorded = environment.get("notebook_sources") or {}
    sha = environment.get("git_sha")
    commits = [sha.removesuffix("-dirty")] if sha else []
    paths = {c.notebook: c.notebook_path for c in cells}
    found = {}
    for name, path in sorted(paths.items()):
        want = recorded.get(name)
        if want is None or source_digest(Path(path).read_bytes()) == want:
            continue
        source = _source_in_git(Path(path), want, commits)
        if source is None:
            raise CampaignError(
                f"{name} changed since series {first.get('series_id') or first.get('run_id')} "
                f"began, and git holds no source of it that hashes {want}; the series cannot "
                "go on with the same notebooks (run without --resume to start a new series)"
            )
        found[name] = source
    return found


def pin(cells: list[Cell], run_dir: Path, sources: dict[str, tuple[bytes, str]]) -> dict:
    """Write ``sources`` into the run's folder and point the cells at them; returns the
    manifest's ``series_notebooks`` entry (notebook -> commit)."""
    if not sources:
        return {}
    folder = run_dir / _FOLDER
    folder.mkdir(exist_ok=True)
    for name, (data, _commit) in sources.items():
        (folder / f"{name}.py").write_bytes(data)
    repoint(cells, run_dir, list(sources))
    return {name: commit for name, (_data, commit) in sorted(sources.items())}


def repoint(cells: list[Cell], run_dir: Path, names) -> None:
    """Make the cells of notebooks ``names`` execute the run's own copies (a resumed run)."""
    for cell in cells:
        if cell.notebook in names:
            cell.notebook_path = run_dir / _FOLDER / f"{cell.notebook}.py"
