"""Training against inference: a synced training step's time over a synced forward's, per model,
framework and batch, wherever a run holds both (11_training's ``step_time_p50_ms`` and
10_inference's ``latency_p50_ms`` at the same model, setting, precision, threads, batch size and
image size, on the same CPU or GPU).

A step is a forward, a backward and an optimizer update, so a framework's ratio says how much its
backward and update cost beyond the forward: about 3 is the textbook figure (the backward twice
the forward's FLOPs), more where the backward's kernels are slower than the forward's or the
update is a cost of its own. Each trial's ratio pairs the two notebooks' cells of the same run and
trial, which ran back to back in an interleaved campaign; the table gives their median and range,
a description of one machine, not a verdict.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from fwbench.report import tables
from fwbench.report.items import Each, Figure, Note, Table, literal, nonempty, per_analysis, records
from fwbench.vocab import framework_label, model_label

STEP, FORWARD = "step_time_p50_ms", "latency_p50_ms"
KEYS = ["model", "framework", "mode", "device_name", "precision", "threads", "batch_size"]
_PAIR = ["run_id", "trial"]


def _side(meas: pd.DataFrame, family: str, metric: str) -> pd.DataFrame:
    rows = meas[(meas.family == family) & (meas.metric == metric) & (meas.status == "ok")]
    rows = tables.extra_columns(rows, ["image_size", "inputs"])
    # images only: a text or speech model's records name their inputs, and their image size is
    # only the notebook's parameter
    rows = rows[rows.image_size.notna() & rows.inputs.fillna("image").eq("image")]
    return rows[[*KEYS, "image_size", *_PAIR, "value"]]


def step_over_forward(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration both notebooks measured: the median training step and forward
    (ms) over the trials paired, and the step ÷ forward ratio's median, lowest and highest."""
    columns = [
        *KEYS,
        "image_size",
        "step_ms",
        "forward_ms",
        "step_over_forward",
        "ratio_low",
        "ratio_high",
        "trials",
    ]
    step = _side(meas, "training", STEP)
    forward = _side(meas, "inference", FORWARD)
    if step.empty or forward.empty:
        return pd.DataFrame(columns=columns)
    on = [*KEYS, "image_size", *_PAIR]
    pairs = step.merge(forward, on=on, suffixes=("_step", "_forward"))
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    pairs["ratio"] = pairs.value_step / pairs.value_forward
    out = (
        pairs.groupby([*KEYS, "image_size"], sort=True)
        .agg(
            step_ms=("value_step", "median"),
            forward_ms=("value_forward", "median"),
            step_over_forward=("ratio", "median"),
            ratio_low=("ratio", "min"),
            ratio_high=("ratio", "max"),
            trials=("ratio", "size"),
        )
        .reset_index()
    )
    out["image_size"] = out.image_size.astype(int)
    return out[columns]


def ratio_chart(table: pd.DataFrame) -> alt.Chart:
    data = table.assign(
        model_label=table.model.map(model_label) + " · batch " + table.batch_size.astype(str),
        side=table.framework.map(framework_label) + " " + table["mode"],
        low=table.ratio_low,
        high=table.ratio_high,
    )
    base = alt.Chart(data).encode(
        y=alt.Y("model_label:N", title=None),
        yOffset=alt.YOffset("side:N"),
        color=alt.Color("side:N", title="framework"),
    )
    bars = base.mark_bar().encode(
        x=alt.X("step_over_forward:Q", title="training step ÷ forward"),
        tooltip=["model_label", "side", "step_ms", "forward_ms", "step_over_forward"],
    )
    ranges = base.mark_rule().encode(x="low:Q", x2="high:Q")
    textbook = (
        alt.Chart(pd.DataFrame({"x": [3.0]}))
        .mark_rule(strokeDash=[4, 3], color="grey")
        .encode(x="x:Q")
    )
    return alt.layer(bars, ranges, textbook)


def sentence(table: pd.DataFrame) -> str:
    """The spread of the ratios, per framework (and per mode where a framework ran several: JAX's
    stock and expert twins train different convolutions), in one line."""
    parts = []
    for (framework, mode), group in table.groupby(["framework", "mode"], sort=True):
        several = table[table.framework == framework]["mode"].nunique() > 1
        side = f"{framework_label(framework)} {mode}" if several else framework_label(framework)
        low, high = group.step_over_forward.min(), group.step_over_forward.max()
        parts.append(f"{side} {low:.1f}–{high:.1f}×")
    return "A training step takes " + ", ".join(parts) + " the time of a forward at its batch."


@per_analysis
def step_forward(analysis) -> pd.DataFrame:
    return step_over_forward(analysis.meas)


_CAPTION = (
    "A synced training step (forward, backward and update, the batch already on the device) "
    "over a synced forward at the same batch, model, setting, precision, threads and image "
    "size; the median over trials paired by run and trial, with its range: a description of "
    "this machine, not a verdict. The training model's classifier has the dataset's classes, "
    "the forward's the model's own. The dashed line is 3, the backward at twice the forward's "
    "FLOPs."
)
ITEMS = (
    Each(lambda a: [Note(literal(sentence(step_forward(a))))] if len(step_forward(a)) else []),
    Figure(
        "step_over_forward",
        "Training step ÷ forward",
        _CAPTION,
        lambda a: ratio_chart(step_forward(a)),
        when=nonempty(step_forward),
    ),
    Table(
        "step_over_forward",
        _CAPTION,
        step_forward,
        records(None, [STEP, FORWARD]),
        when=nonempty(step_forward),
    ),
)
