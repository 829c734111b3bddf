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
