"""Read a jupytext notebook and its ``parameters`` cell.

The parameters cell is the notebook's contract with campaigns: each line ``name = literal`` declares a
parameter, its default and so its type. A trailing ``# one of: a, b, c`` comment restricts the values;
a comment that opens with ``> 0`` (``# > 0: seconds of audio``) says every value, or every item of a
list, must be a number above zero. A number named as a size (``batch_size``, ``batch_sizes``,
``image_size``, ``seq_len``, ``world_sizes``, ``timer_check_batch``, ...) is held above zero
without it.
A parameter called ``model`` (or ``<something>_model``) without such a comment must name a model the
registry knows: one with a Flax twin, any torchvision classification model (PyTorch only), or a
declared one; a ``one of:`` list ending in "or a registry model" takes its names and those.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

_ONE_OF_RE = re.compile(r"#.*?one of:\s*(?P<choices>[^#]+)")
_POSITIVE_RE = re.compile(r"#\s*>\s*0\b")
# A size counts something (images in a batch, pixels, tokens, processes), so a number named like
# one is held above zero by its name, as a model is held to the registry by its: a notebook whose
# author left out the "> 0" comment still refuses a batch of -4 before anything runs.
_SIZE_NAME_RE = re.compile(r"(^|_)(sizes?|seq_lens?|batch|batch_per_worker)$")


@dataclass
class NotebookParameter:
    name: str
    default: object
    choices: tuple | None = None
    positive: bool = False

    def check(self, value) -> str | None:
        """A message describing what is wrong with ``value``, or None when it is acceptable."""
        problem = _type_problem(self.default, value)
        if problem:
            return problem
        values = value if isinstance(value, list) else [value]
        if self.positive:
            if not values or any(v is None or v <= 0 for v in values):
                return f"every value must be above 0, got {value!r}"
        if self.choices is not None:
            bad = [v for v in values if v not in self.choices]
            if bad:
                return (
                    f"unknown value(s) {bad}; expected one of: {', '.join(map(str, self.choices))}"
                )
        return None


def _type_problem(default, value) -> str | None:
    if default is None or value is None:
        return None
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif isinstance(default, (list, tuple)):
        if not isinstance(value, list):
            return f"expected a list like {default!r}, got {value!r}"
        if default:
            for item in value:
                problem = _type_problem(default[0], item)
                if problem:
                    return f"list item {item!r}: {problem}"
        return None
    else:
        ok = isinstance(value, type(default))
    if not ok:
        return f"expected {type(default).__name__} like {default!r}, got {value!r}"
    return None


def read_notebook(path: str | Path, kernel_name: str = "python3") -> nbformat.NotebookNode:
    """The jupytext ``.py`` (or ``.ipynb``) as a notebook object with a kernelspec papermill can use."""
    path = Path(path)
    nb = jupytext.read(path)
    nb.metadata["kernelspec"] = {
        "name": kernel_name,
        "display_name": kernel_name,
        "language": "python",
    }
    nb.metadata.setdefault("language_info", {"name": "python"})
    return nb


def _parameters_source(nb: nbformat.NotebookNode, path: Path) -> str:
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(
            f"{path}: expected exactly one cell tagged 'parameters', found {len(cells)}"
        )
    return cells[0].source


def read_parameters(path: str | Path) -> dict[str, NotebookParameter]:
    path = Path(path)
    source = _parameters_source(read_notebook(path), path)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"{path}: the parameters cell is not valid Python: {exc}") from None
    lines = source.splitlines()
    declared: dict[str, NotebookParameter] = {}
    for node in tree.body:
        if not (
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and len(getattr(node, "targets", [None])) == 1
        ):
            raise ValueError(f"{path}: parameters cell line {node.lineno}: only `name = literal`")
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if not isinstance(target, ast.Name):
            raise ValueError(f"{path}: parameters cell line {node.lineno}: only `name = literal`")
        try:
            default = ast.literal_eval(node.value)
        except ValueError:
            raise ValueError(
                f"{path}: parameter {target.id!r} must have a literal default"
            ) from None
        comment = " ".join(lines[node.lineno - 1 : node.end_lineno])
        declared[target.id] = NotebookParameter(
            target.id,
            default,
            _choices(lines, node, target.id),
            positive=bool(_POSITIVE_RE.search(comment)) or _is_size(target.id, default),
        )
    return declared


def _is_size(name: str, default) -> bool:
    """Whether ``name`` names a size and its default is a number or a list of them (a size
    given as a word, such as ``encoder_size = "tiny"``, is left to its ``one of`` comment)."""
    items = default if isinstance(default, (list, tuple)) else [default]
    numbers = bool(items) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in items
    )
    return numbers and _SIZE_NAME_RE.search(name) is not None


def _choices(lines: list[str], node: ast.stmt, name: str) -> tuple | None:
    text = " ".join(lines[node.lineno - 1 : node.end_lineno])
    match = _ONE_OF_RE.search(text)
    if match:
        choices = tuple(_literal(c.strip()) for c in match.group("choices").split(",") if c.strip())
        if choices and choices[-1] == _OR_REGISTRY:
            return _RegistryModels(choices[:-1])
        return choices
    if name == "model" or name.endswith("_model"):
        return REGISTRY_MODELS
    return None


# the last item of a ``one of:`` list that also takes every registry model (12_memory's model)
_OR_REGISTRY = "or a registry model"


class _RegistryModels:
    """The ``choices`` of a model parameter: too many to list (every torchvision classification
    model, every declared one), so membership asks the registry, and the error message names the
    twins. ``extra`` are names the notebook takes besides (``# one of: bert, or a registry
    model``)."""

    def __init__(self, extra: tuple = ()):
        self.extra = tuple(extra)

    def __contains__(self, name) -> bool:
        from fwbench.models.registry import is_known

        return isinstance(name, str) and (name in self.extra or is_known(name))

    def __iter__(self):
        from fwbench.models.registry import twin_models

        return iter(
            [
                *self.extra,
                *twin_models(),
                "or any torchvision classification model (PyTorch only)",
            ]
        )


REGISTRY_MODELS = _RegistryModels()


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
