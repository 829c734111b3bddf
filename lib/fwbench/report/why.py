"""Why one framework is faster: the per-op breakdowns of both sides subtracted, like for like, in
parts that add up to the whole gap.

The breakdowns are 10_inference's ``profile`` records (metric ``op_time_ms``, ms per call, one per
category and one for the framework overhead, each with the profiled wall time per call; see
``families/inference/profiling``), averaged over trials. A gap is the slower side's profiled wall
time per call minus the faster side's, and its parts are:

- each op category's difference, where categories that either side ran fused in one kernel are one
  block on both sides (XLA's ResNet-50 runs convolutions with their BatchNorm, ReLU and pooling as
  one kernel; PyTorch runs them as separate ops, which join the block);
- the time outside every profiled op (framework overhead, and an eager profiler's own cost);
- on a side whose ops ran on several threads at once, the op time the wall clock counted once.

The three kinds add up to the gap exactly: a side's wall time is its op time, plus the time
outside every op, minus the op time that overlapped.
"""

from __future__ import annotations

import json

import pandas as pd

from fwbench.report import tables
from fwbench.report.tables import CONFIG, SERIES, series_rows
from fwbench.vocab import (
    OP_CATEGORIES,
    OVERHEAD,
    and_list,
    framework_label,
    model_label,
    setting_words,
)

METRIC = "op_time_ms"
# A why-sentence leads with the parts that hold this share of the gap's positive parts.
_EXPLAINED_SHARE = 0.80
_ORDER = (*OP_CATEGORIES, OVERHEAD)
# How a profile names a fusion of ops of several categories; families/inference/op_categories
# writes it (the report may not import families; tests/test_why_parts.py holds the two equal).
FUSED_JOIN = " + "
# What XLA builds a fusion around, and what it fuses after one. A JAX profile that does not name
# its fusions' categories (one recorded before they were named) may hold any of the second in any
# of the first, so for it they are one block.
ANCHORS = ("convolution", "depthwise/grouped convolution", "matmul/linear")
_EPILOGUES = ("normalisation", "elementwise/activation", "pooling/reduction")
# The residual parts' names in the gaps table and the sentences
OUTSIDE = "unattributed (time outside the profiled ops)"
OVERLAP = "ops overlapping on several threads"
# A part smaller than this (ms) rounds to nothing in a sentence and is left out of it.
SHOWN_MS = 0.005
# A campaign that times without profiling (a profile in every round would cost every run) takes
# its per-op profiles from a companion campaign of its name and this suffix, run once.
_WHY_SUFFIX = "_why"


def fused_parts(category: str) -> tuple[str, ...]:
    """The categories one profile category holds: "convolution + normalisation" holds two."""
    return tuple(category.split(FUSED_JOIN))


def category_order(categories) -> list[str]:
    """The vocabulary's order, a fused category after the one it goes to first, the overhead
    last (the order the charts stack them in)."""
    rank = {c: i for i, c in enumerate(_ORDER)}

    def order(category: str):
        parts = fused_parts(category)
        return rank.get(parts[0], len(rank)), len(parts), category

    return sorted(set(categories), key=order)


