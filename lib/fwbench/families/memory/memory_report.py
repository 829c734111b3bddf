"""Memory (12_memory): peak memory and iteration time per activation-saving method, where the
bytes go, and the memory-time curve against the checkpointing baselines.
"""

from __future__ import annotations

from fwbench.families.memory import (
    memory_breakdown,
    memory_curve,
    memory_curve_words,
    memory_frameworks,
    memory_gate,
)
from fwbench.report import charts, sections, tables
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    literal,
    nonempty,
    per_analysis,
    records,
)

_MEMORY_METHOD_COLUMNS = {"model", "framework", "peak_mem_bytes"}


@per_analysis
def methods(analysis):
    # the peak's parts have a table of their own; their median would mean nothing here
    meas = analysis.meas
    return tables.family_table(meas[meas.metric != memory_breakdown.METRIC], "memory")


@per_analysis
def breakdown(analysis):
    return memory_breakdown.breakdown_table(analysis.meas)


@per_analysis
def curve(analysis):
    return memory_curve.curve_table(analysis.meas)


@per_analysis
def frameworks(analysis):
    return memory_frameworks.frameworks_table(curve(analysis))


@per_analysis
def gates(analysis):
    return memory_gate.gate_table(analysis.meas)


def _gate_notes(analysis, failing: bool) -> list:
    """The gate's sentences where some baseline failed (``failing``: they lead the section, a
    silently wrong gradient being the first thing to know) or where all passed (after the curve)."""
    table = gates(analysis)
    if table.empty or bool((~table.passed).any()) != failing:
        return []
    return [Note(literal(t)) for t in memory_gate.gate_sentences(table)]


METHODS = Section(
    "Memory-saving methods",
    "Peak memory and iteration time per method of one training step (12_memory): the plain "
    "eager step (none), the traced step (graph), fwbench's μ-TWO plan at several budgets "
    "(mu_two@f: only f of the activation memory may stay at the peak), "
    "torch.utils.checkpoint on segments of k blocks and on sqrt(n) segments, and "
    "torch.compile's activation_memory_budget, against the μ-TWO plan's graph compiled. The "
    "activation memory is the unplanned graph's activation high-water mark; "
    "activation_saved_pct is the peak a method saves against the eager step as a share of "
    "it. Swap plans (mu_two_swap@f) are simulated only, at the bandwidth named.",
    (
        Each(lambda a: _gate_notes(a, failing=True)),
        Each(lambda a: [Note(literal(t)) for t in memory_curve_words.sentences(curve(a))]),
        Figure(
            "memory_curve",
            "Memory-time curve",
            "Measured peak memory against iteration time, one line per method; the "
            "horizontal rule is the time's 95% t-interval over trials (each trial a fresh "
            "process). Eager and compiled methods are drawn in separate panels.",
            lambda a: memory_curve.curve_chart(curve(a)),
            when=lambda a: not curve(a).empty and "time_low" in curve(a),
        ),
        Table(
            "memory_curve",
            "Per method: peak memory, activation memory saved, iteration time (geometric "
            "mean over trials with its interval), overhead against the eager step paired by "
            "trial (with its interval), the simulator's errors and the float64 proof.",
            curve,
            records("memory"),
            when=nonempty(curve),
        ),
        Each(lambda a: [Note(literal(t)) for t in memory_frameworks.sentences(frameworks(a))]),
        Each(
            lambda a: [Note(literal(t)) for t in memory_frameworks.budget_sentences(frameworks(a))]
        ),
        Figure(
            "memory_frameworks",
            "Planners in both frameworks",
            "Peak memory against step time for PyTorch's methods and JAX's on the same model "
            "and batch size (JAX: the Flax twin under jit, jax.checkpoint on the same segments, "
            "with JAX's standard policies and with budget policies), one line per framework and "
            "kind of plan; the "
            "horizontal rule is the time's 95% t-interval over trials. Each framework's peak is "
            "its own accounting: PyTorch's allocator, XLA's buffer assignment.",
            lambda a: memory_frameworks.pareto_chart(frameworks(a)),
            when=nonempty(frameworks),
        ),
        Table(
            "memory_frameworks",
            "Per framework and method: peak memory (MB), the share of the peak and of the "
            "activations saved and the overhead (paired by trial, with its interval), each "
            "against its own framework's plain step, and the float64 gradient gate.",
            lambda a: frameworks(a)[memory_frameworks.COLUMNS],
            records("memory"),
            when=nonempty(frameworks),
        ),
        Each(lambda a: _gate_notes(a, failing=False)),
        Table(
            "memory_gate",
            "The baselines' float64 gradient gate: per method, the largest difference of any "
            "parameter's gradient from the eager step's over trials (one step at batch 2, "
            f"dropout active, the same generator state), whether it is within "
            f"{memory_gate.TOLERANCE:g}, and the "
            "tensor furthest off where it is not.",
            gates,
            records("memory", [memory_gate.METRIC]),
            when=nonempty(gates),
        ),
        Each(
            lambda a: [Note(literal(t)) for t in memory_breakdown.breakdown_sentences(breakdown(a))]
        ),
        Figure(
            "memory_breakdown",
            "What the peak is made of, against batch size",
            "The step's memory at its peak by part (parameters with buffers, gradients, "
            "optimizer state, activations, other), for the unplanned traced step and for the "
            "μ-TWO plan at its smallest budget, per batch size: the simulator's parts at its peak "
            "(median over trials), whose total is the measured peak to within the "
            "simulator's peak error above.",
            lambda a: memory_breakdown.parts_chart(breakdown(a)),
            when=lambda a: not breakdown(a).empty,
        ),
        Table(
            "memory_breakdown",
            "The peak's parts in MiB per model, batch size and plan, with the activations' "
            "share of the peak.",
            lambda a: memory_breakdown.peak_shares(breakdown(a)),
            records("memory", [memory_breakdown.METRIC]),
            when=lambda a: not breakdown(a).empty,
        ),
        Table(
            "memory_methods",
            "Memory-method metrics per mode.",
            methods,
            records("memory"),
        ),
        Figure(
            "memory_methods",
            "Peak memory by method",
            "Peak memory of one training iteration per memory-saving method, per framework.",
            lambda a: charts.by_mode_bars(methods(a), "peak_mem_bytes", "peak memory (bytes)"),
            when=lambda a: _MEMORY_METHOD_COLUMNS <= set(methods(a).columns),
        ),
    ),
    empty=lambda a: methods(a).empty or "mode" not in methods(a),
    empty_note="No memory-method records in this run.",
    name="memory",
)


SECTIONS = (METHODS,)


def readme_part(content: dict, _tables_dir, report_link: str) -> list[str]:
    """The README's lines: the section's sentences, where it showed data."""
    if not sections.has_data(content, "memory"):
        return []
    return sections.notes_part(content, "memory", "Memory-saving methods", report_link)
