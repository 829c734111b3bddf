"""Campaign files: parse, expand grids into cells, and validate every cell before anything runs.

A campaign file (DESIGN.md section 3) lists steps; each step names a notebook, parameters shared by
its cells and a grid whose cartesian product gives one cell each. Every cell's keys and values are
checked against the notebook's ``parameters`` cell here, because papermill only warns on unknown keys.

A step may name an environment variable in ``when_env``: it runs only where that variable is set
and not empty, and its string parameters may use ``${NAME}`` (e.g. a dataset folder that only
some machines have). Parameters named ``*_path`` that are not empty must exist.

``order: interleaved`` (on a step, or at the top level as every step's default) runs the trials of
those steps in rounds: round 1 of every such cell, shuffled with the campaign's ``seed``, then
round 2, and so on (``run_order``). Machine drift (thermal state, other tenants, clock changes)
then falls on every arm of a round alike instead of on whichever step happened to run last, so
cells of different steps (PyTorch and JAX) pair by round.

``order: duet`` (top level only) runs the two trialled steps' cells of the same grid point and
trial at the same time, each pinned to its own core with one thread (Bulej et al., ICPE 2020):
a disturbance then falls on both arms of a comparison at once. It needs exactly two steps with
trials, with the same grid and trial count; other steps run first, one at a time.

``rerun_shared: N`` (top level) runs an interleaved trial again, up to N times, while its
contention reading says the machine was shared (other processes and stolen time above
``fwbench.measure.meters.contention.SHARED_FRACTION``); each discarded attempt's reading is kept
in the manifest and the notebook's metadata. Its default, ``DEFAULT_RERUN_SHARED``, applies to
campaigns with interleaved trials only: a single run of a cell has no round to keep aligned.

``invocations: N`` (top level, default 1) repeats the whole campaign as N runs, one after the
other (``runner.run_series``): rounds nest in runs, and the verdicts' between-run term needs runs.

``aa_copy: true`` on a step runs each of its cells twice, as two cells of the same configuration:
the copy's slug ends in ``__aa_copy=1`` (before any trial) and its notebook gets the parameter
``aa_copy = 1``, which it records in every record's ``extra``. A copy is an arm like any other
(interleaved with the rest, re-run when shared), so an A/A comparison sees exactly the noise a
real comparison sees. The key, the slug, the parameter and the record field share one word.

``models:`` (top level) declares models from outside the library by import path
(``fwbench.models.declared``): each is imported and counted before any step is checked, so a typo
in it is one line and exit status 2, and every cell's kernel gets the declarations in
``FWBENCH_MODELS``. A ``path`` in a declaration is read from the campaign file's folder.
"""

from __future__ import annotations

import collections
import fnmatch
import itertools
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fwbench.models.declared import to_environment
from fwbench.pipeline.cell_checks import (
    CampaignError,
    check_mode,
    check_preload,
    check_twin,
    declare_models,
    validate,
)
from fwbench.pipeline.notebook_params import NotebookParameter, read_parameters
from fwbench.results.layout import AA_COPY, find_repo_root, make_slug

_STEP_KEYS = {
    "notebook",
    "params",
    "grid",
    "trials",
    "retry_env",
    "kernel_env",
    "timeout",
    "when_env",
    "order",
    "aa_copy",
}
_CAMPAIGN_KEYS = {
    "campaign",
    "description",
    "steps",
    "report",
    "order",
    "seed",
    "rerun_shared",
    "invocations",
    "models",
}
# AA_COPY (results.layout) is the parameter and record field that marks an A/A copy; the runner
# owns it, so a campaign never sets it by hand and the slug and the records always agree.
_ORDERS = ("sequential", "interleaved", "duet", "relay")
# a duet or a relay spans steps, so only a campaign has them
_STEP_ORDERS = ("sequential", "interleaved")
_ROUND_ORDERS = ("interleaved", "duet", "relay")  # the orders whose trials run in rounds
# Each re-run costs a whole trial; two bound a burst of stolen time without doubling a campaign.
DEFAULT_RERUN_SHARED = 2
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Cell:
    notebook: str  # notebook name, e.g. "10_inference"
    notebook_path: Path
    slug: str  # "framework=jax__model=resnet50" (+ "__trial=2")
    parameters: dict
    trial: int = 0
    retry_env: dict = field(default_factory=dict)
    kernel_env: dict = field(default_factory=dict)  # the kernel's environment on every attempt
    timeout: float | None = None
    step: int = 0  # 1-based position of the step that made the cell in the campaign file
    interleaved: bool = False  # a trial of a step whose order is interleaved: runs in rounds
    grid_point: tuple = ()  # the cell's grid values, sorted by key: a duet pairs cells by it
    aa_copy: bool = False  # the A/A duplicate of a cell with the same configuration

    @property
    def key(self) -> str:
        return f"{self.notebook}/{self.slug}"


