"""The GPU lease kit: what travels to a node without network, and a rehearsal of gpu/run.sh.

A GPU node is borrowed for minutes, has no registry, and takes the checkout only when it is small:
the code must stay small, the kit (gpu/kit.txt) plus the node's image (gpu/image.txt) must cover
every import a lease makes, and gpu/run.sh must run from a copy without ``.git``. The rehearsal
runs it on this CPU with a tiny campaign of the lease's notebooks, with every distribution that is
neither in the image nor in the kit hidden from the runner and its kernels.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fwbench.pipeline import environment
from fwbench.vocab import ENV_COMMIT, KIT_COMMIT_FILE

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ("executed/", "figures/", "report/")
CODE_LIMIT = 8 * 2**20
# left out of the kit on purpose (gpu/kit.txt says why); the lease runs without them
LEFT_OUT = {"duckdb", "debugpy", "jedi"}
# the node's Python (gpu/image.txt)
NODE = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def _names(path: Path) -> set[str]:
    lines = (line for line in path.read_text().splitlines() if not line.startswith("#"))
    return {canonicalize_name(word) for line in lines for word in line.split()}


KIT = _names(ROOT / "gpu/kit.txt")
IMAGE = _names(ROOT / "gpu/image.txt")


def test_the_code_without_the_evidence_travels_with_room():
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    code = [f.decode() for f in files if f and not f.decode().startswith(EVIDENCE)]
    size = sum((ROOT / f).stat().st_size for f in code if (ROOT / f).is_file())
    assert size <= CODE_LIMIT, f"code outside {EVIDENCE} is {size / 2**20:.1f} MiB"


def _kit_requirements():
    """(kit distribution, requirement, its canonical name) for each requirement of the kit's
    wheels that applies on the node's Python."""
    for name in sorted(KIT):
        for text in importlib.metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(NODE):
                yield name, req, canonicalize_name(req.name)


def test_the_kit_and_the_image_meet_every_requirement_of_the_kit():
    missing = [
        f"{name} needs {req}"
        for name, req, wanted in _kit_requirements()
        if wanted not in KIT | IMAGE | LEFT_OUT
    ]
    assert not missing


def test_the_rehearsal_installs_what_the_kit_takes_from_the_image():
    """gpu/rehearse.sh builds the node's environment from gpu/image-pins.txt, a part of the image:
    a requirement the kit leaves to the image must be in that part, or the rehearsal fails where
    the node would not."""
    lines = (ROOT / "gpu/image-pins.txt").read_text().splitlines()
    pinned = {canonicalize_name(Requirement(x).name) for x in lines if x and not x.startswith("#")}
    missing = {
        f"{wanted} (for {name})"
        for name, _, wanted in _kit_requirements()
        if wanted in IMAGE and wanted not in pinned
    }
    assert not missing, sorted(missing)


def test_a_named_commit_wins_over_a_stale_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_COMMIT, "0123abc dirty")
    assert environment.git_sha(ROOT) == "0123abc-dirty"
    monkeypatch.setenv(ENV_COMMIT, "0123abc clean")
    assert environment.git_sha(tmp_path) == "0123abc"
    monkeypatch.delenv(ENV_COMMIT)
    assert environment.git_sha(tmp_path) is None


# Hides every distribution that is neither in the image nor in the kit, in the runner and in each
# kernel it starts (they inherit PYTHONPATH): an import the node could not make fails here too.
BLOCKER = """
import importlib.metadata, os, re, sys
_allowed = set(os.environ["FWBENCH_TEST_ALLOWED"].split(","))
for _top, _owners in importlib.metadata.packages_distributions().items():
    if not any(re.sub(r"[-_.]+", "-", o).lower() in _allowed for o in _owners):
        # None in sys.modules: an import fails and importlib.util.find_spec says absent, as
        # IPython probes for jedi
        sys.modules.setdefault(_top, None)
"""


@pytest.fixture(scope="module")
def node_copy(tmp_path_factory):
    """The checkout as a node gets it: tracked and untracked files, no .git, no evidence, the
    kit made for this Python (the node's is 3.12; the wheels' names differ, not the list)."""
    copy = tmp_path_factory.mktemp("node") / "fwbench"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in (f.decode() for f in files if f):
        if name.startswith(EVIDENCE) or not (ROOT / name).is_file():
            continue
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((ROOT / name).read_bytes())
    (copy / "gpu/run.sh").chmod(0o755)
    made = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "gpu-kit",
            f"PYTHON={sys.executable}",
            f"GPU_PYTHON={sys.version_info.major}.{sys.version_info.minor}",
            f"GPU_KIT={copy / 'gpu/kit'}",
            # the node's fallback Flax needs Python 3.12; this Python's pinned one stands in
            f"GPU_FLAX={importlib.metadata.version('flax')}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.fail(f"make gpu-kit failed (it needs PyPI):\n{made.stderr[-2000:]}")
    return copy


def test_the_lease_runs_offline_from_a_copy_without_git(node_copy, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    allowed = KIT | IMAGE | {"fwbench", "pip", "setuptools", "wheel"}
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(blocker),
        "FWBENCH_TEST_ALLOWED": ",".join(sorted(allowed)),
    }
    env.pop("OUT", None)
    out = tmp_path / "out"
    done = subprocess.run(
        ["gpu/run.sh", "--out", str(out), "--cap", "400", "params/gpu_rehearsal.yaml"],
        cwd=node_copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    with tarfile.open(out / "gpu_run.tar.gz") as archive:
        names = archive.getnames()
        manifest = next(n for n in names if n.endswith("manifest.json"))
        text = archive.extractfile(manifest).read().decode()
    assert sum(n.endswith(".ipynb") for n in names) == 5
    commit = (node_copy / "gpu/kit/COMMIT").read_text().split()[0]
    assert commit in text, "the records name the commit the kit was made from"
    # and the kit's commit file travels beside the manifest, which the index prefers
    beside = manifest.replace("manifest.json", KIT_COMMIT_FILE)
    assert [n for n in names if n.endswith(KIT_COMMIT_FILE)] == [beside]


def test_run_sh_refuses_a_missing_kit_with_one_line(tmp_path):
    bare = tmp_path / "bare"
    (bare / "gpu").mkdir(parents=True)
    (bare / "gpu/run.sh").write_bytes((ROOT / "gpu/run.sh").read_bytes())
    done = subprocess.run(
        ["bash", "gpu/run.sh", "--out", str(tmp_path / "out")],
        cwd=bare,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "make gpu-kit" in done.stderr
    assert not (tmp_path / "out").exists()


def test_run_sh_refuses_invocations_that_are_not_a_number(tmp_path):
    bare = tmp_path / "bare"
    (bare / "gpu").mkdir(parents=True)
    (bare / "gpu/run.sh").write_bytes((ROOT / "gpu/run.sh").read_bytes())
    done = subprocess.run(
        ["bash", "gpu/run.sh", "--invocations", "two", "params/gpu_verdict.yaml"],
        cwd=bare,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--invocations" in done.stderr
