"""JupyterLab as a client: `make lab`'s server, driven by a real browser.

The slow tests start JupyterLab the way `make lab` does (jupyter_config/ on JUPYTER_CONFIG_PATH) on a
free loopback port, then check the server (notebooks/*.py are notebooks, the fwbench kernel is
there) and, with Debian's Chromium under Playwright, open notebooks/00_setup.py, Run All, and
compare its records with those papermill produces from the same notebook with the same defaults.
A screenshot of the records table is kept in tests/artifacts/ for a person to look at.

Where Chromium or playwright is missing the browser test is skipped, unless
FWBENCH_REQUIRE_BROWSER=1 (CI sets it, after `make browser`), where it fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from fwbench.pipeline.notebook_params import read_notebook
from fwbench.results.records import COLUMNS, INTERACTIVE, RECORDS_MIME, context_from_env

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "tests" / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
# Headless on a VM without a GPU or a writable /dev/shm of any size, and nothing reached outside.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SETUP_NB = "notebooks/00_setup.py"
# Generous: on two shared cores 00_setup's torch.compile alone has taken over a minute.
RUN_ALL_TIMEOUT_S = 600
UI_TIMEOUT_MS = 90_000

# Settings only the test needs: nothing may be saved over the committed notebooks while it runs, and
# the news question would cover the outputs in the screenshot.
TEST_LAB_OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def test_records_without_a_runner_say_interactive(monkeypatch):
    for var in ("FWBENCH_RUN_ID", "FWBENCH_CAMPAIGN", "FWBENCH_NOTEBOOK", "FWBENCH_CELL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("FWBENCH_TRIAL", raising=False)
    monkeypatch.setenv("JPY_SESSION_NAME", str(REPO / SETUP_NB))
    ctx = context_from_env()
    assert ctx == {
        "run_id": INTERACTIVE,
        "campaign": INTERACTIVE,
        "notebook": "00_setup",
        "cell": INTERACTIVE,
        "trial": 0,
    }
    # papermill outside the runner: no session name either, still no campaign's context
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert context_from_env()["run_id"] == INTERACTIVE
    assert context_from_env()["notebook"] is None


def test_records_from_the_runner_keep_its_context(monkeypatch):
    env = {
        "FWBENCH_RUN_ID": "20260101T000000Z",
        "FWBENCH_CAMPAIGN": "smoke",
        "FWBENCH_NOTEBOOK": "10_inference",
        "FWBENCH_CELL": "model=resnet50",
        "FWBENCH_TRIAL": "2",
        "JPY_SESSION_NAME": "/elsewhere/00_setup.py",
    }
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert context_from_env() == {
        "run_id": "20260101T000000Z",
        "campaign": "smoke",
        "notebook": "10_inference",
        "cell": "model=resnet50",
        "trial": 2,
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    """A running JupyterLab server: its base URL, token and the REST calls the tests make."""

    def __init__(self, url: str, token: str, log: Path):
        self.url, self.token, self.log = url, token, log

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def page_url(self, path: str) -> str:
        # ?reset: a fresh workspace, whatever an earlier session left open
        return f"{self.url}/lab/tree/{path}?reset&token={self.token}"


def _server_env(tmp: Path) -> dict:
    test_config = tmp / "config"
    (test_config / "labconfig").mkdir(parents=True)
    (test_config / "labconfig" / "default_setting_overrides.json").write_text(
        json.dumps(TEST_LAB_OVERRIDES)
    )
    # No runner context (a kernel started by hand has none), and none of the user's own Jupyter
    # settings, workspaces or runtime files: the repository's jupyter_config/ is what is tested.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FWBENCH_")}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "user-config"),
        JUPYTER_CONFIG_PATH=f"{test_config}{os.pathsep}{REPO / 'jupyter_config'}",
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        XLA_PYTHON_CLIENT_PREALLOCATE=os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
    )
    return env


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on the repository as `make lab` starts it, stopped (kernels and all) afterwards."""
    tmp = tmp_path_factory.mktemp("lab")
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={REPO}",
        # checkpoints out of notebooks/, and the app reachable from the page for reading outputs
        f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}",
        "--LabApp.expose_app_in_browser=True",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = tmp / "server.log"
    with open(log, "wb") as log_fh:
        server = subprocess.Popen(
            cmd, cwd=REPO, env=_server_env(tmp), stdout=log_fh, stderr=subprocess.STDOUT
        )
    server_ps = psutil.Process(server.pid)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_until_serving(Lab(url, token, log), server)
        yield Lab(url, token, log)
    finally:
        # SIGTERM makes the server shut its kernels down; whatever outlives it is killed by pid.
        descendants = server_ps.children(recursive=True) if server.poll() is None else []
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        _, alive = psutil.wait_procs(descendants, timeout=10)
        for proc in alive:
            proc.kill()