@dataclass
class Campaign:
    name: str
    path: Path
    cells: list[Cell]
    report: bool = False
    raw: dict = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # why steps were left out (``when_env``)
    seed: int = 0  # shuffles the rounds of interleaved trials
    rerun_shared: int = 0  # how often an interleaved trial run on a shared machine is run again
    order: str = "sequential"  # the campaign-level order; "duet" pairs the rounds' cells
    invocations: int = 1  # how many runs one ``fwbench run`` makes, one after the other
    models: dict = field(default_factory=dict)  # name -> Declaration, from ``models:``

    def select(self, pattern: str | None) -> list[Cell]:
        if not pattern:
            return list(self.cells)
        return [
            c
            for c in self.cells
            if fnmatch.fnmatch(c.key, pattern) or fnmatch.fnmatch(c.slug, pattern)
        ]

    def run_order(self, seed: int | None = None) -> RunOrder:
        """The order the runner follows: cells outside the rounds in file order, then the rounds.

        Each round holds every interleaved cell that has that trial, once, in an order drawn from
        ``seed`` (default: the campaign's). It is computed over all the campaign's cells
        (``--only`` then filters it), so a selection never changes the order of the cells it keeps.
        """
        seed = self.seed if seed is None else seed
        before = [c.key for c in self.cells if not c.interleaved]
        trialled = [c for c in self.cells if c.interleaved]
        rng = random.Random(seed)
        rounds = []
        for trial in sorted({c.trial for c in trialled}):
            cells = [c for c in trialled if c.trial == trial]
            if self.order == "duet":
                rounds.append(_duet_round(cells, rng))
                continue
            if self.order == "relay":
                rounds.append(_relay_round(cells, rng))
                continue
            keys = [c.key for c in cells]
            # sorted by a draw of random() per cell rather than random.shuffle: Python promises
            # random()'s sequence for a seed across versions, not shuffle's
            draws = [rng.random() for _ in keys]
            rounds.append([k for _, k in sorted(zip(draws, keys, strict=True))])
        paired = self.order in ("duet", "relay")
        order = "sequential" if not rounds else self.order if paired else "interleaved"
        return RunOrder(order, seed, before, rounds)


def _duet_round(cells: list[Cell], rng: random.Random) -> list[str]:
    """One duet round: the keys in pairs (run together), the pairs in a drawn order and each
    pair's two cells in a drawn order (the first goes to the first core)."""
    steps = sorted({c.step for c in cells})
    by_point = {(c.step, c.grid_point): c.key for c in cells}
    pairs = []
    for point in sorted({c.grid_point for c in cells}):
        pair = [by_point[(step, point)] for step in steps]
        if rng.random() < 0.5:
            pair.reverse()
        pairs.append((rng.random(), pair))
    return [k for _, pair in sorted(pairs) for k in pair]


def _relay_round(cells: list[Cell], rng: random.Random) -> list[str]:
    """One relay round: the cells of each grid point together (they run as one group), the
    groups in a drawn order and each group's cells in a drawn order."""
    groups = []
    for point in sorted({c.grid_point for c in cells}):
        keys = [c.key for c in cells if c.grid_point == point]
        draws = [rng.random() for _ in keys]
        groups.append((rng.random(), [k for _, k in sorted(zip(draws, keys, strict=True))]))
    return [k for _, keys in sorted(groups) for k in keys]


def relay_groups(keys: list[str], point_of: dict) -> list[list[str]]:
    """A relay round's keys cut into its groups: neighbours with the same grid point."""
    groups: list[list[str]] = []
    for key in keys:
        if groups and point_of[groups[-1][0]] == point_of[key]:
            groups[-1].append(key)
        else:
            groups.append([key])
    return groups


