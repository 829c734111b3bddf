"""Whether a GPU lease's commands fit its node time, counted cell by cell before any node is lent.

``--dry-run`` estimates from the index, which holds no GPU history on a fresh checkout and needs
the frameworks installed; a lease is planned before either. A lease is 15 minutes of node time in
all, the machine's start and the kit's install included, and one command on a node runs 10
minutes at most. So a lease's campaigns get ``LEASE_S`` (10 minutes, the kit's install in it) and
no command more than ``COMMAND_S`` (9, leaving time to pack and hand the archive back).

The cost of a cell is what the same notebook and configuration took on an NVIDIA H200 in the
first GPU lease (``H200_CELLS``): each cell's wall-clock ``duration_s`` in its run's manifest
(executed/gpu_lease*/), kernel start-up included, and the ``compile_s`` its records carry. Only
cells measured with the same timing parameters are priced (``MEASURED_WITH``); any other cell
is named as unpriced and the check fails, rather than guess.

Shared compilation caches: a cell whose ``kernel_env`` points JAX at a persistent compilation
cache (a JAX cell) or turns on inductor's FX graph cache (a PyTorch cell) pays its compile once
a lease; every later cell of the same configuration costs its duration less its compile time.
That treats a cache hit as free, which no lease has measured yet: the first lease that runs with
the caches records its warm ``compile_s``, and this table should take them then.

Run it as ``python -m fwbench.pipeline.lease_budget CAMPAIGN[:RUNS] ... [--then CAMPAIGN[:RUNS]
...]``: each ``--then`` starts the lease's next command (a gpu/run.sh call), RUNS is how many runs
of the campaign that command makes (default: its ``invocations``). It reads the campaign files
with PyYAML alone, so the GPU image's Python runs it without the kit.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

LEASE_S = 600.0
COMMAND_S = 540.0
# Each gpu/run.sh call installs the kit offline and imports torch and JAX once before its first
# run. Not timed apart on the H200: the first lease's first call took about 7.5 minutes
# (docs/decisions.md), its two runs 436 s of it by their manifests, which leaves about 15 s; this
# allows twice that.
_KIT_S = 30.0

# (notebook, framework, mode, model, precision) -> (seconds, compile seconds) on the NVIDIA H200:
# manifests' duration_s and records' compile_s of executed/gpu_lease (bf16), gpu_lease_fp32 and
# gpu_lease_more (tf32, and the small models at fp32). 00_setup's duration includes its own
# torch.compile and XLA checks.
H200_CELLS = {
    ("00_setup", "", "", "", ""): (91.5, 0.0),
    ("02_calibrate", "torch", "", "", "bf16"): (18.5, 0.0),
    ("02_calibrate", "jax", "", "", "bf16"): (22.2, 0.0),
    ("10_inference", "torch", "compile", "resnet50", "bf16"): (37.6, 14.1),
    ("10_inference", "jax", "jit", "resnet50", "bf16"): (28.0, 4.0),
    ("10_inference", "torch", "compile", "vit_b_16", "bf16"): (36.5, 12.5),
    ("10_inference", "jax", "jit", "vit_b_16", "bf16"): (35.1, 8.7),
    ("10_inference", "torch", "compile", "resnet50", "fp32"): (45.6, 14.0),
    ("10_inference", "jax", "jit", "resnet50", "fp32"): (31.0, 9.0),
    ("10_inference", "torch", "compile", "vit_b_16", "fp32"): (43.2, 17.5),
    ("10_inference", "jax", "jit", "vit_b_16", "fp32"): (44.1, 17.6),
    ("10_inference", "torch", "compile", "resnet50", "tf32"): (47.9, 15.7),
    ("10_inference", "jax", "jit", "resnet50", "tf32"): (29.0, 5.0),
    ("10_inference", "torch", "compile", "mobilenet_v3_small", "fp32"): (55.9, 25.5),
    ("10_inference", "jax", "jit", "mobilenet_v3_small", "fp32"): (40.1, 14.5),
    ("10_inference", "torch", "compile", "efficientnet_b0", "fp32"): (52.2, 22.5),
}
# The key fields each notebook's cost depends on; the rest of a key is empty.
_KEY_FIELDS = {"00_setup": (), "02_calibrate": ("framework", "precision")}
_ALL_FIELDS = ("framework", "mode", "model", "precision")
# The parameters those cells ran with (every one on device cuda): a cell asking for other sizes or
# longer measurements would take another time.
MEASURED_WITH = {
    "00_setup": {"device": "cuda"},
    "02_calibrate": {
        "device": "cuda",
        "matmul_sizes": [8192],
        "copy_mib": 1024,
        "min_iters": 10,
        "min_seconds": 0.5,
        "timer_check": False,
    },
    "10_inference": {
        "device": "cuda",
        "batch_sizes": [128],
        "min_iters": 20,
        "min_seconds": 1.0,
        "warmup": 5,
        "block_size": 10,
    },
}
# What in a cell's kernel_env shares each framework's compilations across the lease's kernels.
_CACHES = {
    "jax": ("JAX_COMPILATION_CACHE_DIR", None),
    "torch": ("TORCHINDUCTOR_FX_GRAPH_CACHE", "1"),
}


class _BudgetError(ValueError):
    """A campaign file the budget cannot read: one line, like the runner's bad input."""


