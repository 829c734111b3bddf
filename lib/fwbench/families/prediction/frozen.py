"""The predictor's frozen test set: models drawn before the predictor is changed, predicted and
committed before they are measured, measured once, scored once.

The hold-outs (``predictor.holdout_splits``) are validation: the predictor was designed while
reading them. A test figure needs models nobody looked at, so the set is drawn by a seeded rule
from the models the registry can build and no campaign has measured, lineage by lineage
(``models.lineage``), with at least one lineage the training table lacks:

1. the candidates' lineages in a seeded random order, an unseen lineage first;
2. one model from each lineage in turn, drawn at random from what is left of it, until ``size``
   models are drawn (so at least ``min(size, lineages)`` lineages).

The set is a campaign (``params/frozen_test.yaml``, a later one ``params/frozen_test_<name>.yaml``)
whose grid names the models; its draw's inputs sit beside it (``<campaign>.draw.json``) so that
anyone can draw it again and get the same list. Until a set is scored, its models are kept out of
every training table (``dataset``); once scored, its measurements are data like any other, and
the next set is drawn from models still unmeasured.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import yaml

from fwbench.models.lineage import lineage

CAMPAIGN = "frozen_test"


@dataclass(frozen=True)
class Draw:
    """What a draw read and what it drew."""

    seed: int
    size: int
    candidates: dict[str, str]  # model -> lineage: buildable and never measured
    trained_lineages: list[str]  # the lineages the training table held when the set was drawn
    models: list[str]  # the draw, in the order drawn

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def candidates(buildable: list[str], measured: list[str]) -> list[str]:
    """The models a frozen set may hold: those the registry can build that no campaign measured."""
    return sorted(set(buildable) - set(measured))


def draw(models: list[str], seen: list[str], size: int, seed: int) -> Draw:
    """Draw ``size`` of ``models`` (``candidates``), spread over lineages, one the training table
    lacks (not in ``seen``) first. Raises ValueError where every candidate lineage is seen or
    there are too few candidates."""
    by_model = {m: lineage(m) for m in sorted(set(models))}
    if len(by_model) < size:
        raise ValueError(f"{len(by_model)} candidates for a set of {size}")
    pools: dict[str, list[str]] = {}
    for model, found in by_model.items():
        pools.setdefault(found, []).append(model)
    unseen = sorted(set(pools) - set(seen))
    if not unseen:
        raise ValueError("every candidate lineage is in the training table: none tests transfer")
    rng = np.random.default_rng(seed)
    first = unseen[rng.integers(len(unseen))]
    rest = [found for found in sorted(pools) if found != first]
    order = [first, *(rest[i] for i in rng.permutation(len(rest)))]
    drawn: list[str] = []
    while len(drawn) < size:
        for found in order:
            if pools[found] and len(drawn) < size:
                drawn.append(pools[found].pop(int(rng.integers(len(pools[found])))))
    return Draw(seed, size, by_model, sorted(set(seen)), drawn)


def redraw(path: Path) -> Draw:
    """The draw recorded at ``path`` (``frozen_test.draw.json``), made again from its inputs."""
    recorded = json.loads(path.read_text())
    return draw(
        list(recorded["candidates"]),
        recorded["trained_lineages"],
        recorded["size"],
        recorded["seed"],
    )


def campaign_models(path: Path) -> list[str]:
    """The models a campaign file's steps name (its grids' ``model`` and steps' own)."""
    found: list[str] = []
    for step in yaml.safe_load(path.read_text()).get("steps") or []:
        models = (step.get("grid") or {}).get("model") or []
        own = (step.get("params") or {}).get("model")
        for model in [*models, *([own] if own else [])]:
            if model not in found:
                found.append(model)
    return found


def set_files(root: Path) -> list[Path]:
    """Every frozen set's campaign file in the repository's params/, the first set first."""
    found = (root / "params").glob(f"{CAMPAIGN}*.yaml")
    return sorted(found, key=lambda path: (path.stem != CAMPAIGN, path.stem))


def set_label(path: Path) -> str:
    """How records and reports name the set of campaign file ``path``: "frozen set" for the
    first, "frozen set <name>" for ``frozen_test_<name>.yaml``."""
    name = path.stem.removeprefix(CAMPAIGN).strip("_")
    return f"frozen set {name}" if name else "frozen set"


def frozen_models(root: Path) -> set[str]:
    """The models of every frozen set not yet scored, kept out of every training table; empty
    where the repository has none."""
    found: set[str] = set()
    for path in set_files(root):
        if not path.with_suffix(".score.json").is_file():
            found |= set(campaign_models(path))
    return found
