"""The project's one Altair theme, figure saving, and the charts of the analysis.

Charts receive data already aggregated in pandas (one row per mark), so a figure's HTML carries only
what it shows and its tooltips give the exact plotted values. Every saved figure holds its caption
as the subtitle, so a PNG seen alone still says what was measured, where and how.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from fwbench.vocab import (
    framework_label,
    kind_label,
    model_label,
    series_label,
    setting_words,
    threads_words,
)

_THEME = "fwbench"
_PNG_SCALE = 2  # 2x pixels so text stays legible when the PNG is scaled into a page
_CAPTION_WIDTH = 110
_PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d", "#bab0ac"]


@alt.theme.register(_THEME, enable=True)
def _fwbench_theme() -> alt.theme.ThemeConfig:
    return {
        "config": {
            "font": "DejaVu Sans, Liberation Sans, Arial, sans-serif",
            "background": "white",
            "view": {"continuousWidth": 260, "continuousHeight": 190, "stroke": "#dddddd"},
            "axis": {
                "labelFontSize": 12,
                "titleFontSize": 13,
                "gridColor": "#ececec",
                "labelLimit": 260,
            },
            "legend": {"labelFontSize": 12, "titleFontSize": 13, "labelLimit": 320},
            "header": {"labelFontSize": 13, "titleFontSize": 13, "labelLimit": 400},
            "title": {
                "fontSize": 16,
                "subtitleFontSize": 12,
                "anchor": "start",
                "subtitleColor": "#444444",
                "offset": 12,
            },
            "range": {"category": _PALETTE},
            "point": {"size": 60, "filled": True},
            "line": {"strokeWidth": 2},
        }
    }


def use_theme() -> None:
    alt.theme.enable(_THEME)


# Every figure as SVG (what a report embeds), HTML (interactive, with tooltips) and PNG (scaled),
# except in a published report: the committed evidence keeps SVG alone, and `fwbench report`
# without --publish makes all three in local/ whenever someone wants the others.
FIGURE_FORMATS = ("svg", "html", "png")
PUBLISHED_FORMATS = ("svg",)


def save(
    chart: alt.TopLevelMixin,
    directory: Path,
    name: str,
    title: str,
    caption: str,
    formats: tuple[str, ...] = FIGURE_FORMATS,
) -> dict:
    """Write ``name`` in each of ``formats``: .svg, .html (interactive), .png (scaled)."""
    use_theme()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    titled = chart.properties(
        title=alt.TitleParams(title, subtitle=textwrap.wrap(caption, _CAPTION_WIDTH))
    )
    paths = {}
    for fmt in formats:
        path = directory / f"{name}.{fmt}"
        options = {"scale_factor": _PNG_SCALE} if fmt == "png" else {}
        titled.save(str(path), format=fmt, **options)
        paths[fmt] = path
    return paths


# --------------------------------------------------------------------------- shaping helpers


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the display columns every chart uses: model, series and panel (device · precision, and
    a CPU configuration's threads)."""
    out = frame.copy()
    out["model_label"] = out.model.map(model_label)
    if "framework" in out and "variant" in out:
        out["series"] = [
            series_label(f, v) for f, v in zip(out.framework, out.variant, strict=True)
        ]
    threads = out["threads"] if "threads" in out else pd.Series(0, index=out.index)
    out["panel"] = [
        " · ".join(p for p in (str(d), str(prec), threads_words(t)) if p)
        for d, prec, t in zip(out.device_name, out.precision, threads, strict=True)
    ]
    return out