def breakdown(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration, framework variant and category: ms per call, the category's
    share of that side's summed profiled time, the side's profiled wall time per call, and
    whether it is a JAX profile that does not name what its fusions hold.

    Every number is the mean over trials (a category a trial did not record counts as 0 there):
    unlike a median, a mean of sums is the sum of the means, so the parts of a gap still add up.
    """
    columns = [*CONFIG, *SERIES, "category", "ms", "share", "wall_ms", "fusions_unnamed"]
    rows = meas[(meas.family == "profile") & (meas.metric == METRIC) & (meas.status == "ok")]
    rows = rows[rows.value.notna()]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    side = [*CONFIG, *SERIES]
    trial = rows["trial"].fillna(0) if "trial" in rows else 0
    rows = rows.assign(
        category=[e.get("category") for e in rows.extra],
        wall=[e.get("wall_ms") for e in rows.extra],
        named=[bool(e.get("fusions_recorded")) for e in rows.extra],
        _trial=trial,
    )
    rows["wall"] = pd.to_numeric(rows.wall)
    trials = rows.groupby(side, dropna=False)._trial.transform("nunique")
    rows["_per_trial"] = rows.value / trials
    table = (
        rows.groupby([*side, "category"], dropna=False)._per_trial.sum().rename("ms").reset_index()
    )
    # records made before the wall time was kept: the summed rows are the whole call
    per_trial = rows.groupby([*side, "_trial"], dropna=False).agg(
        wall=("wall", "first"), summed=("value", "sum")
    )
    walls = per_trial.wall.fillna(per_trial.summed).groupby(side, dropna=False).mean()
    table = table.merge(walls.rename("wall_ms").reset_index(), on=side, how="left")
    table["share"] = table.ms / table.groupby(side, dropna=False).ms.transform("sum")
    fused = rows.category.str.contains(FUSED_JOIN, regex=False) | rows.named
    named = fused.groupby([rows[c] for c in side], dropna=False).any().rename("_named")
    table = table.merge(named.reset_index(), on=side, how="left")
    table["fusions_unnamed"] = (table.framework == "jax") & ~table._named.fillna(False).astype(bool)
    rank = {c: i for i, c in enumerate(category_order(table.category))}
    table = table.assign(_order=table.category.map(rank)).sort_values([*side, "_order"])
    return table.reset_index(drop=True)[columns]


def companion_why(con, campaign: str, environment: dict) -> tuple:
    """The run id, ``profile`` records and cells of the latest run of ``<campaign>_why`` made on
    this run's CPU model (``tables.cpu_identity``); ("", empty, empty) where there is none, or
    where this run did not record its CPU (then no run is known to share it)."""
    identity = tables.cpu_identity(environment)
    name = campaign + _WHY_SUFFIX
    if identity is None or campaign.endswith(_WHY_SUFFIX):
        return "", pd.DataFrame(), pd.DataFrame()
    rows = con.execute(
        "select run_id, environment from runs where campaign = ? order by run_id", [name]
    ).fetchall()
    same = [rid for rid, env in rows if tables.cpu_identity(json.loads(env)) == identity]
    if not same:
        return "", pd.DataFrame(), pd.DataFrame()
    meas = tables.load_measurements(con, name, same[-1])
    profiles = meas[meas.family == "profile"].reset_index(drop=True)
    return same[-1], profiles, tables.load_cells(con, name, same[-1])


def with_borrowed(own: pd.DataFrame, borrowed: pd.DataFrame) -> pd.DataFrame:
    """``own`` profile records, and ``borrowed`` ones for the sides (configuration and framework
    variant) ``own`` did not profile: a side's profile never mixes two runs."""
    if borrowed.empty:
        return own
    side = [*CONFIG, *SERIES]
    mine = own[side].drop_duplicates().assign(_own=True)
    keyed = borrowed.merge(mine, on=side, how="left")
    return pd.concat([own, borrowed[keyed._own.isna().to_numpy()]], ignore_index=True)


def borrowed_sentence(campaign: str, why_run_id: str, sides: int) -> str:
    """Where the per-op profiles of the sides a run did not profile itself come from."""
    return (
        f"The per-op profiles of {sides} side{'' if sides == 1 else 's'} (a configuration and "
        f"framework variant this run timed without profiling) come from run {why_run_id} of the "
        f"companion campaign `{campaign}{_WHY_SUFFIX}` on the same CPU model: one profiled cell "
        "per side, not the timed rounds, so a gap's parts explain the verdict's ratio without "
        "being its rounds."
    )


def _blocks(categories, assume_fused: bool) -> dict[str, tuple[str, ...]]:
    """Each profile category -> the block of plain categories it is compared in: the categories
    a fused category holds are one block, and so, where ``assume_fused``, are every anchor and
    epilogue present (see ``ANCHORS``)."""
    plain = {p for c in categories for p in fused_parts(c)}
    groups = [set(fused_parts(c)) for c in categories]
    present = plain & {*ANCHORS, *_EPILOGUES}
    if assume_fused and present & set(ANCHORS):
        groups.append(present)
    merged: list[set] = []
    for group in groups:
        touching = [m for m in merged if m & group]
        for m in touching:
            merged.remove(m)
            group = group | m
        merged.append(group)
    rank = {c: i for i, c in enumerate(_ORDER)}
    block = {p: tuple(sorted(m, key=lambda c: rank.get(c, len(rank)))) for m in merged for p in m}
    return {c: block[fused_parts(c)[0]] for c in categories}


def block_label(block: tuple[str, ...]) -> str:
    """A block's name: "convolution with its fused normalisation and elementwise/activation"."""
    if len(block) == 1:
        return block[0]
    head = [c for c in block if c in ANCHORS] or [block[0]]
    rest = [c for c in block if c not in head]
    its = "its" if len(head) == 1 else "their"
    return f"{and_list(head)} with {its} fused {and_list(rest)}"


def parts(slow: pd.DataFrame, fast: pd.DataFrame) -> list[dict]:
    """One comparison's gap in parts (``breakdown`` rows of the slower and the faster side): each
    block of op categories, the time outside every op, and the overlap where there is one. The
    parts' ``slower_ms`` add up to the slower side's wall time, ``faster_ms`` to the faster's."""
    sides = {"slower": slow.set_index("category").ms, "faster": fast.set_index("category").ms}
    walls = {"slower": float(slow.wall_ms.iloc[0]), "faster": float(fast.wall_ms.iloc[0])}
    categories = category_order((set(slow.category) | set(fast.category)) - {OVERHEAD})
    assume = bool(slow.fusions_unnamed.any() or fast.fusions_unnamed.any())
    blocks = _blocks(categories, assume)
    named_only = _blocks(categories, False)
    found = []
    for block in dict.fromkeys(blocks[c] for c in categories):
        members = [c for c in categories if blocks[c] == block]
        # merged on the assumption, where no recorded fusion joins these categories
        assumed = any(named_only[c] != block for c in members)
        found.append(
            {
                "category": block_label(block),
                "kind": "ops",
                "merged": "; ".join(members) if len(block) > 1 else "",
                "assumed": assumed,
                "as_recorded": _as_recorded(members, sides) if assumed else "",
                **{
                    f"{s}_ms": float(v.reindex(members).fillna(0.0).sum()) for s, v in sides.items()
                },
            }
        )
    outside = {s: float(v.get(OVERHEAD, 0.0)) for s, v in sides.items()}
    found.append(_residual(OUTSIDE, outside))
    # the wall time minus every recorded row: minus the op time that ran on several threads at
    # once (XLA's thread pool), which the rows count once per thread
    overlap = {s: walls[s] - float(sides[s].sum()) for s in sides}
    if any(abs(v) > 1e-9 * max(walls.values()) for v in overlap.values()):
        found.append(_residual(OVERLAP, overlap))
    for part in found:
        part["gap_ms"] = part["slower_ms"] - part["faster_ms"]
    return found


def _as_recorded(members: list[str], sides: dict) -> str:
    """An assumed block's difference category by category, as each side recorded it: not like
    for like (fused time may hide in either side's convolution), but what the profiles say."""
    slower, faster = (sides[s].reindex(members).fillna(0.0) for s in ("slower", "faster"))
    gap = (slower - faster)[lambda g: g.abs() >= SHOWN_MS].sort_values(ascending=False)
    return ", ".join(f"{c} {ms:+.2f} ms" for c, ms in gap.items())


def _residual(name: str, ms: dict) -> dict:
    return {
        "category": name,
        "kind": "residual",
        "merged": "",
        "assumed": False,
        "as_recorded": "",
        **{f"{s}_ms": v for s, v in ms.items()},
    }


GAP_COLUMNS = [*CONFIG, "comparison", "slower", "slower_variant", "faster", "faster_variant"]
GAP_COLUMNS += ["category", "kind", "merged", "assumed", "as_recorded"]
GAP_COLUMNS += ["slower_ms", "faster_ms", "gap_ms"]


def gaps(matrix: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """For every JAX-vs-PyTorch comparison of ``matrix`` with a measured gap whose two sides were
    profiled: its ``parts`` (see ``pair_gaps``)."""
    if matrix.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    pairs = matrix.assign(
        a_framework="torch",
        a_variant=matrix.torch_variant,
        b_framework="jax",
        b_variant=matrix.jax_variant,
    )
    return pair_gaps(pairs, table)


def pair_gaps(pairs: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """For every pair of arms with a measured gap whose two sides were profiled: its ``parts``,
    each with the slower side's ms per call, the faster side's, and the difference. A pair's
    ``gap_ms`` add up to the difference of the two sides' profiled wall times.

    ``pairs`` holds ``CONFIG``, ``comparison``, the arms ``a_framework``/``a_variant`` and
    ``b_framework``/``b_variant``, ``ratio`` (b's throughput ÷ a's) and ``winner``; a pair whose
    ratio calls no winner within one run still has parts to show."""
    if pairs.empty or table.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    rows = []
    seen = set()
    shown = pairs.winner.isin(["jax", "torch", "a", "b", "within one run"])
    for r in pairs[shown].itertuples():
        key = {c: getattr(r, c) for c in CONFIG}
        a, b = (r.a_framework, r.a_variant), (r.b_framework, r.b_variant)
        faster, slower = (b, a) if r.ratio > 1 else (a, b)
        ident = (*key.values(), a, b)
        if ident in seen:  # "best" and "defaults" are one comparison when the variants agree
            continue
        seen.add(ident)
        slow = series_rows(table, key, *slower)
        fast = series_rows(table, key, *faster)
        if slow.empty or fast.empty:
            continue
        which = {
            **key,
            "comparison": r.comparison,
            "slower": slower[0],
            "slower_variant": slower[1],
            "faster": faster[0],
            "faster_variant": faster[1],
        }
        rows += [{**which, **part} for part in parts(slow, fast)]
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def explaining(gap: pd.DataFrame, share: float = _EXPLAINED_SHARE) -> pd.DataFrame:
    """The parts, largest first, that add up to ``share`` of one comparison's positive parts
    (where the slower side also spends less somewhere, the positive parts exceed the gap)."""
    positive = gap[gap.gap_ms > 0].sort_values("gap_ms", ascending=False)
    total = positive.gap_ms.sum()
    if total <= 0:
        return positive.iloc[0:0]
    reached = positive.gap_ms.cumsum().shift(fill_value=0.0) < share * total
    return positive[reached]


def _why_sentence(gap: pd.DataFrame) -> str:
    """One comparison's gap as a sentence, every part with its sign, e.g. "JAX jit on ResNet-50 at
    batch 1 in fp32 with 2 threads is 26.46 ms per profiled call slower than PyTorch eager (89.72
    against 63.25 ms): convolution with its fused normalisation +30.39 ms, …, unattributed (time
    outside the profiled ops) -2.20 ms."."""
    first = gap.iloc[0]
    total = float(gap.gap_ms.sum())
    slow_ms, fast_ms = float(gap.slower_ms.sum()), float(gap.faster_ms.sum())
    who = f"{framework_label(first.slower)} {first.slower_variant}"
    against = f"{framework_label(first.faster)} {first.faster_variant}"
    setting = setting_words(first.precision, first.threads)
    where = f"{model_label(first.model)} at batch {int(first.batch_size)} in {setting}"
    named = explaining(gap)
    if named.empty or total <= 0:
        return (
            f"On {where}, {who} is slower than {against} in the timed runs, but its profiled "
            f"calls are not ({slow_ms:.2f} against {fast_ms:.2f} ms per call): the profile "
            "cannot explain this gap."
        )
    rest = gap.drop(index=named.index).sort_values("gap_ms", ascending=False)
    shown = pd.concat([named, rest])
    shown = shown[shown.gap_ms.abs() >= SHOWN_MS]
    listed = ", ".join(_part_words(p) for p in shown.itertuples())
    text = (
        f"{who} on {where} is {total:.2f} ms per profiled call slower than {against} "
        f"({slow_ms:.2f} against {fast_ms:.2f} ms): {listed}"
    )
    if named.iloc[0].category == OUTSIDE:
        text += (
            "; most of the gap lies outside every profiled op (framework overhead, and an eager "
            "framework's profiler cost per op), which the profile cannot attribute to an op"
        )
    return text + "."


def _part_words(p) -> str:
    words = f"{p.category} {p.gap_ms:+.2f} ms"
    if p.assumed and p.as_recorded:
        words += (
            " (one block on both sides, since the JAX profile does not name what XLA fused into "
            f"its convolutions and matmuls; as each side recorded it: {p.as_recorded})"
        )
    return words


def why_sentences(all_gaps: pd.DataFrame) -> list[str]:
    if all_gaps.empty:
        return []
    keys = [*CONFIG, "slower_variant", "faster_variant"]
    return [_why_sentence(g) for _, g in all_gaps.groupby(keys, sort=True, dropna=False)]
