"""The library's layout rules (DESIGN.md section 1), checked on the source itself.

Each rule here failed on the layout before the regrouping: 24 top-level entries, six pairs of
modules sharing a name (``records.py`` and ``training/records.py``, ...), and the training steps
importing the inference family's mode resolution.
"""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "fwbench"
NOTEBOOKS = LIB.parents[1] / "notebooks"

# What each layer may import besides itself. The vocabulary reads model display labels from the
# registry's ModelSpec (lazily), the one edge that runs upwards.
ALLOWED = {
    "vocab": {"models"},
    "measure": {"vocab"},
    "models": {"vocab", "measure"},
    "data": {"vocab", "measure"},
    "results": {"vocab"},
    "pipeline": {"vocab", "measure", "models", "results"},
    # the report's building blocks (tables, sentences, charts, sections) read results; running
    # the analysis notebook into a run is the lab's
    "report": {"vocab", "measure", "results"},
    # a family is one folder: what it runs and records, and its report built from those blocks
    "families": {"vocab", "measure", "models", "data", "results", "report"},
    # the published report: every family's sections in order, rendered; the README's blocks
    "publish": {"vocab", "measure", "results", "report", "families"},
}
# The lab owns the working state: it runs (pipeline), indexes (results) and publishes (publish).
ALLOWED["lab"] = {"vocab", "measure", "results", "pipeline", "report", "publish"}
# A command reads its options and drives any layer; no layer imports a command.
ALLOWED["commands"] = set(ALLOWED)
# The entry points above the layers: the command line only puts the commands together.
ENTRY = {"cli": {"commands"}, "__main__": {"cli"}, "__init__": set()}
TOP_LEVEL = {"__init__.py", "__main__.py", "cli.py", "vocab.py", "lab.py"} | (
    set(ALLOWED) - {"vocab", "lab"}
)

# Import cycles between modules that are known and not yet undone, each as its set of modules.
# None today; a cycle listed here fails once it is gone (then drop it here).
KNOWN_CYCLES: set[frozenset[str]] = set()


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