def _tooltip(frame: pd.DataFrame, columns: list[str]) -> list:
    tips = []
    for col in columns:
        if col not in frame:
            continue
        if pd.api.types.is_float_dtype(frame[col]):
            tips.append(alt.Tooltip(f"{col}:Q", format=".4~g"))
        else:
            tips.append(alt.Tooltip(col))
    return tips


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """JSON-friendly copy: no list columns, nullable ints as floats, infinities as missing."""
    # the per-trial lists of ``tables.throughput_samples``: a chart shows their summaries
    lists = ("samples", "trials", "shared", "reruns")
    out = frame.drop(columns=[c for c in lists if c in frame]).copy()
    for col in out.columns:
        if str(out[col].dtype) == "Int64":
            out[col] = out[col].astype(float)
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].replace([np.inf, -np.inf], np.nan)
    return out


# --------------------------------------------------------------------------- charts


def ratio_heatmap(matrix: pd.DataFrame) -> alt.FacetChart:
    data = _plain(labelled(matrix))
    marks = {"equivalent": "≈", "inconclusive": "?", "within one run": "(1 run)"}
    data["label"] = [
        f"{r:.2f}× {marks[w]}" if w in marks else f"{r:.2f}×"
        for w, r in zip(data.winner, data.ratio, strict=True)
    ]
    data["log2_ratio"] = np.log2(data.ratio)
    extent = max(1.0, float(np.nanmax(np.abs(data.log2_ratio)))) if len(data) else 1.0
    tips = _tooltip(
        data,
        [
            "model_label",
            "batch_size",
            "comparison",
            "jax_variant",
            "torch_variant",
            "jax_img_s",
            "torch_img_s",
            "ratio",
            "ci_low",
            "ci_high",
            "winner",
        ],
    )
    base = alt.Chart().encode(
        x=alt.X("batch_size:O", title="batch size", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("model_label:N", title=None),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "log2_ratio:Q",
            title="log₂(JAX ÷ PyTorch)",
            scale=alt.Scale(scheme="blueorange", domain=[-extent, extent]),
        ),
        tooltip=tips,
    )
    text = base.mark_text(fontSize=12).encode(text="label:N", tooltip=tips)
    # a cell holds "0.21× (1 run)"; a row's setting names the CPU, precision and threads, too long
    # to stand rotated beside its row, so it reads as a heading above it
    row_header = alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start", labelFontSize=13)
    return (
        alt.layer(cells, text, data=data)
        .properties(width=alt.Step(108), height=alt.Step(32))
        .facet(
            column=alt.Column("comparison:N", title=None),
            row=alt.Row("panel:N", title=None, header=row_header),
        )
    )


def by_batch(
    frame: pd.DataFrame,
    y: str,
    y_title: str,
    *,
    log_y: bool = True,
    ci: tuple[str, str] | None = None,
) -> alt.FacetChart:
    """A metric against batch size: one line per framework variant, one panel per model."""
    data = _plain(labelled(frame)).dropna(subset=[y])
    scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    tips = _tooltip(
        data,
        ["model_label", "panel", "series", "batch_size", y, *(ci or ()), "n_samples", "n_trials"],
    )
    batch_axis = alt.Axis(values=sorted({int(b) for b in data.batch_size}), format="d")
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "batch_size:Q",
                title="batch size",
                scale=alt.Scale(type="log", base=2),
                axis=batch_axis,
            ),
            y=alt.Y(f"{y}:Q", title=y_title, scale=scale),
            color=alt.Color("series:N", title="framework · mode"),
            tooltip=tips,
        )
    )
    layers = [line]
    if ci:
        layers.append(
            alt.Chart()
            .mark_errorbar(ticks=True)
            .encode(
                x="batch_size:Q",
                y=alt.Y(f"{ci[0]}:Q", title=y_title, scale=scale),
                y2=f"{ci[1]}:Q",
                color="series:N",
            )
        )
    return (
        alt.layer(*layers, data=data)
        .facet(column=alt.Column("model_label:N", title=None), row=alt.Row("panel:N", title=None))
        .resolve_scale(y="independent")
    )


