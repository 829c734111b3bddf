"""Why one framework is faster: the per-op breakdowns of both sides subtracted, category by
category, and the categories that make up most of the gap named in a sentence.

The breakdowns are 10_inference's ``profile`` records (metric ``op_time_ms``, ms per call, one per
category and one for the framework overhead; see ``families/inference/profiling``), median over
trials. A gap is the slower side's profiled time per call minus the faster side's.
"""

from __future__ import annotations

import pandas as pd

from fwbench.report.tables import CONFIG, SERIES, series_rows
from fwbench.vocab import OP_CATEGORIES, OVERHEAD, framework_label, model_label, setting_words

METRIC = "op_time_ms"
# A why-sentence names categories until they hold this share of the gap.
EXPLAINED_SHARE = 0.80
ORDER = (*OP_CATEGORIES, OVERHEAD)


def breakdown(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration, framework variant and category: ms per call (median over
    trials), and the category's share of that side's profiled wall time."""
    columns = [*CONFIG, *SERIES, "category", "ms", "share"]
    rows = meas[(meas.family == "profile") & (meas.metric == METRIC) & (meas.status == "ok")]
    rows = rows[rows.value.notna()]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows = rows.assign(category=[e.get("category") for e in rows.extra])
    table = (
        rows.groupby([*CONFIG, *SERIES, "category"], dropna=False)
        .value.median()
        .rename("ms")
        .reset_index()
    )
    wall = table.groupby([*CONFIG, *SERIES], dropna=False).ms.transform("sum")
    table["share"] = table.ms / wall
    order = {c: i for i, c in enumerate(ORDER)}
    table["_order"] = table.category.map(order).fillna(len(order))
    table = table.sort_values([*CONFIG, *SERIES, "_order"]).drop(columns="_order")
    return table.reset_index(drop=True)[columns]


def _side(table: pd.DataFrame, key: dict, framework: str, variant: str) -> pd.Series:
    return series_rows(table, key, framework, variant).set_index("category").ms


def gaps(matrix: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """For every comparison with a winner whose two sides were profiled: per category, the slower
    side's ms per call, the faster side's, and the difference."""
    columns = [*CONFIG, "comparison", "slower", "slower_variant", "faster", "faster_variant"]
    columns += ["category", "slower_ms", "faster_ms", "gap_ms"]
    if matrix.empty or table.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    seen = set()
    for r in matrix[matrix.winner != "tie"].itertuples():
        key = {c: getattr(r, c) for c in CONFIG}
        faster = r.winner
        slower = "torch" if faster == "jax" else "jax"
        variants = {"jax": r.jax_variant, "torch": r.torch_variant}
        ident = (*key.values(), variants["jax"], variants["torch"])
        if ident in seen:  # "best" and "defaults" are one comparison when the variants agree
            continue
        seen.add(ident)
        slow = _side(table, key, slower, variants[slower])
        fast = _side(table, key, faster, variants[faster])
        if slow.empty or fast.empty:
            continue
        for category in ORDER:
            if category not in slow.index and category not in fast.index:
                continue
            s, f = float(slow.get(category, 0.0)), float(fast.get(category, 0.0))
            rows.append(
                {
                    **key,
                    "comparison": r.comparison,
                    "slower": slower,
                    "slower_variant": variants[slower],
                    "faster": faster,
                    "faster_variant": variants[faster],
                    "category": category,
                    "slower_ms": s,
                    "faster_ms": f,
                    "gap_ms": s - f,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def explaining(gap: pd.DataFrame, share: float = EXPLAINED_SHARE) -> pd.DataFrame:
    """The categories, largest first, that add up to ``share`` of one comparison's gap (the sum
    of its positive differences: where the faster side also spends more, it spends less elsewhere)."""
    positive = gap[gap.gap_ms > 0].sort_values("gap_ms", ascending=False)
    total = positive.gap_ms.sum()
    if total <= 0:
        return positive.iloc[0:0]
    reached = positive.gap_ms.cumsum().shift(fill_value=0.0) < share * total
    return positive[reached]


def why_sentence(gap: pd.DataFrame) -> str:
    """One comparison's gap as a sentence, e.g. "JAX's EfficientNet-B0 at batch 8 spends 7.1 of
    its 9.0 extra ms per call in depthwise/grouped convolution."."""
    first = gap.iloc[0]
    extra = float(gap.slower_ms.sum() - gap.faster_ms.sum())
    who = f"{framework_label(first.slower)} {first.slower_variant}"
    against = f"{framework_label(first.faster)} {first.faster_variant}"
    setting = setting_words(first.precision, first.threads)
    where = f"{model_label(first.model)} at batch {int(first.batch_size)} in {setting}"
    named = explaining(gap)
    if named.empty or extra <= 0:
        return (
            f"On {where}, {who} is slower than {against} in the timed runs, but its profiled "
            "calls are not: the profile cannot explain this gap."
        )
    parts = ", ".join(f"{r.category} ({r.gap_ms:.2f} ms)" for r in named.itertuples())
    explained = float(named.gap_ms.sum())
    if explained <= extra:
        text = (
            f"{who} on {where} spends {explained:.2f} of its {extra:.2f} extra ms per call "
            f"against {against} in {parts}"
        )
    else:
        # the slower side also saves time somewhere: say where, or the numbers do not add up
        saved = gap[gap.gap_ms < 0].sort_values("gap_ms")
        where_more = named.iloc[0].category if len(named) == 1 else parts
        text = (
            f"{who} on {where} is {extra:.2f} ms per call slower than {against}: it spends "
            f"{explained:.2f} ms more in {where_more}, and {-saved.gap_ms.sum():.2f} ms less "
            f"elsewhere (most in {saved.iloc[0].category}, {-saved.iloc[0].gap_ms:.2f} ms)"
        )
    if named.iloc[0].category == OVERHEAD:
        text += (
            "; most of the gap is framework overhead, time outside every op, which the profile "
            "cannot attribute to an op"
        )
    return text + "."


def why_sentences(all_gaps: pd.DataFrame) -> list[str]:
    if all_gaps.empty:
        return []
    keys = [*CONFIG, "slower_variant", "faster_variant"]
    return [why_sentence(g) for _, g in all_gaps.groupby(keys, sort=True, dropna=False)]
