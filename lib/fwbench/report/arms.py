"""A framework's arms in a configuration: what a record's variant is, and which arm a comparison
takes for each framework.

A variant is a mode with what sets it apart (PyTorch's channels_last, JAX's XLA option set, an A/A
copy). A ``defaults`` comparison takes each framework's default mode; a ``best`` comparison takes
its tuned arm (a mode a tuning run picked before the run, ``vocab.TUNED_MODES``), else its only
arm, else the fastest of its arms here, which ``picked_on_rounds`` then reports so that no verdict
is called on it (DESIGN.md section 5, tuning apart from verdicts). PyTorch's graph through torchax
is never JAX's side.
"""

from __future__ import annotations

import pandas as pd

from fwbench.measure import verdicts
from fwbench.vocab import DEFAULT_MODE, TORCH_GRAPH_MODES, TUNED_MODES

# An A/A duplicate arm: the same configuration as a second cell (records with extra.aa_copy).
COPY_SUFFIX = "#copy"


def variant(framework: str, mode: str, extra: dict) -> str:
    """A record's arm name: its mode, with channels_last, a graph for any batch size, a non-default
    XLA option set or an A/A copy's suffix where it has one ("compile+channels_last",
    "compile+dynamic", "jit+ynn-off", "jit#copy")."""
    name = mode
    if framework == "torch" and extra.get("channels_last"):
        name = f"{name}+channels_last"
    if framework == "torch" and extra.get("dynamic_shapes"):
        name = f"{name}+dynamic"
    # a declared XLA option set other than the default is an arm of its own (a tuning run's)
    if framework == "jax" and extra.get("xla_options") not in (None, "", "default"):
        name = f"{mode}+{extra['xla_options']}"
    # an A/A copy is its own arm, never pooled with the original it duplicates
    if extra.get("aa_copy"):
        name = f"{name}{COPY_SUFFIX}"
    return name


def _candidate_arms(group: pd.DataFrame, framework: str) -> pd.DataFrame:
    side = group[(group.framework == framework) & ~group.variant.str.endswith(COPY_SUFFIX)]
    return side[~side.variant.isin(TORCH_GRAPH_MODES)]


def pick_arm(group: pd.DataFrame, framework: str, comparison: str):
    """A framework's arm in a configuration: its default mode (``defaults``), or for ``best``
    the arm chosen before the run (a tuned mode, whose pick a tuning run made), else its only
    arm, else the fastest of its arms here, which ``picked_on_rounds`` then reports."""
    side = _candidate_arms(group, framework)
    if comparison == "defaults":
        side = side[side.variant == DEFAULT_MODE[framework]]
    elif side.variant.isin(TUNED_MODES).any():
        side = side[side.variant.isin(TUNED_MODES)]
    if side.empty:
        return None
    return side.sort_values(["median", "variant"], ascending=[False, True]).iloc[0]


def picked_on_rounds(group: pd.DataFrame, framework: str, comparison: str) -> bool:
    """Whether ``pick_arm`` chose this framework's ``best`` arm among several modes by their
    throughput in the rounds being judged: then its comparison calls no verdict (DESIGN.md
    section 5, tuning apart from verdicts)."""
    if comparison != "best":
        return False
    side = _candidate_arms(group, framework)
    return side.variant.nunique() > 1 and not side.variant.isin(TUNED_MODES).any()


def withheld(verdict: str, picked: bool) -> str:
    """``verdict``, or for a comparison whose arm was ``picked_on_rounds`` the word that calls no
    winner; a ratio within one run calls none already and keeps its own word."""
    if picked and verdict != verdicts.WITHIN_ONE_RUN:
        return verdicts.PICKED_ON_ROUNDS
    return verdict
