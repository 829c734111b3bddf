"""The library's layout rules (DESIGN.md section 1), checked on the source itself.

Each rule here failed on the layout before the regrouping: 24 top-level entries, six pairs of
modules sharing a name (``records.py`` and ``training/records.py``, ...), and the training steps
importing the inference family's mode resolution.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "fwbench"

# What each layer may import besides itself. The vocabulary reads model display labels from the
# registry's ModelSpec (lazily), the one edge that runs upwards.
ALLOWED = {
    "vocab": {"models"},
    "measure": {"vocab"},
    "models": {"vocab", "measure"},
    "data": {"vocab", "measure"},
    "results": {"vocab"},
    "pipeline": {"vocab", "measure", "models", "results"},
    "families": {"vocab", "measure", "models", "data", "results"},
    "report": {"vocab", "measure", "results", "pipeline"},
}
TOP_LEVEL = {"__init__.py", "__main__.py", "cli.py", "vocab.py"} | (set(ALLOWED) - {"vocab"})


def _modules():
    for path in sorted(LIB.rglob("*.py")):
        yield path, path.relative_to(LIB.parent).with_suffix("").parts


def _layer(parts: tuple) -> str:
    return parts[1] if len(parts) > 1 else parts[0]


def _imported_layers(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fwbench"):
            parts = node.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("fwbench."))
    return found


def test_the_top_level_holds_only_the_layers():
    entries = {p.name for p in LIB.iterdir() if p.name != "__pycache__"}
    assert entries == TOP_LEVEL, sorted(entries ^ TOP_LEVEL)


def test_no_two_modules_share_a_name():
    names = collections.defaultdict(list)
    for _path, parts in _modules():
        name = parts[-1] if parts[-1] != "__init__" else parts[-2]
        names[name].append("/".join(parts))
    shared = {name: where for name, where in names.items() if len(where) > 1}
    assert not shared, shared


def test_imports_run_one_way():
    wrong = []
    for path, parts in _modules():
        layer = _layer(parts)
        if layer in ("cli", "__main__", "__init__", "fwbench"):
            continue
        allowed = ALLOWED[layer] | {layer}
        for target in _imported_layers(path) - allowed:
            wrong.append(f"{'/'.join(parts)} imports {target}")
    assert not wrong, wrong


def test_every_notebook_family_has_its_room():
    from fwbench import vocab

    rooms = {p.stem for p in (LIB / "families").iterdir() if p.name != "__pycache__"} - {"__init__"}
    measuring = {f for f in vocab.FAMILIES.values() if f != "analysis"}
    assert measuring <= rooms, measuring - rooms
