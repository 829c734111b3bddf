"""The checks a campaign's cells pass before anything runs: each value against its notebook's
``parameters`` cell, a JAX cell's twin, a framework's modes and choices, a preloaded library, and the
campaign's own declared models. Each failure is one ``CampaignError``: one line, exit status 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fwbench import vocab
from fwbench.models.declared import Declaration, DeclarationError, parse
from fwbench.models.registry import declare, get_spec, require_twin
from fwbench.pipeline.notebook_params import REGISTRY_MODELS, NotebookParameter


class CampaignError(ValueError):
    """Bad input in a campaign file: reported as one message, exit status 2, nothing written."""


def check_preload(where: str, key: str, env: dict) -> None:
    """A library in LD_PRELOAD that the dynamic linker cannot find is only a warning on the
    kernel's stderr, and the cell would run without it: refuse it here instead."""
    for name in str(env.get("LD_PRELOAD") or "").replace(":", " ").split():
        if not preload_found(name):
            raise CampaignError(
                f"{where}: {key} preloads {name}, which this machine's dynamic linker does not "
                f"find; install it (for jemalloc: make jemalloc) or remove it from the step"
            )


def preload_found(name: str) -> bool:
    """Whether ``name`` (a path, or a file name the linker looks up in its cache) exists."""
    if "/" in name:
        return Path(name).is_file()
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            listing = subprocess.run(
                [ldconfig, "-p"], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        return any(line.strip().startswith(f"{name} ") for line in listing.splitlines())
    return False


def declare_models(path: Path, section) -> dict[str, Declaration]:
    """The campaign's own models, imported and counted in this process first: the steps' checks
    then know their names, and a bad declaration stops the campaign before anything runs."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise CampaignError(f"{path}: 'models' must map model names to their declarations")
    found = {}
    for name, mapping in section.items():
        try:
            found[name] = parse(name, mapping, base=path.parent, where=str(path))
            declare(found[name])
        except DeclarationError as exc:
            message = str(exc)
            raise CampaignError(
                message if message.startswith(str(path)) else f"{path}: {message}"
            ) from None
    return found


def validate(path: Path, notebook: str, declared: dict[str, NotebookParameter], cell: dict):
    for key, value in cell.items():
        if key not in declared:
            raise CampaignError(
                f"{path}: notebook {notebook} has no parameter {key!r}; "
                f"its parameters are: {', '.join(sorted(declared))}"
            )
        problem = declared[key].check(value)
        if problem:
            raise CampaignError(f"{path}: notebook {notebook}, parameter {key!r}: {problem}")
        if key.endswith("_path") and isinstance(value, str) and value:
            if not Path(value).expanduser().exists():
                raise CampaignError(
                    f"{path}: notebook {notebook}, parameter {key!r}: {value} does not exist"
                )


def check_twin(path: Path, notebook: str, declared: dict, cell: dict) -> None:
    """A JAX cell of a model without a Flax twin is bad input, not a failed cell.

    A notebook with a registry ``model`` and no ``framework`` parameter compares both sides
    (01_validation), so it needs the twin too."""
    if "model" not in declared or declared["model"].choices is not REGISTRY_MODELS:
        return
    values = {k: p.default for k, p in declared.items()} | cell
    if values.get("framework", "jax") != "jax":
        return
    if values.get("mode") in vocab.TORCH_GRAPH_MODES:
        return  # PyTorch's own graph on XLA: no twin needed
    try:
        require_twin(values["model"])
    except ValueError as exc:
        raise CampaignError(f"{path}: notebook {notebook}: {exc}") from None


def check_mode(path: Path, notebook: str, parameters: dict) -> None:
    # e.g. ``framework: jax, mode: compile`` is bad input before anything runs, not a failed cell
    _check_framework_choice(path, notebook, parameters)
    _check_nodes(path, notebook, parameters)
    if notebook not in vocab.NOTEBOOK_MODES or not {"framework", "mode"} <= set(parameters):
        return
    modes, what = vocab.NOTEBOOK_MODES[notebook]
    try:
        mode = vocab.resolve_mode(parameters["framework"], parameters["mode"], modes, what)
    except ValueError as exc:
        raise CampaignError(f"{path}: notebook {notebook}: {exc}") from None
    _check_tuning(path, notebook, parameters, mode)


def _check_tuning(path: Path, notebook: str, parameters: dict, mode: str) -> None:
    """A tuned mode reads its pick from a selection file; XLA option sets are JAX's, and a tuned
    JAX cell takes the set its tuning run chose, never one the campaign names."""
    where = f"{path}: notebook {notebook}"
    if mode in vocab.TUNED_MODES and not parameters.get("tuning_path"):
        raise CampaignError(
            f"{where}: mode {mode} reads its pick from tuning_path, the selection file that "
            "`fwbench best-modes` writes from a tuning run; set it"
        )
    options = parameters.get("xla_options", "default")
    if options != "default" and (
        parameters["framework"] != "jax" or mode not in vocab.XLA_OPTION_MODES
    ):
        raise CampaignError(
            f"{where}: xla_options {options!r} applies to JAX's jit and jit-expert modes only "
            f"(this cell: {parameters['framework']} {mode})"
        )


def _check_nodes(path: Path, notebook: str, parameters: dict) -> None:
    """Workers spread over several nodes only start through ``srun`` inside one allocation."""
    nodes = parameters.get("nodes", 1)
    if not isinstance(nodes, int) or nodes < 1:
        raise CampaignError(f"{path}: notebook {notebook}: nodes must be a positive whole number")
    if nodes > 1 and parameters.get("launcher", "srun") != "srun":
        raise CampaignError(
            f"{path}: notebook {notebook}: nodes {nodes} needs launcher: srun (and "
            "fwbench run --executor slurm), which starts the workers across the allocation"
        )


def _check_framework_choice(path: Path, notebook: str, parameters: dict) -> None:
    """A value the cell's framework lacks (``framework: torch, strategy: dp``) is bad input."""
    if notebook not in vocab.NOTEBOOK_FRAMEWORK_CHOICES or "framework" not in parameters:
        return
    key, choices = vocab.NOTEBOOK_FRAMEWORK_CHOICES[notebook]
    allowed = choices.get(parameters["framework"], ())
    if key in parameters and parameters[key] not in allowed:
        raise CampaignError(
            f"{path}: notebook {notebook}: {key} {parameters[key]!r} is not a "
            f"{parameters['framework']} {key}; choose from {allowed}"
        )
    # tensor parallelism splits Linear layers: the transformers' MLPs, not a CNN's convolutions
    if parameters.get(key) == "tp" and "model" in parameters:
        if get_spec(parameters["model"]).kind != "transformer":
            raise CampaignError(
                f"{path}: notebook {notebook}: strategy 'tp' splits a transformer's Linear "
                f"layers; {parameters['model']} is a CNN (use vit_b_16)"
            )