@dataclass
class RunOrder:
    """Cell keys in the order they run; kept in the manifest so ``--resume`` never reshuffles."""

    order: str  # "interleaved", "duet" or "relay" when there are rounds, else "sequential"
    seed: int
    before_rounds: list[str]
    rounds: list[list[str]]

    @property
    def keys(self) -> list[str]:
        return self.before_rounds + [k for r in self.rounds for k in r]

    def as_dict(self) -> dict:
        return {
            "order": self.order,
            "seed": self.seed,
            "before_rounds": self.before_rounds,
            "rounds": self.rounds,
        }

    @classmethod
    def from_dict(cls, data: dict) -> RunOrder:
        return cls(data["order"], data["seed"], list(data["before_rounds"]), data["rounds"])


def _resolve_notebook(name: str, campaign_path: Path) -> Path:
    if "/" in name:
        path = (campaign_path.parent / name).resolve()
        if path.suffix == "":
            path = path.with_suffix(".py")
    else:
        path = find_repo_root(campaign_path.parent) / "notebooks" / f"{name}.py"
    if not path.is_file():
        raise CampaignError(f"{campaign_path}: notebook {name!r} not found (looked for {path})")
    return path


def _load_yaml(path: Path) -> dict:
    if not path.is_file():
        raise CampaignError(f"campaign file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CampaignError(f"{path}: malformed YAML: {exc}") from None
    if not isinstance(data, dict):
        raise CampaignError(
            f"{path}: a campaign file must be a mapping with 'campaign' and 'steps'"
        )
    return data


def _check_step(path: Path, i: int, step) -> None:
    where = f"{path}: step {i + 1}"
    if not isinstance(step, dict) or "notebook" not in step:
        raise CampaignError(f"{where}: each step needs a 'notebook' key")
    unknown = set(step) - _STEP_KEYS
    if unknown:
        raise CampaignError(
            f"{where}: unknown step keys {sorted(unknown)}; allowed {sorted(_STEP_KEYS)}"
        )
    for key in ("params", "grid", "retry_env", "kernel_env"):
        if key in step and not isinstance(step[key] or {}, dict):
            raise CampaignError(f"{where}: '{key}' must be a mapping")
    for key, values in (step.get("grid") or {}).items():
        if not isinstance(values, list) or not values:
            raise CampaignError(f"{where}: grid '{key}' must be a non-empty list")
    trials = step.get("trials", 1)
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise CampaignError(f"{where}: 'trials' must be a positive integer")
    if not valid_timeout(step.get("timeout")):
        raise CampaignError(
            f"{where}: 'timeout' must be a positive number of seconds, got {step['timeout']!r}"
        )
    if not isinstance(step.get(AA_COPY, False), bool):
        raise CampaignError(f"{where}: '{AA_COPY}' must be true or false")
    for key in ("params", "grid"):
        if AA_COPY in (step.get(key) or {}):
            raise CampaignError(
                f"{where}: '{AA_COPY}' is not set by hand; give the step '{AA_COPY}: true' and "
                "the runner adds each cell's copy"
            )
    when_env = step.get("when_env")
    if when_env is not None and not (isinstance(when_env, str) and _ENV_NAME_RE.match(when_env)):
        raise CampaignError(f"{where}: 'when_env' must name one environment variable")
    _check_order(where, step, _STEP_ORDERS)
    for key in ("retry_env", "kernel_env"):
        check_preload(where, key, step.get(key) or {})


def _check_order(where: str, data: dict, allowed: tuple = _ORDERS) -> None:
    if "order" in data and data["order"] not in allowed:
        raise CampaignError(f"{where}: 'order' must be one of {', '.join(allowed)}")


def _expand_env(path: Path, i: int, values: dict) -> dict:
    """``${NAME}`` in string values, from the environment; an unset name is an error."""

    def expand(value):
        if not isinstance(value, str):
            return value
        for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", value):
            if not os.environ.get(name):
                raise CampaignError(
                    f"{path}: step {i + 1} uses ${{{name}}} but {name} is not set; "
                    f"set it, or guard the step with 'when_env: {name}'"
                )
            value = value.replace(f"${{{name}}}", os.environ[name])
        return value

    return {
        k: [expand(v) for v in vs] if isinstance(vs, list) else expand(vs)
        for k, vs in values.items()
    }


def _varying_step_params(steps: list[dict]) -> dict[str, set[str]]:
    """Per notebook, the step-level parameters whose values differ between its steps.

    They go into the slug too, so two steps of one notebook never write the same cell name.
    """
    by_notebook: dict[str, list[dict]] = {}
    for step in steps:
        by_notebook.setdefault(step["notebook"], []).append(step.get("params") or {})
    varying = {}
    for name, params_list in by_notebook.items():
        keys = set().union(*params_list)
        varying[name] = {k for k in keys if len({repr(p.get(k)) for p in params_list}) > 1}
    return varying


def load_campaign(path: str | Path) -> Campaign:
    """Parse, expand and validate a campaign file; raise ``CampaignError`` on any bad input."""
    path = Path(path)
    data = _load_yaml(path)
    name, steps, seed, rerun_shared, invocations = _check_top_level(path, data)
    default_order = data.get("order", "sequential")
    for i, step in enumerate(steps):
        _check_step(path, i, step)
    models = declare_models(path, data.get("models"))
    models_env = to_environment(models)
    varying = _varying_step_params(steps)

    cells: list[Cell] = []
    skipped: list[str] = []
    declared_cache: dict[Path, dict[str, NotebookParameter]] = {}
    for i, step in enumerate(steps):
        nb_name = str(step["notebook"])
        when_env = step.get("when_env")
        if when_env and not os.environ.get(when_env):
            skipped.append(f"step {i + 1} ({nb_name}): {when_env} is not set")
            continue
        nb_path = _resolve_notebook(nb_name, path)
        if nb_path not in declared_cache:
            try:
                declared_cache[nb_path] = read_parameters(nb_path)
            except ValueError as exc:
                raise CampaignError(str(exc)) from None
        cells += _step_cells(
            path, i, step, nb_path, declared_cache[nb_path], varying[nb_name], default_order,
            models_env,
        )  # fmt: skip
    _check_cells(path, steps, cells, skipped, default_order)
    return Campaign(
        name=name,
        path=path,
        cells=cells,
        report=bool(data.get("report")),
        raw=data,
        skipped=skipped,
        seed=seed,
        rerun_shared=rerun_shared,
        order=default_order,
        invocations=invocations,
        models=models,
    )


def _check_top_level(path: Path, data: dict) -> tuple[str, list, int, int, int]:
    """The campaign's top-level settings, checked: its name, steps, seed, ``rerun_shared`` and
    invocations (the order is checked here and read by the caller)."""
    unknown = set(data) - _CAMPAIGN_KEYS
    if unknown:
        raise CampaignError(f"{path}: unknown top-level keys {sorted(unknown)}")
    name = data.get("campaign")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise CampaignError(f"{path}: 'campaign' must be a name of letters, digits, '_', '.', '-'")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise CampaignError(f"{path}: 'steps' must be a non-empty list")
    _check_order(str(path), data)
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise CampaignError(f"{path}: 'seed' must be a non-negative integer")
    rerun_shared = data.get("rerun_shared", DEFAULT_RERUN_SHARED)
    if not isinstance(rerun_shared, int) or isinstance(rerun_shared, bool) or rerun_shared < 0:
        raise CampaignError(f"{path}: 'rerun_shared' must be a non-negative integer")
    invocations = data.get("invocations", 1)
    if not valid_invocations(invocations):
        raise CampaignError(
            f"{path}: 'invocations' must be a positive integer, got {invocations!r}"
        )
    return name, steps, seed, rerun_shared, invocations


def _step_cells(
    path: Path,
    i: int,
    step: dict,
    nb_path: Path,
    declared: dict[str, NotebookParameter],
    varying: set[str],
    default_order: str,
    models_env: dict[str, str],
) -> list[Cell]:
    """Step ``i``'s cells: its grid expanded, each point checked against the notebook's declared
    parameters, times its trials and A/A copies; ``varying``: the notebook's parameters that
    differ between steps, which go into the slug."""
    nb_name = str(step["notebook"])
    copies = [False, True] if step.get(AA_COPY) else [False]
    if step.get(AA_COPY) and AA_COPY not in declared:
        raise CampaignError(
            f"{path}: step {i + 1}: '{AA_COPY}: true' needs a notebook with an {AA_COPY} "
            f"parameter (0 or 1) that it records; {Path(nb_name).stem} has none"
        )
    params = _expand_env(path, i, dict(step.get("params") or {}))
    grid = _expand_env(path, i, dict(step.get("grid") or {}))
    clash = set(params) & set(grid)
    if clash:
        raise CampaignError(f"{path}: step {i + 1}: {sorted(clash)} both in params and grid")
    trials = step.get("trials", 1)
    interleaved = trials > 1 and step.get("order", default_order) in _ROUND_ORDERS
    keys = sorted(grid)
    slug_keys = keys + sorted(varying - set(keys))
    short_name = Path(nb_name).stem
    defaults = {k: p.default for k, p in declared.items()}
    cells = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        cell_params = {**params, **dict(zip(keys, combo, strict=True))}
        validate(path, short_name, declared, cell_params)
        check_mode(path, short_name, defaults | cell_params)
        check_twin(path, short_name, declared, cell_params)
        for trial, copy in itertools.product(range(1, trials + 1), copies):
            cells.append(
                Cell(
                    notebook=short_name,
                    notebook_path=nb_path,
                    slug=make_slug(defaults | cell_params, slug_keys, trial, trials, aa_copy=copy),
                    # the original keeps the notebook's default (0), so its parameters, and
                    # the estimate's history, are those of the same cell without a copy
                    parameters=cell_params | ({AA_COPY: 1} if copy else {}),
                    trial=trial if trials > 1 else 0,
                    retry_env={k: str(v) for k, v in (step.get("retry_env") or {}).items()},
                    kernel_env={
                        **{k: str(v) for k, v in (step.get("kernel_env") or {}).items()},
                        **models_env,
                    },
                    timeout=step.get("timeout"),
                    step=i + 1,
                    interleaved=interleaved,
                    grid_point=tuple(zip(keys, combo, strict=True)),
                    aa_copy=copy,
                )
            )
    return cells


def _check_cells(
    path: Path, steps: list, cells: list[Cell], skipped: list[str], default_order: str
) -> None:
    """Checks over the whole campaign's cells: no two written as one, at least one cell, and
    what the relay and duet orders need."""
    seen: set[str] = set()
    for cell in cells:
        if cell.key in seen:
            raise CampaignError(f"{path}: two cells would both be written as {cell.key}")
        seen.add(cell.key)
    if not cells:
        raise CampaignError(f"{path}: every step was skipped ({'; '.join(skipped)})")
    if default_order == "relay":
        _check_relay(path, cells)
    if default_order == "duet":
        _check_duet(path, steps, cells)
        if any(c.aa_copy for c in cells):
            raise CampaignError(
                f"{path}: order 'duet' pairs the two steps' cells of one grid point, and an "
                f"{AA_COPY} step has two of them; use order 'interleaved' for A/A copies"
            )


def declared_models(path: str | Path) -> dict:
    """The models the campaign file at ``path`` declares under ``models:`` (name ->
    Declaration), imported, counted and registered in this process, its steps left unchecked:
    what ``fwbench predict`` and ``recommend`` take with ``--campaign``, which run no step. Raises
    ``CampaignError`` with one line on a missing file or a bad declaration."""
    path = Path(path)
    return declare_models(path, _load_yaml(path).get("models"))


def valid_invocations(value) -> bool:
    """Whether ``value`` is a number of runs: a positive integer (YAML's ``true`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def valid_timeout(value) -> bool:
    """Whether ``value`` can bound a notebook's cells: None (no bound) or seconds above zero.
    nbclient would silently take zero or a negative number as no bound at all."""
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _check_relay(path: Path, cells: list[Cell]) -> None:
    trialled = [c for c in cells if c.interleaved]
    if not trialled:
        raise CampaignError(f"{path}: order 'relay' needs steps with trials > 1, found none")
    counts = collections.Counter((c.grid_point, c.trial) for c in trialled)
    alone = sorted(
        {
            " ".join(f"{k}={v}" for k, v in point) or "the cell"
            for (point, _), n in counts.items()
            if n < 2
        }
    )
    if alone:
        raise CampaignError(
            f"{path}: order 'relay' runs the trialled cells of one grid point together; "
            f"{', '.join(alone)} has only one cell a trial (give its steps the same grid)"
        )


def _check_duet(path: Path, steps: list, cells: list[Cell]) -> None:
    trialled = sorted({c.step for c in cells if c.interleaved})
    if len(trialled) != 2:
        raise CampaignError(
            f"{path}: order 'duet' runs two arms side by side: it needs exactly two steps with "
            f"trials > 1, found {len(trialled)}"
        )
    a, b = (steps[i - 1] for i in trialled)
    if a.get("trials") != b.get("trials") or (a.get("grid") or {}) != (b.get("grid") or {}):
        raise CampaignError(
            f"{path}: the two duet steps (steps {trialled[0]} and {trialled[1]}) must have the "
            "same 'trials' and the same 'grid', so that their cells pair one to one"
        )