def latency_chart(table: pd.DataFrame) -> alt.FacetChart:
    data = labelled(table)
    long = _plain(
        data.melt(
            id_vars=["model_label", "panel", "series", "batch_size"],
            value_vars=["latency_p50_ms", "latency_p95_ms", "latency_p99_ms"],
            var_name="percentile",
            value_name="latency_ms",
        )
    ).dropna(subset=["latency_ms"])
    long["percentile"] = long.percentile.str.extract(r"_(p\d+)_")[0]
    tips = _tooltip(
        long, ["model_label", "panel", "series", "batch_size", "percentile", "latency_ms"]
    )
    return (
        alt.Chart(long)
        .mark_point(filled=True, size=80)
        .encode(
            x=alt.X(
                "latency_ms:Q",
                title="latency per call (ms, each call synced)",
                scale=alt.Scale(type="log"),
            ),
            y=alt.Y("series:N", title=None),
            color=alt.Color("percentile:N", title="percentile", sort=["p50", "p95", "p99"]),
            tooltip=tips,
        )
        .properties(width=420, height=alt.Step(22))
        .facet(row=alt.Row("model_label:N", title=None), column=alt.Column("panel:N", title=None))
        .resolve_scale(x="independent")
    )


def roofline_chart(points: pd.DataFrame, curve: pd.DataFrame) -> alt.LayerChart:
    """One device: the measured roofline of each precision (and thread count) and every
    configuration on it."""
    data = _plain(labelled(points)).dropna(subset=["intensity", "achieved_tflops"])
    tips = _tooltip(
        data,
        [
            "model_label",
            "series",
            "panel",
            "batch_size",
            "intensity",
            "achieved_tflops",
            "bound_tflops",
            "share_of_bound",
            "mfu",
            "regime",
            "intensity_source",
        ],
    )
    roof = (
        alt.Chart(curve)
        .mark_line(color="#555555")
        .encode(
            x=alt.X(
                "intensity:Q",
                title="arithmetic intensity (FLOP/byte)",
                scale=alt.Scale(type="log", nice=False),
            ),
            y=alt.Y("bound_tflops:Q", title="achieved TFLOP/s", scale=alt.Scale(type="log")),
            strokeDash=alt.StrokeDash("ceiling:N", title="ceiling"),
            tooltip=_tooltip(curve, ["ceiling", "intensity", "bound_tflops"]),
        )
    )
    dots = (
        alt.Chart(data)
        .mark_point(filled=True, size=90, opacity=0.85)
        .encode(
            x="intensity:Q",
            y="achieved_tflops:Q",
            color=alt.Color("series:N", title="framework · mode"),
            shape=alt.Shape("model_label:N", title="model"),
            tooltip=tips,
        )
    )
    return alt.layer(roof, dots).properties(width=560, height=360)


def kind_chart(matrix: pd.DataFrame, kinds: dict[str, str]) -> alt.FacetChart:
    data = matrix.assign(kind=matrix.model.map(lambda m: kind_label(kinds.get(m, "unknown"))))
    columns = ["kind", "model_label", "batch_size", "comparison", "jax_variant", "torch_variant"]
    return ratio_dots(
        data,
        colour=("kind", "architecture"),
        x_title="JAX ÷ PyTorch throughput (> 1: JAX faster)",
        tips=[*columns, "ratio", "ci_low", "ci_high", "winner"],
        shape=("comparison", "comparison"),
        group="kind",
    )


