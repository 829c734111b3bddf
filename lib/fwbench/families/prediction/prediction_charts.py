"""The prediction notebooks' charts: predicted against measured, on log axes, with the diagonal
where a perfect prediction would lie."""

from __future__ import annotations

import altair as alt
import pandas as pd


def versus_chart(
    points: pd.DataFrame,
    *,
    measured: str,
    predicted: str,
    unit: str,
    color: str,
    shape: str | None = None,
    size: int = 220,
) -> alt.LayerChart:
    """One point per row of ``points``, ``measured`` across and ``predicted`` up (both in
    ``unit``), and the dashed diagonal; facet it by a column of ``points`` to split groups."""
    encoding = {
        "x": alt.X(f"{measured}:Q", title=f"measured {unit}", scale=alt.Scale(type="log")),
        "y": alt.Y(f"{predicted}:Q", title=f"predicted {unit}", scale=alt.Scale(type="log")),
        "color": alt.Color(f"{color}:N"),
        "tooltip": list(points.columns),
    }
    if shape is not None:
        encoding["shape"] = alt.Shape(f"{shape}:N")
    scatter = alt.Chart().mark_point().encode(**encoding).properties(width=size, height=size)
    diagonal = (
        alt.Chart()
        .mark_line(color="gray", strokeDash=[4, 4])
        .encode(x=f"{measured}:Q", y=f"{measured}:Q")
    )
    return alt.layer(scatter, diagonal, data=points)


def efficiency_chart(table: pd.DataFrame) -> alt.FacetChart:
    """Each op category's efficiency (share of its roofline, log axis) per setting, one panel per
    CPU, from ``efficiency.efficiencies``; the bar's tooltip names the rows behind it."""
    bars = table[table.efficiency.notna()].assign(
        setting=lambda t: t.framework + " " + t["mode"] + " · " + t.precision
    )
    return (
        alt.Chart(bars)
        .mark_bar()
        .encode(
            y=alt.Y("category:N", title=None),
            yOffset=alt.YOffset("setting:N"),
            x=alt.X(
                "efficiency:Q", scale=alt.Scale(type="log", domainMax=1), title="share of roofline"
            ),
            color=alt.Color("setting:N"),
            tooltip=["setting", "category", "efficiency", "rows", "models"],
        )
        .facet(row=alt.Row("device_name:N", title=None))
    )
