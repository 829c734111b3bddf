import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "tests" / "standin" / "standin"


def run_cli(*args, cwd=None, env=None, timeout=900):
    """Run ``python -m fwbench`` as a user would, returning the completed process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "fwbench", *map(str, args)],
        cwd=cwd or REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def write_campaign(tmp_path):
    def write(text: str, name: str = "campaign.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text.replace("notebook: STANDIN", f"notebook: {STANDIN}"))
        return path

    return write