@dataclass
class _CellCost:
    command: int  # 1-based gpu/run.sh call of the lease
    campaign: str
    run: int  # 1-based run of the campaign within the lease
    cell: str  # notebook/grid values, for the printout
    seconds: float | None  # None: unpriced
    warm: bool = False  # priced with the shared caches already holding its compile


@dataclass
class _LeaseBudget:
    cells: list[_CellCost] = field(default_factory=list)
    commands: int = 0

    def command_seconds(self) -> list[float]:
        """Each command's node time: the kit, then its priced cells."""
        return [
            _KIT_S + sum(c.seconds or 0.0 for c in self.cells if c.command == k)
            for k in range(1, self.commands + 1)
        ]

    @property
    def total_s(self) -> float:
        return sum(self.command_seconds())

    @property
    def unpriced(self) -> list[str]:
        return sorted({f"{c.campaign}: {c.cell}" for c in self.cells if c.seconds is None})

    def problems(self, lease_s: float = LEASE_S, command_s: float = COMMAND_S) -> list[str]:
        """Why the lease does not fit; empty when it does."""
        found = [f"no H200 cost for {name}: measure it on a GPU first" for name in self.unpriced]
        for k, seconds in enumerate(self.command_seconds(), 1):
            if seconds > command_s:
                found.append(f"command {k} takes {seconds:.0f} s, over {command_s:.0f} s")
        if self.total_s > lease_s:
            found.append(f"the lease takes {self.total_s:.0f} s, over {lease_s:.0f} s")
        return found


