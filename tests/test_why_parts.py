"""The why-section's breakdowns from profile records: trials averaged so that parts still add up,
and what tells a JAX profile that names its fusions from one recorded before they were named."""

from __future__ import annotations

import pandas as pd
import pytest

from fwbench.families.inference import op_categories
from fwbench.report import why
from fwbench.vocab import OVERHEAD

CONV, NORM, ELEMENTWISE = "convolution", "normalisation", "elementwise/activation"


def test_the_report_splits_fused_categories_where_the_profiler_joins_them():
    assert why.FUSED_JOIN == op_categories.FUSED_JOIN
    name = op_categories.FUSED_JOIN.join([CONV, NORM])
    assert why.fused_parts(name) == op_categories.fused_parts(name) == (CONV, NORM)


def _records(framework, trial, values, wall, **extra):
    return [
        {
            "family": "profile",
            "metric": "op_time_ms",
            "status": "ok",
            "value": ms,
            "trial": trial,
            "model": "resnet50",
            "device": "cpu",
            "device_name": "Test CPU",
            "precision": "fp32",
            "threads": 2,
            "batch_size": 8,
            "framework": framework,
            "variant": "jit" if framework == "jax" else "eager",
            "extra": {"category": category, "wall_ms": wall, **extra},
        }
        for category, ms in values.items()
    ]


def test_trials_are_averaged_so_that_a_sides_parts_still_add_up_to_its_wall_time():
    # the second trial recorded no normalisation at all: it counts as 0 there
    meas = pd.DataFrame(
        _records("torch", 1, {CONV: 10.0, NORM: 2.0, OVERHEAD: 1.0}, 13.0)
        + _records("torch", 2, {CONV: 14.0, OVERHEAD: 2.0}, 16.0)
    )
    table = why.breakdown(meas).set_index("category")
    assert table.ms.to_dict() == {CONV: 12.0, NORM: 1.0, OVERHEAD: 1.5}
    assert (table.wall_ms == 14.5).all() and table.ms.sum() == pytest.approx(14.5)
    assert table.share.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "jax_rows, extra, unnamed",
    [
        ({CONV: 10.0, NORM: 3.0}, {}, True),  # recorded before fusions were named
        ({CONV: 10.0, NORM: 3.0}, {"fusions_recorded": True}, False),  # named, none mixed
        ({CONV: 6.0, f"{CONV} + {NORM}": 4.0, NORM: 3.0}, {}, False),
    ],
)
def test_a_jax_profile_names_its_fusions_by_a_fused_category_or_by_saying_so(
    jax_rows, extra, unnamed
):
    meas = pd.DataFrame(
        _records("jax", 0, {**jax_rows, OVERHEAD: 1.0}, 14.0, **extra)
        + _records("torch", 0, {CONV: 12.0, NORM: 2.0, OVERHEAD: 1.0}, 15.0)
    )
    table = why.breakdown(meas)
    sides = table.groupby("framework").fusions_unnamed.all()
    assert sides.to_dict() == {"jax": unnamed, "torch": False}
    assert (table.groupby("framework").ms.sum() == table.groupby("framework").wall_ms.first()).all()
    matrix = pd.DataFrame(
        [
            {
                **{c: meas[c].iloc[0] for c in why.CONFIG},
                "comparison": "best",
                "jax_variant": "jit",
                "torch_variant": "eager",
                "ratio": 15.0 / 14.0,
                "winner": "jax",
            }
        ]
    )
    gaps = why.gaps(matrix, table)
    assert gaps.gap_ms.sum() == pytest.approx(1.0)
    merged = gaps[gaps.kind == "ops"].category.tolist() == [
        "convolution with its fused normalisation"
    ]
    assert merged == (unnamed or len(jax_rows) == 3)
    assert gaps.assumed.any() == unnamed


def test_the_why_panels_fit_their_headers_and_go_by_batch_size():
    from fwbench.report import charts

    records = []
    for batch in (32, 1, 8):
        for framework in ("jax", "torch"):
            rows = _records(framework, 1, {CONV: 5.0, NORM: 1.0}, 7.0)
            records += [{**r, "batch_size": batch} for r in rows]
    table = why.breakdown(pd.DataFrame(records))
    spec = charts.breakdown_chart(table, why.category_order(table.category)).to_dict()
    column = spec["facet"]["column"]
    assert [p.split(charts.PANEL_BREAK)[0] for p in column["sort"]] == ["bs 1", "bs 8", "bs 32"]
    # two bars a panel: the panel is as wide as its header's longest line ("fp32 with 2 threads")
    step = spec["spec"]["width"]["step"]
    longest = max(len(line) for p in column["sort"] for line in p.split(charts.PANEL_BREAK))
    assert 2 * step >= longest * charts.HEADER_CHAR_PX
    assert "split(" in column["header"]["labelExpr"]