def ratio_dots(
    data: pd.DataFrame,
    colour: tuple[str, str],
    x_title: str,
    tips: list[str],
    shape: tuple[str, str] | None = None,
    group: str | None = None,
) -> alt.FacetChart:
    """Ratios with their 95% intervals, one row per model and batch size (sorted by ``group``
    first where given), a dashed line at parity, one panel per device and setting: ``data`` has a
    configuration's columns, ``ratio``, ``ci_low`` and ``ci_high``."""
    data = _plain(labelled(data))
    data["row"] = [
        f"{m} · bs {int(b)}" for m, b in zip(data.model_label, data.batch_size, strict=True)
    ]
    keys = [c for c in (group, "model_label", "batch_size") if c]
    order = data.sort_values(keys).row.drop_duplicates().tolist()
    y = alt.Y("row:N", title=None, sort=order)
    # a domain around the data (and parity), so small differences stay visible
    low = min(float(data.ci_low.min()), float(data.ratio.min()), 1.0) / 1.1
    high = max(float(data.ci_high.max()), float(data.ratio.max()), 1.0) * 1.1
    x_scale = alt.Scale(type="log", domain=[low, high], nice=False)
    encoding = {
        "x": alt.X("ratio:Q", title=x_title, scale=x_scale),
        "y": y,
        "color": alt.Color(f"{colour[0]}:N", title=colour[1]),
        "tooltip": _tooltip(data, tips),
    }
    if shape:
        encoding["shape"] = alt.Shape(f"{shape[0]}:N", title=shape[1])
    dots = alt.Chart().mark_point(filled=True, size=80).encode(**encoding)
    bars = (
        alt.Chart()
        .mark_rule()
        .encode(x=alt.X("ci_low:Q", scale=x_scale), x2="ci_high:Q", y=y, color=f"{colour[0]}:N")
    )
    parity = alt.Chart().mark_rule(color="#333333", strokeDash=[4, 3]).encode(x=alt.datum(1.0))
    return (
        alt.layer(bars, dots, parity, data=data)
        .properties(width=420, height=alt.Step(22))
        .facet(column=alt.Column("panel:N", title=None))
    )


def by_mode_bars(table: pd.DataFrame, y: str, y_title: str) -> alt.Chart:
    """A family table's metric per mode (e.g. memory-saving method), per model and framework."""
    data = _plain(table).dropna(subset=[y]).copy()
    data["model_label"] = data.model.map(model_label) if "model" in data else ""
    tips = _tooltip(data, [c for c in data.columns if c != "extra"])
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("mode:N", title=None),
            y=alt.Y(f"{y}:Q", title=y_title),
            color=alt.Color("framework:N", title="framework"),
            xOffset="framework:N",
            tooltip=tips,
        )
        .properties(width=220, height=180)
        .facet(column=alt.Column("model_label:N", title=None))
    )


def parity_chart(curves: pd.DataFrame) -> alt.FacetChart:
    """Both frameworks' per-step losses on the same weights and batches, one panel per model."""
    data = _plain(curves)
    data["model_label"] = (
        data.model.map(model_label) + " (max rel. " + data.max_rel.map(lambda v: f"{v:.1e}") + ")"
    )
    data["series"] = data.framework.map(lambda f: series_label(f, "")).str.strip()
    tips = _tooltip(data, ["model_label", "series", "step", "loss", "status"])
    return (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=18))
        .encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("loss:Q", title="training loss", scale=alt.Scale(zero=False)),
            color=alt.Color("series:N", title="framework"),
            strokeDash=alt.StrokeDash("series:N", title="framework"),
            detail="trial:N",
            tooltip=tips,
        )
        .properties(width=260, height=180)
        .facet(column=alt.Column("model_label:N", title=None))
        .resolve_scale(y="independent")
    )


