"""The predictor's frozen test set: models drawn before the predictor is changed, predicted and
committed before they are measured, measured once, scored once.

The hold-outs (``predictor.holdout_splits``) are validation: the predictor was designed while
reading them. A test figure needs models nobody looked at, so the set is drawn by a seeded rule
from the models the registry can build and no campaign has measured, lineage by lineage
(``models.lineage``), with lineages the training table lacks:

1. the candidates' lineages in a seeded random order, ``unseen_first`` unseen lineages first;
2. one model of each of those, then models drawn at random from those with a Flax twin until
   the set holds ``min_twins`` (so that it has JAX jit rows, not only torchax);
3. then one model from each lineage in turn that has fewer than the pass's count, drawn at random
   from what is left of it, until ``size`` models are drawn (so at least
   ``min(size, lineages)`` lineages).

The first set was drawn with one unseen lineage and no twin asked for; its record names neither,
and it is drawn again with those values.

The set is a campaign (``params/frozen_test.yaml``, a later one ``params/frozen_test_<name>.yaml``)
whose grid names the models; its draw's inputs sit beside it (``<campaign>.draw.json``) so that
anyone can draw it again and get the same list. Until a set is scored, its models are kept out of
every training table (``dataset``); once scored, its measurements are data like any other, and
the next set is drawn from models still unmeasured.
"""

from __future__ import annotations

import json
from collections import Counter
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
    unseen_first: int = 1  # how many lineages the training table lacks lead the order
    twins: list[str] = ()  # the candidates with a Flax twin
    min_twins: int = 0  # how many of them the set holds at least

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"


def candidates(buildable: list[str], measured: list[str]) -> list[str]:
    """The models a frozen set may hold: those the registry can build that no campaign measured."""
    return sorted(set(buildable) - set(measured))


def draw(
    models: list[str],
    seen: list[str],
    size: int,
    seed: int,
    unseen_first: int = 1,
    twins: list[str] = (),
    min_twins: int = 0,
) -> Draw:
    """Draw ``size`` of ``models`` (``candidates``), spread over lineages, ``unseen_first`` that
    the training table lacks (not in ``seen``) first and at least ``min_twins`` of ``twins``.
    Raises ValueError where too few candidate lineages are unseen, too few candidates have a
    twin, or there are too few candidates."""
    by_model = {m: lineage(m) for m in sorted(set(models))}
    if len(by_model) < size:
        raise ValueError(f"{len(by_model)} candidates for a set of {size}")
    pools: dict[str, list[str]] = {}
    for model, found in by_model.items():
        pools.setdefault(found, []).append(model)
    unseen = sorted(set(pools) - set(seen))
    if not unseen:
        raise ValueError("every candidate lineage is in the training table: none tests transfer")
    if len(unseen) < unseen_first:
        raise ValueError(f"{len(unseen)} candidate lineages are unseen, {unseen_first} asked for")
    with_twin = sorted(set(twins) & set(by_model))
    if len(with_twin) < min_twins:
        raise ValueError(f"{len(with_twin)} candidates have a twin, {min_twins} asked for")
    rng = np.random.default_rng(seed)
    # the first set's order, random call for random call; more unseen lineages follow it
    first = unseen[rng.integers(len(unseen))]
    leading = [first]
    if unseen_first > 1:
        others = [found for found in unseen if found != first]
        leading += [others[i] for i in rng.permutation(len(others))[: unseen_first - 1]]
    rest = [found for found in sorted(pools) if found not in leading]
    order = [*leading, *(rest[i] for i in rng.permutation(len(rest)))]
    # one model of each leading lineage, then the twins still missing, then the lineages in turn
    drawn = [pools[found].pop(int(rng.integers(len(pools[found])))) for found in leading]
    with_twin = [m for m in with_twin if m not in drawn]
    for _ in range(min_twins - sum(m in twins for m in drawn)):
        model = with_twin.pop(int(rng.integers(len(with_twin))))
        pools[by_model[model]].remove(model)
        drawn.append(model)
    if len(drawn) > size:
        raise ValueError(f"{unseen_first} unseen lineages and {min_twins} twins exceed {size}")
    taken = Counter(by_model[m] for m in drawn)
    depth = 0
    while len(drawn) < size:
        depth += 1
        for found in order:
            if pools[found] and taken[found] < depth and len(drawn) < size:
                drawn.append(pools[found].pop(int(rng.integers(len(pools[found])))))
                taken[found] += 1
    return Draw(
        seed, size, by_model, sorted(set(seen)), drawn, unseen_first, sorted(twins), min_twins
    )


def redraw(path: Path) -> Draw:
    """The draw recorded at ``path`` (``frozen_test.draw.json``), made again from its inputs."""
    recorded = json.loads(path.read_text())
    return draw(
        list(recorded["candidates"]),
        recorded["trained_lineages"],
        recorded["size"],
        recorded["seed"],
        recorded.get("unseen_first", 1),
        recorded.get("twins", []),
        recorded.get("min_twins", 0),
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