def _module_name(parts: tuple) -> str:
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Every fwbench module's imports of other fwbench modules, at its top or inside a function.
    ``from a import b`` imports the module ``a.b`` where there is one, else the package ``a``."""
    paths = {_module_name(parts): path for path, parts in _modules()}
    graph = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    found.add(submodule if submodule in paths else node.module)
        graph[name] = {target for target in found if target in paths and target != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
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
        allowed = ENTRY[layer] if layer in ENTRY else ALLOWED[layer] | {layer}
        for target in _imported_layers(path) - allowed:
            wrong.append(f"{'/'.join(parts)} imports {target}")
    assert not wrong, wrong


def test_no_module_imports_itself_through_others():
    cycles = _cycles(_import_graph())
    new = [sorted(cycle) for cycle in cycles - KNOWN_CYCLES]
    assert not new, f"import cycles between modules: {new}"
    gone = [sorted(cycle) for cycle in KNOWN_CYCLES - cycles]
    assert not gone, f"no longer cycles, drop them from KNOWN_CYCLES: {gone}"


def test_the_cycle_check_sees_imports_inside_functions_and_submodules():
    graph = _import_graph()
    # inside a function: runner imports slurm only where a run goes to Slurm, and so does the
    # executor registry
    assert "fwbench.pipeline.slurm" in graph["fwbench.pipeline.runner"]
    assert "fwbench.pipeline.slurm" in graph["fwbench.pipeline.executors"]
    # ``from fwbench.models import porting`` is the submodule, not the package that imports
    # the registry back
    assert "fwbench.models.porting" in graph["fwbench.models.registry"]
    assert "fwbench.models" not in graph["fwbench.models.registry"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset("abc")}


def test_every_notebook_family_has_its_room():
    from fwbench import vocab

    rooms = {p.stem for p in (LIB / "families").iterdir() if p.name != "__pycache__"} - {"__init__"}
    measuring = {vocab.family_of(p.stem) for p in NOTEBOOKS.glob("*.py")}
    assert measuring <= rooms, measuring - rooms


def test_every_family_has_its_report_module_and_the_outline_shows_each_section_once():
    from fwbench import vocab
    from fwbench.publish import catalog, outline

    named = {vocab.family_of(p.stem) for p in NOTEBOOKS.glob("*.py")}
    assert named == set(catalog.BY_FAMILY) | set(catalog.WITHOUT_SECTIONS)
    assert not set(catalog.BY_FAMILY) & set(catalog.WITHOUT_SECTIONS)
    assert catalog.WITHOUT_SECTIONS["setup"].startswith("Setup (00_setup)")
    for name, module in catalog.BY_FAMILY.items():
        assert module.__name__ == f"fwbench.families.{name}.{name}_report", name
        assert module.SECTIONS, f"families/{name}/{name}_report.py has no sections"
    every = [section for module in catalog.BY_FAMILY.values() for section in module.SECTIONS]
    assert sorted(map(id, outline.SECTIONS)) == sorted(map(id, every))
    assert len({s.title for s in outline.SECTIONS}) == len(outline.SECTIONS)


def test_a_family_is_one_folder_and_the_shared_layers_hold_no_familys_code():
    # a family's tables, sentences and charts sit in its folder beside its sections; report/
    # holds the blocks every family shares, publish/ the assembly, and neither a family's module
    from fwbench.publish import catalog

    names = set(catalog.BY_FAMILY) | set(catalog.WITHOUT_SECTIONS)
    rooms = {p.name for p in (LIB / "families").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == names, rooms ^ names
    loose = [p.name for p in (LIB / "families").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"family code outside a family's folder: {loose}"
    for layer in ("report", "publish"):
        stems = [p.stem for p in (LIB / layer).glob("*.py")]
        misplaced = [s for s in stems if any(s == n or s.startswith(f"{n}_") for n in names)]
        assert not misplaced, f"family code in {layer}/: {misplaced}"


# Readable in one go: a module of at most MAX_MODULE_LINES lines, a function of at most
# MAX_FUNCTION_LINES. The exceptions are the ones DESIGN.md §1 lists with their reason; the list is
# exact, so a module that grows past the bound fails and one that shrinks below it must leave it.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
LONG_MODULES: set[str] = set()
LONG_FUNCTIONS = {
    "families/distributed/jax_side.py:_build",
    "families/memory/liveness.py:analyze",
    "families/memory/simulator.py:simulate",
}


def test_modules_stay_readable():
    long = {
        path.relative_to(LIB).as_posix()
        for path, _parts in _modules()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    assert long - LONG_MODULES == set(), f"past {MAX_MODULE_LINES} lines: {long - LONG_MODULES}"
    assert LONG_MODULES - long == set(), f"no longer long, drop them: {LONG_MODULES - long}"


def test_functions_stay_readable():
    long = set()
    for path, _parts in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    long.add(f"{path.relative_to(LIB).as_posix()}:{node.name}")
    assert long - LONG_FUNCTIONS == set(), (
        f"past {MAX_FUNCTION_LINES} lines: {long - LONG_FUNCTIONS}"
    )
    assert LONG_FUNCTIONS - long == set(), f"no longer long, drop them: {LONG_FUNCTIONS - long}"


def test_one_module_indexes_and_the_report_never_runs_the_pipeline():
    # "run, then index, then read" is the lab's (fwbench.lab): one caller of db.ingest
    callers = [
        "/".join(parts)
        for path, parts in _modules()
        if "ingest(" in path.read_text() and parts[-1] not in ("db",)
    ]
    assert callers == ["fwbench/lab"], callers
    report = [
        "/".join(parts)
        for path, parts in _modules()
        if _layer(parts) == "report" and "pipeline" in _imported_layers(path)
    ]
    assert not report, report


def _design_order() -> list[str]:
    """The layers as DESIGN.md section 1 lists the library, top to bottom."""
    text = (LIB.parents[1] / "DESIGN.md").read_text()
    block = text.split("lib/fwbench/\n", 1)[1].split("```", 1)[0]
    names = [
        line.split()[0] for line in block.splitlines() if line[:3].strip() and line[2:3] != " "
    ]
    return [n.removesuffix("/").removesuffix(".py") for n in names]


def test_design_lists_the_layers_in_their_import_order():
    order = _design_order()
    assert set(order) == set(ALLOWED) | {"cli"}, order
    upward = [
        f"{layer} imports {target}"
        for layer, allowed in ALLOWED.items()
        for target in allowed
        if order.index(target) < order.index(layer) and (layer, target) != ("vocab", "models")
    ]
    assert not upward, f"DESIGN.md lists these layers above what they import: {upward}"


def test_a_verdict_is_put_into_words_in_one_place():
    # measure/verdicts.py says what each verdict reads as (WORDS, words); a report that spells
    # a verdict's words itself drifts from the rest when the margin or a word changes
    spelled = [
        "/".join(parts)
        for path, parts in _modules()
        if "equivalent within ±" in path.read_text() and parts[-1] != "verdicts"
    ]
    assert not spelled, spelled


def test_the_lab_imports_the_report_only_to_build_one():
    # a GPU node runs `fwbench run --no-index` from a kit without the report's libraries
    tree = ast.parse((LIB / "lab.py").read_text())
    at_top = {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fwbench")
    }
    assert not {m for m in at_top if m.startswith(("fwbench.report", "fwbench.publish"))}, at_top


# A public top-level name says "use me from elsewhere". One that nothing outside its module
# names (library, tests, notebooks, examples, docs' scripts, campaign files) is private in fact;
# it keeps its underscore so a reader knows. A few stay public as the API a user's code may
# call (a declared model's helpers, the report's building blocks); past this bound, tidy up.
MAX_UNUSED_PUBLIC = 100
REPO = LIB.parents[1]


def _public_top_level(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def unused_public_names(root: Path = REPO) -> list[str]:
    """``module:name`` for each public top-level name of the library that appears in no other
    file: a word-level search, so a mention in a string or comment counts as a use."""
    word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    texts = {}
    for folder in ("lib", "tests", "notebooks", "examples", "docs", "gpu", "params", ".ci"):
        for path in (root / folder).rglob("*"):
            if (
                path.is_file()
                and path.suffix in (".py", ".yaml", ".sh", "")
                and ("node_modules" not in path.parts)
            ):
                texts[path] = set(word.findall(path.read_text(errors="ignore")))
    for name in ("pyproject.toml", "Makefile"):
        texts[root / name] = set(word.findall((root / name).read_text()))
    unused = []
    for path in sorted((root / "lib" / "fwbench").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        for name in _public_top_level(ast.parse(path.read_text())):
            if not any(name in words for other, words in texts.items() if other != path):
                unused.append(f"{path.relative_to(root / 'lib' / 'fwbench')}:{name}")
    return unused


def test_few_public_names_go_unused_outside_their_module():
    unused = unused_public_names()
    assert len(unused) <= MAX_UNUSED_PUBLIC, (
        f"{len(unused)} public names used nowhere outside their module (at most "
        f"{MAX_UNUSED_PUBLIC}); make them private or remove them: {unused[:20]} ..."
    )


def test_the_unused_name_count_sees_a_name_nobody_calls(tmp_path):
    (tmp_path / "lib" / "fwbench").mkdir(parents=True)
    (tmp_path / "lib" / "fwbench" / "a.py").write_text(
        "def used():\n    pass\ndef lonely():\n    pass\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from fwbench.a import used\n")
    for name in ("pyproject.toml", "Makefile"):
        (tmp_path / name).write_text("")
    assert unused_public_names(tmp_path) == ["a.py:lonely"]