def convergence_chart(curves: pd.DataFrame) -> alt.FacetChart:
    """Train loss per step and validation top-1 per epoch for both frameworks, per model.

    Validation points are drawn as dots; a square marks the accuracy after BatchNorm
    recalibration where the model has BatchNorm.
    """
    data = _plain(curves)
    data["model_label"] = data.model.map(model_label)
    data["series"] = data.framework.map(lambda f: series_label(f, "")).str.strip()
    if "statistics" not in data:
        data["statistics"] = None
    data["statistics"] = data["statistics"].fillna("")
    tips = _tooltip(data, ["model_label", "series", "curve", "epoch", "value", "statistics"])
    color = alt.Color("series:N", title="framework")
    lines = (
        alt.Chart()
        .transform_filter("datum.statistics != 'BatchNorm recalibrated'")
        .mark_line(opacity=0.85)
        .encode(x=alt.X("epoch:Q", title="epoch"), y=alt.Y("value:Q", title=None), color=color)
    )
    points = (
        alt.Chart()
        .transform_filter("datum.curve != 'train loss'")
        .mark_point(filled=True, size=50)
        .encode(
            x="epoch:Q",
            y="value:Q",
            color=color,
            shape=alt.Shape("statistics:N", title="BatchNorm statistics"),
            tooltip=tips,
        )
    )
    return (
        alt.layer(lines, points, data=data)
        .properties(width=260, height=170)
        .facet(column=alt.Column("model_label:N", title=None), row=alt.Row("curve:N", title=None))
        .resolve_scale(y="independent")
    )


def breakdown_chart(table: pd.DataFrame, order: list[str]) -> alt.FacetChart:
    """One model's per-op breakdowns: ms per call stacked by category, a bar per framework
    variant, a panel per batch size (and precision); ``order`` stacks the categories."""
    data = _plain(labelled(table))
    threads = data["threads"] if "threads" in data else pd.Series(0, index=data.index)
    data["panel"] = [
        f"bs {int(b)}{PANEL_BREAK}{setting_words(p, t)}"
        for b, p, t in zip(data.batch_size, data.precision, threads, strict=True)
    ]
    # panels by batch size as a number (bs 8 before bs 32), then by setting
    panels = list(dict.fromkeys(data.sort_values(["batch_size", "precision"], kind="stable").panel))
    data["stack"] = data.category.map({c: i for i, c in enumerate(order)})
    colours = _PALETTE + ["#666666", "#cccccc"]
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("series:N", title=None),
            y=alt.Y("ms:Q", title="ms per call (profiled)", stack="zero"),
            color=alt.Color(
                "category:N",
                title="category",
                sort=order,
                scale=alt.Scale(domain=order, range=colours[: len(order)]),
            ),
            order=alt.Order("stack:Q"),
            tooltip=_tooltip(data, ["series", "panel", "category", "ms", "share"]),
        )
        .properties(width=alt.Step(_panel_step(panels, data.series.nunique())), height=220)
        .facet(
            column=alt.Column(
                "panel:N",
                title=None,
                sort=panels,
                # the batch size over the setting: one line was wider than a panel of two bars
                header=alt.Header(labelExpr=f"split(datum.value, '{PANEL_BREAK}')"),
            )
        )
    )


PANEL_BREAK = " · "
# the widest a header character is drawn at the reports' size (Vega's 11 px labels), in pixels
HEADER_CHAR_PX = 7


def _panel_step(panels: list[str], bars: int, least: int = 48) -> int:
    """Pixels per bar so that a panel of ``bars`` bars is as wide as its header's longest line."""
    longest = max((len(line) for p in panels for line in p.split(PANEL_BREAK)), default=0)
    return max(least, -(-longest * HEADER_CHAR_PX // max(bars, 1)))


def busbw_chart(table: pd.DataFrame) -> alt.Chart:
    """All-reduce bus bandwidth against message size, one line per framework and world size."""
    # one sweep per framework and world size, whatever the model: no model column to label
    frame = table.assign(
        series=[
            f"{framework_label(fw)} x{n}"
            for fw, n in zip(table.framework, table.world_size, strict=True)
        ]
    )
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("message_bytes:Q", scale=alt.Scale(type="log"), title="message (bytes)"),
            y=alt.Y("busbw_gbs:Q", title="bus bandwidth (GB/s)"),
            color=alt.Color("series:N", title="framework, processes"),
            tooltip=_tooltip(frame, ["series", "message_bytes", "busbw_gbs", "algbw_gbs"]),
        )
    )
