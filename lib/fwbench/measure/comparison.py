"""Where a JAX row meets its PyTorch row: the one pairing of records every comparison outside the
verdict matrix uses (the predictor's winner scores, the direct ratio model, the frozen set's
score), and whether a pair's own trials decide it. The verdict matrix pairs arms round by round
(``report.tables``) and words its verdicts with ``verdicts.words``.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from fwbench.measure.stats import paired_ratio_interval

_Select = Callable[[pd.DataFrame], pd.Series]


def pair_rows(
    table: pd.DataFrame, key: list[str], jax: _Select, torch: _Select, keep_missing: bool = False
) -> pd.DataFrame:
    """Each row ``jax`` selects beside the first row ``torch`` selects with the same ``key``
    values: the key's columns, ``jax_index`` and ``torch_index`` (``table``'s index), in key
    order. Keys with no row on one side give no pair; a key with a missing value pairs with
    nothing unless ``keep_missing`` (then missing meets missing, a setting no record has)."""
    columns = [*key, "jax_index", "torch_index"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    left = table.loc[jax(table), key].reset_index(names="jax_index")
    right = table.loc[torch(table), key].reset_index(names="torch_index")
    if not keep_missing:
        left, right = left.dropna(subset=key), right.dropna(subset=key)
    right = right.drop_duplicates(key)
    pairs = left.merge(right, on=key, how="inner", sort=True)
    return pairs[columns].reset_index(drop=True)


def framework_is(framework: str, modes=None) -> _Select:
    """A selector of one framework's rows, in ``modes`` where given."""

    def select(frame: pd.DataFrame) -> pd.Series:
        hit = frame.framework == framework
        return hit & frame["mode"].isin(modes) if modes is not None else hit

    return select


def decided(torch_trials: dict, jax_trials: dict) -> bool:
    """Whether the paired interval of two arms' images/s (trial -> value), over the trials both
    ran (at least two), excludes a ratio of 1."""
    common = sorted(set(torch_trials) & set(jax_trials))
    if len(common) < 2:
        return False
    paired = paired_ratio_interval(
        [torch_trials[k] for k in common], [jax_trials[k] for k in common]
    )
    return bool(paired.low > 1 or paired.high < 1)
