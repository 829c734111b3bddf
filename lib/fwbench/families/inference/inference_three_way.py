"""What a native Flax port buys: three ways to run one model, compared pairwise.

For every configuration a run measured all three ways — PyTorch at its best mode, the model's Flax
twin under ``jax.jit``, and PyTorch's own module as a JAX function through torchax under
``jax.jit`` (10_inference's ``torchax`` mode) — three ratios of throughput, each through the
verdicts' estimator (rounds paired by trial, nested in runs):

- *Flax twin ÷ torchax*: what the port buys on XLA over PyTorch's graph as PyTorch wrote it (its
  layout, its ops, its attention);
- *torchax ÷ PyTorch*: what XLA makes of PyTorch's own graph against PyTorch's best;
- *Flax twin ÷ PyTorch*: the report's JAX-versus-PyTorch comparison, the same rounds.

Where both JAX arms were profiled, the port's gap is split into its parts (``why.pair_gaps``),
each under the heading a reader asks about: layout (transposes and copies), op choice (depthwise
convolution, attention: the ops the two graphs spell differently), the convolution and matmul
kernels with what XLA fused into them, the other ops, and what no op holds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fwbench.measure import verdicts
from fwbench.measure.stats import ratio_ci
from fwbench.report import arms, charts, tables, why
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    literal,
    nonempty,
    per_analysis,
    pooled,
    records,
)
from fwbench.report.sections import markdown_table
from fwbench.vocab import model_label, setting_words

TORCHAX = ("jax", "torchax")
FLAX = ("jax", "jit")
_TORCH_BEST = "torch"  # picked per configuration: PyTorch's fastest mode in the run
_ARM_LABELS = {TORCHAX: "torchax", FLAX: "Flax twin"}
# (pair, a, b): b's throughput ÷ a's
_PAIRS = (
    ("Flax twin ÷ torchax", TORCHAX, FLAX),
    ("torchax ÷ PyTorch", _TORCH_BEST, TORCHAX),
    ("Flax twin ÷ PyTorch", _TORCH_BEST, FLAX),
)
PORT = _PAIRS[0][0]
# The port's parts by heading (a block of several fused categories is "fused kernels")
_HEADINGS = {
    "data movement/layout": "layout",
    "depthwise/grouped convolution": "op choice",
    "attention": "op choice",
    "convolution": "convolution and matmul kernels",
    "matmul/linear": "convolution and matmul kernels",
    why.OUTSIDE: "outside every op",
    why.OVERLAP: "outside every op",
}
FUSED = "convolution and matmul kernels with their fused ops"
OTHER = "other ops"
_HEADING_ORDER = (
    "layout",
    "op choice",
    FUSED,
    "convolution and matmul kernels",
    OTHER,
    "outside every op",
)


def _arm_label(arm: tuple[str, str]) -> str:
    return _ARM_LABELS.get(arm, f"PyTorch {arm[1]}")


def _three_way_arms(this: pd.DataFrame):
    """Each configuration of ``this`` (one run's ``throughput_samples``) measured all three ways:
    (configuration, {"torch", torchax, Flax twin} -> that arm's row), PyTorch's arm its fastest
    mode."""
    for key, group in this.groupby(tables.CONFIG, sort=True):
        found = {_TORCH_BEST: arms.pick_arm(group, "torch", "best")}
        for arm in (TORCHAX, FLAX):
            rows = tables.series_rows(group, {}, *arm)
            found[arm] = rows.iloc[0] if len(rows) == 1 else None
        if all(row is not None for row in found.values()):
            picked = arms.picked_on_rounds(group, "torch", "best")
            yield dict(zip(tables.CONFIG, key, strict=True)), found, picked


def three_way_matrix(
    samples: pd.DataFrame, run_id: str = "", imported: verdicts.Between | None = None
) -> pd.DataFrame:
    """The three pairwise ratios of every configuration measured all three ways, with the
    verdicts' intervals, design and verdict (``faster``: the faster arm, else *equivalent*,
    *inconclusive* or *within one run*); ``samples`` as ``tables.comparison_matrix`` takes them.
    """
    if samples.empty:
        return pd.DataFrame()
    if "run_id" not in samples:
        samples = samples.assign(run_id=run_id or "run")
    run_id = run_id or samples.run_id.max()
    rows, parts = [], []
    for key, found_arms, picked in _three_way_arms(samples[samples.run_id == run_id]):
        for pair, a_name, b_name in _PAIRS:
            arm_a, arm_b = found_arms[a_name], found_arms[b_name]
            a, b = (arm_a.framework, arm_a.variant), (arm_b.framework, arm_b.variant)
            ident = (*key.values(), pair)
            part, dropped = tables.log_ratio_rounds(samples, key, a, b, ident)
            parts.append(part)
            ratio, low, high = ratio_ci(arm_b.samples, arm_a.samples, seed=tables.RATIO_SEED)
            rows.append(
                {
                    **key,
                    "pair": pair,
                    "a": _arm_label(a),
                    "b": _arm_label(b),
                    "a_framework": a[0],
                    "a_variant": a[1],
                    "b_framework": b[0],
                    "b_variant": b[1],
                    "a_img_s": float(arm_a["median"]),
                    "b_img_s": float(arm_b["median"]),
                    "ratio": ratio,
                    "ci_low": low,
                    "ci_high": high,
                    "ci90_low": np.nan,
                    "ci90_high": np.nan,
                    "verdict": verdicts.WITHIN_ONE_RUN,
                    "design": "1 run, within-run samples",
                    "between_term": "none",
                    "p_holm": np.nan,
                    "dropped_shared": dropped,
                    # PyTorch's arm picked as its fastest mode on these rounds: no verdict
                    "picked_on_rounds": picked and _TORCH_BEST in (a_name, b_name),
                    "ident": ident,
                }
            )
    if not rows:
        return pd.DataFrame()
    found = tables.estimated(pd.concat(parts, ignore_index=True), imported)
    for row in rows:
        if row["ident"] in found:
            e, v = found[row["ident"]]
            verdict = arms.withheld(v.verdict, row["picked_on_rounds"])
            row.update(
                ratio=e.ratio, ci_low=e.low, ci_high=e.high, ci90_low=e.low90, ci90_high=e.high90,
                verdict=verdict, design=e.design, between_term=e.between, p_holm=v.p_holm,
            )  # fmt: skip
    frame = pd.DataFrame(rows).drop(columns="ident")
    frame.insert(
        frame.columns.get_loc("verdict"),
        "faster",
        [
            r.b if r.verdict == verdicts.FASTER_B else r.a if r.verdict == verdicts.FASTER_A else ""
            for r in frame.itertuples()
        ],
    )
    return frame


def port_gaps(matrix: pd.DataFrame, breakdown: pd.DataFrame) -> pd.DataFrame:
    """The Flax twin ÷ torchax gap of every configuration whose two JAX arms were profiled, in
    ``why.pair_gaps``'s parts, each with its ``heading``."""
    if matrix.empty:
        return pd.DataFrame(columns=[*why.GAP_COLUMNS, "heading"])
    port = matrix[matrix.pair == PORT].assign(comparison=PORT, winner=lambda f: f.verdict)
    found = why.pair_gaps(port, breakdown)
    return found.assign(heading=[heading(r) for r in found.itertuples()])


def heading(part) -> str:
    """The question a part answers: layout, op choice, the big kernels (with what XLA fused into
    them, where a block holds several categories), the other ops, or time outside every op."""
    if part.kind == "ops" and part.merged:
        return FUSED
    return _HEADINGS.get(part.category, OTHER)


def port_summary(gaps: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, the port's gap (ms per profiled call, torchax's minus the Flax twin's:
    positive where the port is faster) under each heading; the headings add up to the total."""
    if gaps.empty:
        return pd.DataFrame()
    keys = [*tables.CONFIG, "slower_variant"]
    # signed from torchax's side: the twin's saving is positive whichever arm was slower
    sign = np.where(gaps.slower_variant == TORCHAX[1], 1.0, -1.0)
    frame = gaps.assign(saved_ms=gaps.gap_ms * sign)
    table = frame.pivot_table(
        index=keys, columns="heading", values="saved_ms", aggfunc="sum", fill_value=0.0
    )
    table = table.reindex(columns=[h for h in _HEADING_ORDER if h in table.columns])
    table["total"] = table.sum(axis=1)
    return table.reset_index().drop(columns="slower_variant")


def headline_words(matrix: pd.DataFrame) -> list[str]:
    """One sentence per model and setting: what the twin buys over torchax at each batch size."""
    if matrix.empty:
        return []
    port = matrix[matrix.pair == PORT]
    lines = []
    for (model, device, precision, threads), group in port.groupby(
        ["model", "device_name", "precision", "threads"], sort=True
    ):
        parts = []
        for r in group.sort_values("batch_size").itertuples():
            word = verdicts.words(
                r.verdict,
                {verdicts.FASTER_B: "the twin is faster", verdicts.FASTER_A: "torchax is faster"},
            )
            parts.append(
                f"batch {int(r.batch_size)}: {r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}], "
                f"{word}"
            )
        lines.append(
            f"{model_label(model)} on {device} in {setting_words(precision, threads)}, the Flax "
            f"twin ÷ torchax throughput ({group.design.iloc[0]}): " + "; ".join(parts) + "."
        )
    return lines


# the README's two questions, each a pair of the three-way table
_README_PAIRS = (
    (PORT, "what the port buys on XLA; above 1 the Flax twin is faster"),
    ("torchax ÷ PyTorch", "PyTorch's own graph on XLA against PyTorch; above 1 torchax is faster"),
)


def readme_lines(table: pd.DataFrame, report_link: str) -> list[str]:
    """The README's three-way headline from the report's ``three_way`` table: per pair, setting
    and design, a table of models by batch size, each ratio with its 95% interval and, where no
    arm is faster, its verdict."""
    if table.empty or "pair" not in table:
        return []
    lines = []
    for pair, meaning in _README_PAIRS:
        rows = table[table.pair == pair]
        for (device, precision, threads, design), group in rows.groupby(
            ["device_name", "precision", "threads", "design"], sort=True
        ):
            batches = sorted(group.batch_size.unique())
            body = []
            for model, by_model in group.groupby("model", sort=True):
                cells = {int(r.batch_size): _ratio_words(r) for r in by_model.itertuples()}
                body.append([model_label(model), *[cells.get(int(b), "") for b in batches]])
            lines += [
                f"{pair} throughput, {setting_words(precision, threads)} on {device}, 95% "
                f"intervals, design {design} ({meaning}; [report]({report_link})):",
                markdown_table(["model", *[f"batch {int(b)}" for b in batches]], body),
            ]
    return lines


def _ratio_words(r) -> str:
    text = f"{r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    return text if isinstance(r.faster, str) and r.faster else f"{text} ({r.verdict})"


@per_analysis
def matrix(analysis) -> pd.DataFrame:
    pool = analysis.pool_samples if not analysis.pool_samples.empty else analysis.samples
    return three_way_matrix(pool, analysis.run_id, analysis.imported)


@per_analysis
def gaps(analysis) -> pd.DataFrame:
    return port_gaps(matrix(analysis), analysis.breakdown)


@per_analysis
def summary(analysis) -> pd.DataFrame:
    return port_summary(gaps(analysis))


def _chart(analysis):
    return charts.ratio_dots(
        matrix(analysis),
        colour=("pair", "ratio"),
        x_title="throughput ratio (> 1: the first-named arm faster)",
        tips=["model_label", "batch_size", "pair", "a", "b", "ratio", "ci_low", "ci_high"]
        + ["faster", "verdict", "design"],
    )


SECTION = Section(
    "What a native Flax port buys",
    "The same model three ways: PyTorch at its fastest mode, its hand-written Flax twin under "
    "jax.jit, and PyTorch's own module turned into a JAX function by torchax under jax.jit "
    "(no port: XLA compiles PyTorch's graph, NCHW layout and all). The twin ÷ torchax ratio is "
    "what the port buys on XLA; the other two place both against PyTorch. Every ratio goes "
    "through the same estimator as the comparison matrix.",
    (
        Each(lambda a: [Note(literal(t)) for t in headline_words(matrix(a))]),
        Figure(
            "three_way",
            "Three ways to run a model",
            "Throughput ratios with their 95% intervals per model and batch size on {devices}: "
            "Flax twin ÷ torchax (what the port buys), torchax ÷ PyTorch's fastest mode and Flax "
            "twin ÷ PyTorch's fastest mode; right of the dashed line the first-named arm is "
            "faster.",
            _chart,
        ),
        Table(
            "three_way",
            "Each pair's ratio (b ÷ a throughput) with 95% and 90% intervals, its design (runs × "
            "rounds) and verdict: `faster` names the faster arm where the verdict decides one.",
            matrix,
            pooled("inference", ["throughput_img_s"]),
            drop=("device",),
        ),
        Each(lambda a: [Note(literal(t)) for t in a.borrowed_line if not gaps(a).empty]),
        Each(lambda a: [Note(literal(t)) for t in why.why_sentences(gaps(a))]),
        Table(
            "port_why",
            "Where the port's gap lies, per configuration with both JAX arms profiled: ms per "
            "profiled call torchax spends more than the Flax twin (negative: less), under "
            "layout (transposes and copies), op choice (depthwise convolution, attention), the "
            "convolution and matmul kernels (with their fused ops where XLA fused any), the "
            "other ops, and the time outside every op; the headings add up to `total`.",
            summary,
            records("profile", ["op_time_ms"]),
            drop=("device",),
            when=nonempty(summary),
            otherwise=(
                "Neither JAX arm of a three-way configuration was profiled, in this run or in a "
                "companion `<campaign>_why` run on this CPU model."
            ),
        ),
    ),
    when=nonempty(matrix),
)