def _cells(path: Path) -> tuple[str, int, list[tuple[str, dict, dict]]]:
    """(campaign name, invocations, [(notebook, parameters, kernel_env)]) in the file's order, as
    the runner expands them: each grid point, each trial, each A/A copy; a ``when_env`` step only
    where its variable is set."""
    try:
        data = yaml.safe_load(path.read_text())
        steps = data["steps"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise _BudgetError(f"{path}: not a readable campaign file ({exc})") from None
    cells = []
    for step in steps:
        if step.get("when_env") and not os.environ.get(step["when_env"]):
            continue
        grid = step.get("grid") or {}
        copies = 2 if step.get("aa_copy") else 1
        for combo in itertools.product(*grid.values()):
            params = {**(step.get("params") or {}), **dict(zip(grid, combo, strict=True))}
            env = {k: str(v) for k, v in (step.get("kernel_env") or {}).items()}
            notebook = Path(str(step["notebook"])).stem
            cells += [(notebook, params, env)] * (int(step.get("trials", 1)) * copies)
    return str(data.get("campaign", path.stem)), int(data.get("invocations", 1)), cells


def _key(notebook: str, params: dict) -> tuple:
    fields = _KEY_FIELDS.get(notebook, _ALL_FIELDS)
    return (notebook, *(str(params.get(f, "")) if f in fields else "" for f in _ALL_FIELDS))


def _priced(notebook: str, params: dict) -> bool:
    """Whether the cell ran as the H200's cells did: same device, sizes and timing."""
    wanted = MEASURED_WITH.get(notebook)
    return wanted is not None and all(params.get(k) == v for k, v in wanted.items())


def _shares_cache(params: dict, env: dict) -> bool:
    name, value = _CACHES.get(params.get("framework", ""), ("", None))
    return bool(name) and bool(env.get(name)) and (value is None or env[name] == value)


def lease_budget(commands: list[list[tuple[str | Path, int | None]]]) -> _LeaseBudget:
    """The node time of a lease of ``commands``, each a list of (campaign file, runs; None for the
    campaign's ``invocations``), run in that order on one machine."""
    budget = _LeaseBudget(commands=len(commands))
    compiled: set[tuple] = set()  # configurations a cache-sharing cell compiled already
    runs_so_far: dict[str, int] = {}
    for k, command in enumerate(commands, 1):
        for path, runs in command:
            name, invocations, cells = _cells(Path(path))
            for _ in range(invocations if runs is None else runs):
                runs_so_far[name] = run = runs_so_far.get(name, 0) + 1
                for notebook, params, env in cells:
                    key = _key(notebook, params)
                    label = "/".join([notebook, *(v for v in key[1:] if v)])
                    cost = H200_CELLS.get(key) if _priced(notebook, params) else None
                    if cost is None:
                        budget.cells.append(_CellCost(k, name, run, label, None))
                        continue
                    shared = _shares_cache(params, env)
                    warm = shared and key in compiled
                    seconds = cost[0] - cost[1] if warm else cost[0]
                    budget.cells.append(_CellCost(k, name, run, label, seconds, warm))
                    if shared:  # its compile is in the cache for the next cell like it
                        compiled.add(key)
    return budget


def render(budget: _LeaseBudget) -> list[str]:
    """The budget cell by cell (cells of one command, campaign, run and price summed), then each
    command and the lease against their limits."""
    lines = []
    for k, seconds in enumerate(budget.command_seconds(), 1):
        lines.append(f"command {k}: {seconds:.0f} s (limit {COMMAND_S:.0f} s)")
        lines.append(f"  the kit and the frameworks' imports: {_KIT_S:.0f} s")
        mine = [c for c in budget.cells if c.command == k]
        for (name, run, label, warm), group in itertools.groupby(
            mine, key=lambda c: (c.campaign, c.run, c.cell, c.warm)
        ):
            group = list(group)
            each = "unpriced" if group[0].seconds is None else f"{group[0].seconds:.1f} s"
            state = ", caches warm" if warm else ""
            lines.append(f"  {name} run {run}: {len(group)} × {label} at {each}{state}")
    lines.append(f"lease: {budget.total_s:.0f} s (limit {LEASE_S:.0f} s)")
    return lines


def _parse_commands(argv: list[str]) -> list[list[tuple[str, int | None]]]:
    """``a.yaml b.yaml:2 --then b.yaml:1`` as [[(a, None), (b, 2)], [(b, 1)]]."""
    commands: list[list[tuple[str, int | None]]] = [[]]
    for arg in argv:
        if arg == "--then":
            commands.append([])
            continue
        path, _, runs = arg.partition(":")
        if runs and not runs.isdigit():
            raise _BudgetError(f"{arg}: runs after ':' must be a whole number")
        commands[-1].append((path, int(runs) if runs else None))
    if not all(commands):
        raise _BudgetError("every command needs a campaign file")
    return commands


def main(argv: list[str] | None = None) -> int:
    """Print the lease's budget; 0 when it fits, 1 when it does not, 2 on bad input."""
    try:
        budget = lease_budget(_parse_commands(sys.argv[1:] if argv is None else argv))
    except _BudgetError as exc:
        print(f"lease_budget: {exc}", file=sys.stderr)
        return 2
    print("\n".join(render(budget)))
    problems = budget.problems()
    for problem in problems:
        print(f"does not fit: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
