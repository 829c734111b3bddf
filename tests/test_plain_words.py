"""Words an outsider can read: no run ids in the code, no phrases that only make sense inside the
project's history, a front page short enough to read, and campaign files that open with what they
are for, how to run them and what they cost.

Run ids belong to the evidence (executed/, report/) and the decision log (docs/decisions.md);
code that names one describes a past state of the data, not what it does.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_ID = re.compile(r"\d{8}T\d{6}Z")
HISTORY_WORDS = re.compile(r"the seed's|the issue's|\bsittings?\b", re.IGNORECASE)
README_MAX_LINES = 200
CAMPAIGN_HEADER_MAX_LINES = 15
COST = re.compile(r"\bcost\b", re.IGNORECASE)


def _code_files():
    for folder, suffixes in (("lib", {".py", ".json", ".yaml"}), ("notebooks", {".py"})):
        yield from (p for p in sorted((REPO / folder).rglob("*")) if p.suffix in suffixes)


def _campaign_header(path: Path) -> str:
    """A campaign file's opening comment block, where it says what it is and what it costs."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def _prose():
    for name in ("README.md", "DESIGN.md", "CONTRIBUTING.md"):
        yield name, (REPO / name).read_text()
    for path in _code_files():
        yield str(path.relative_to(REPO)), path.read_text()
    for path in sorted((REPO / "params").glob("*.yaml")):
        yield str(path.relative_to(REPO)), _campaign_header(path)
    for path in sorted((REPO / "params").glob("*.md")):
        yield str(path.relative_to(REPO)), path.read_text()


def test_no_run_id_in_code():
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for path in _code_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if RUN_ID.search(line)
    ]
    assert not found, f"run ids in code (say what the data shows instead): {found}"


@pytest.mark.parametrize("name,text", [pytest.param(n, t, id=n) for n, t in _prose()])
def test_no_history_words(name, text):
    hits = [m.group(0) for m in HISTORY_WORDS.finditer(text)]
    assert not hits, f"{name}: {hits} only make sense inside the project's history"


def test_design_holds_current_contracts_only():
    found = [
        n
        for n, line in enumerate((REPO / "DESIGN.md").read_text().splitlines(), 1)
        if RUN_ID.search(line)
    ]
    assert not found, f"DESIGN.md lines {found} name runs: their story is docs/decisions.md's"


def test_the_readme_is_a_front_door():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    assert not any(RUN_ID.search(line) for line in lines), "run ids belong in the reports"


def test_every_preface_belongs_to_a_campaign():
    """params/NAME.md is the hand-written context of report NAME: a campaign file or a committed
    report of that name must exist, else the preface is read by nothing."""
    for path in sorted((REPO / "params").glob("*.md")):
        name = path.stem
        assert (REPO / "params" / f"{name}.yaml").is_file() or (REPO / "report" / name).is_dir(), (
            path
        )
        assert not RUN_ID.search(path.read_text()), f"{path.name}: run ids belong in the report"


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.name) for p in sorted((REPO / "params").glob("*.yaml"))]
)
def test_campaign_header_says_purpose_command_and_cost(path):
    """A campaign file's header says what the campaign is for, the command that runs it and what it
    costs, in at most 15 lines; what earlier runs showed goes to docs/decisions.md."""
    lines = _campaign_header(path).splitlines()
    assert 0 < len(lines) <= CAMPAIGN_HEADER_MAX_LINES, f"{path.name}: header of {len(lines)} lines"
    command = f"fwbench run params/{path.name}"
    assert any(command in line for line in lines), f"{path.name}: the header lacks `{command}`"
    assert any(COST.search(line) for line in lines), f"{path.name}: no header line says its cost"
    assert not RUN_ID.search("\n".join(lines)), f"{path.name}: run ids belong in docs/decisions.md"