def _wait_until_serving(lab: Lab, server: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited ({server.returncode}):\n{lab.log.read_text()[-3000:]}")
        try:
            lab.api("/api/status")
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer in {timeout_s} s:\n{lab.log.read_text()[-3000:]}")


def _records(nb: dict) -> list[dict]:
    """The embedded records of a notebook given as nbformat JSON."""
    rows = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            payload = output.get("data", {}).get(RECORDS_MIME)
            if payload is not None:
                rows.extend(payload if isinstance(payload, list) else [payload])
    return rows


def _what_was_measured(rows: list[dict]) -> list[tuple]:
    """What makes two runs' records the same measurements, leaving out values and timings."""
    return sorted(
        (
            row["metric"],
            row["unit"],
            row["status"],
            str(row["framework"]),
            str(row["device"]),
            str(row["extra"].get("check")),
        )
        for row in rows
    )


@pytest.mark.slow
def test_server_serves_scripts_as_notebooks_with_the_fwbench_kernel(lab):
    model = lab.api("/api/contents/notebooks/10_inference.py")
    assert model["type"] == "notebook"
    tagged = [c for c in model["content"]["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1 and tagged[0]["cell_type"] == "code"
    assert model["content"]["metadata"]["kernelspec"]["name"] == "fwbench"

    specs = lab.api("/api/kernelspecs")
    assert "fwbench" in specs["kernelspecs"], "no fwbench kernel: run `make setup`"
    assert specs["default"] == "fwbench"

    viewer = lab.api("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert viewer["schema"]["properties"]["defaultViewers"]["default"].get("python") == (
        "Jupytext Notebook"
    )


def _require_browser() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (make browser)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if missing:
        reason = "no browser to drive JupyterLab: missing " + ", ".join(missing)
        if os.environ.get("FWBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def _papermill_with_defaults(out_dir: Path) -> tuple[subprocess.Popen, Path, Path]:
    """Start papermill on 00_setup with its defaults, as the runner would but without a campaign."""
    source = out_dir / "00_setup.ipynb"
    executed = out_dir / "00_setup.executed.ipynb"
    log = out_dir / "papermill.log"
    nbformat.write(read_notebook(REPO / SETUP_NB, "fwbench"), str(source))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FWBENCH_")}
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "papermill", str(source), str(executed)]
            + ["--kernel", "fwbench", "--cwd", str(REPO / "notebooks")],
            env=env,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
        )
    return proc, executed, log


# Finished when every code cell has its execution count, or one failed (Run All stops there), and
# the kernel is idle: the toolbar's indicator alone also reads idle between two queued cells.
_RUN_FINISHED_JS = """(path) => {
  const panel = Array.from(window.jupyterapp.shell.widgets("main"))
    .find((w) => w.context && w.context.path === path);
  if (!panel || !panel.sessionContext.session) return false;
  const cells = panel.content.model.toJSON().cells.filter((c) => c.cell_type === "code");
  const failed = cells.some((c) => (c.outputs || []).some((o) => o.output_type === "error"));
  const done = cells.every((c) => c.execution_count !== null);
  return (failed || done) && panel.sessionContext.session.kernel.status === "idle";
}"""

_NOTEBOOK_JSON_JS = """(path) => Array.from(window.jupyterapp.shell.widgets("main"))
  .find((w) => w.context && w.context.path === path).content.model.toJSON()"""


@pytest.mark.slow
def test_run_all_in_jupyterlab_gives_papermills_records(lab, tmp_path):
    _require_browser()
    from playwright.sync_api import sync_playwright

    # the reference runs alongside the browser session; it needs the same minute of CPU either way
    papermill, executed, papermill_log = _papermill_with_defaults(tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)
    shot, failure_shot = ARTIFACTS / "lab_00_setup_run_all.png", ARTIFACTS / "lab_failure.png"
    for stale in (shot, failure_shot):
        stale.unlink(missing_ok=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(UI_TIMEOUT_MS)
            try:
                page.goto(lab.page_url(SETUP_NB))
                # opened by a double-click's viewer: a notebook, not the script in an editor
                page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
                page.locator(
                    ".jp-NotebookPanel .jp-Toolbar-kernelName", has_text="fwbench"
                ).wait_for()
                page.locator(
                    '.jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status="idle"]'
                ).wait_for()

                page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
                page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
                page.wait_for_function(
                    _RUN_FINISHED_JS,
                    arg=SETUP_NB,
                    timeout=RUN_ALL_TIMEOUT_S * 1000,
                    polling=1000,
                )
                nb = page.evaluate(_NOTEBOOK_JSON_JS, SETUP_NB)

                table = page.locator(".jp-OutputArea-output", has_text="fwbench records")
                table.scroll_into_view_if_needed()
                assert "check_passed" in table.inner_text()
                page.screenshot(path=str(shot))
                print(f"screenshot of the records table after Run All: {shot}")
            except Exception:
                page.screenshot(path=str(failure_shot))
                print(f"screenshot at the failure: {failure_shot}")
                raise
            finally:
                browser.close()
        papermill.wait(timeout=RUN_ALL_TIMEOUT_S)
    finally:
        if papermill.poll() is None:
            papermill.kill()
            papermill.wait()

    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, f"Run All failed: {errors[0]['ename']}: {errors[0]['evalue']}"
    sessions = [s for s in lab.api("/api/sessions") if s["path"] == SETUP_NB]
    assert [s["kernel"]["name"] for s in sessions] == ["fwbench"]

    assert papermill.returncode == 0, papermill_log.read_text()[-3000:]
    reference = _records(nbformat.read(str(executed), as_version=4))
    lab_rows = _records(nb)
    assert lab_rows and reference
    assert all(sorted(row) == sorted(COLUMNS) for row in lab_rows + reference)
    assert _what_was_measured(lab_rows) == _what_was_measured(reference)
    # a number measured by hand says so, and which notebook measured it
    assert {(r["run_id"], r["campaign"], r["cell"], r["notebook"]) for r in lab_rows} == {
        (INTERACTIVE, INTERACTIVE, INTERACTIVE, "00_setup")
    }
