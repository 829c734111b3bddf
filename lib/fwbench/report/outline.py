"""The report's outline: its sections as data, and the one loop that fills a ``ReportContent``.

A ``Section`` names its title and intro and lists its items: figures, tables and notes, each with
the function that computes it from one run's records (an ``Analysis``) and its caption. A section
with no data for its subject shows its stated ``empty_note`` instead of its items; an item with a
``when`` shows only where that holds, and its ``otherwise`` note where it does not.
notebooks/20_analysis.py calls ``build``, and ``fwbench report`` runs that notebook, so what the
notebook shows and what the report says come from the same loop.

Captions, intros and notes are ``str.format`` templates over the analysis's attributes
("on {devices}"), or functions of the analysis where the text is computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from fwbench.measure.meters.contention import SHARED_FRACTION
from fwbench.report import (
    audio,
    charts,
    memory_breakdown,
    memory_curve,
    regressions,
    roofline,
    sentences,
    tables,
    trust,
    why,
)
from fwbench.report.sections import ReportContent


@dataclass
class Analysis:
    """One run's records and everything the sections compute from them, each computed once."""

    campaign: str
    run_id: str
    baseline_run_id: str
    meas: pd.DataFrame
    cells: pd.DataFrame
    run: dict
    baseline: pd.DataFrame
    index_calibration: pd.DataFrame  # MFU's fallback when this run did not calibrate
    kinds: dict[str, str]  # model -> "cnn" or "transformer"; the report may not import the models
    # every metric's per-run history in this campaign, up to and including this run
    histories: pd.DataFrame
    # throughput samples of every run the verdicts pool (column run_id): this campaign's runs up
    # to this one on the same CPU model and notebook sources
    pool_samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    imported: object = None  # verdicts.Between a single run borrows, or None

    def sources(self, rows: pd.DataFrame) -> list[str]:
        return tables.source_paths(rows, self.cells)

    def family(self, name: str) -> pd.DataFrame:
        return self.meas[self.meas.family == name]

    @cached_property
    def inference(self) -> pd.DataFrame:
        return self.family("inference")

    @cached_property
    def devices(self) -> str:
        return ", ".join(sorted({d for d in self.inference.device_name if d})) or "no device"

    @cached_property
    def samples(self) -> pd.DataFrame:
        return tables.throughput_samples(self.meas)

    @cached_property
    def matrix(self) -> pd.DataFrame:
        pool = self.pool_samples if not self.pool_samples.empty else self.samples
        return tables.comparison_matrix(pool, self.run_id, self.imported)

    @cached_property
    def latency(self) -> pd.DataFrame:
        return tables.latency_at_smallest_batch(self.meas)

    @cached_property
    def latency_batches(self) -> str:
        return ", ".join(map(str, sorted(self.latency.batch_size.unique())))

    @cached_property
    def memory(self) -> pd.DataFrame:
        return tables.memory_table(self.meas)

    @cached_property
    def compile_times(self) -> pd.DataFrame:
        table = tables.metric_table(self.meas, ["compile_s", "lower_s", "xla_compile_s"])
        return table.dropna(subset=["compile_s"])

    @cached_property
    def break_even(self) -> pd.DataFrame:
        return (
            pd.DataFrame() if self.matrix.empty else tables.break_even_table(self.matrix, self.meas)
        )

    @cached_property
    def energy(self) -> pd.DataFrame:
        return tables.energy_table(self.meas)

    @cached_property
    def calibration(self) -> pd.DataFrame:
        return roofline.calibration_with_fallback(self.meas, self.index_calibration)

    @cached_property
    def ceilings(self) -> pd.DataFrame:
        return roofline.device_ceilings(self.calibration)

    @cached_property
    def points(self) -> pd.DataFrame:
        return roofline.roofline_points(self.meas, self.calibration)

    @cached_property
    def mfu(self) -> pd.DataFrame:
        return roofline.mfu_table(self.meas, self.calibration)

    @cached_property
    def kind_table(self) -> pd.DataFrame:
        return tables.kind_summary(self.matrix, self.kinds)

    @cached_property
    def training(self) -> pd.DataFrame:
        return self.family("training")

    @cached_property
    def train_samples(self) -> pd.DataFrame:
        return tables.throughput_samples(self.meas, "training")

    @cached_property
    def train_matrix(self) -> pd.DataFrame:
        return tables.comparison_matrix(self.train_samples)

    @cached_property
    def train_speed(self) -> pd.DataFrame:
        return tables.metric_table(self.meas, tables.TRAINING_SPEED, "training")

    @cached_property
    def train_memory(self) -> pd.DataFrame:
        return tables.memory_table(self.meas, "training")

    @cached_property
    def parity_curves(self) -> pd.DataFrame:
        return tables.parity_curves(self.meas)

    @cached_property
    def parity(self) -> pd.DataFrame:
        return tables.check_table(self.meas, tables.PARITY_METRICS)

    @cached_property
    def convergence_curves(self) -> pd.DataFrame:
        return tables.convergence_curves(self.meas)

    @cached_property
    def convergence(self) -> pd.DataFrame:
        return tables.check_table(self.meas, tables.CONVERGENCE_METRICS)

    @cached_property
    def memory_methods(self) -> pd.DataFrame:
        # the peak's parts have a table of their own; their median would mean nothing here
        return tables.family_table(self.meas[self.meas.metric != memory_breakdown.METRIC], "memory")

    @cached_property
    def memory_breakdown(self) -> pd.DataFrame:
        return memory_breakdown.breakdown_table(self.meas)

    @cached_property
    def memory_curve(self) -> pd.DataFrame:
        return memory_curve.curve_table(self.meas)

    @cached_property
    def validation(self) -> pd.DataFrame:
        return tables.family_table(self.meas, "validation")

    @cached_property
    def prediction(self) -> pd.DataFrame:
        return tables.prediction_table(self.meas)

    @cached_property
    def distributed(self) -> pd.DataFrame:
        return tables.distributed_table(self.meas)

    @cached_property
    def distributed_parity(self) -> pd.DataFrame:
        return tables.distributed_parity_table(self.meas)

    @cached_property
    def busbw(self) -> pd.DataFrame:
        return tables.busbw_table(self.meas)

    @cached_property
    def web_audio(self) -> pd.DataFrame:
        return audio.runtime_table(self.meas)

    @cached_property
    def web_audio_skipped(self) -> pd.DataFrame:
        return audio.skipped_table(self.meas)

    @cached_property
    def web_audio_capabilities(self) -> pd.DataFrame:
        return audio.capability_table(self.meas)

    @cached_property
    def history_runs(self) -> int:
        return int(self.histories.run_id.nunique()) if not self.histories.empty else 0

    @cached_property
    def changes(self) -> pd.DataFrame:
        """Level changes the detector finds in this campaign's histories up to this run."""
        return regressions.find_regressions(self.histories)

    @cached_property
    def history_line(self) -> str:
        return sentences.history_sentence(self.changes, self.history_runs, self.run_id)

    @cached_property
    def breakdown(self) -> pd.DataFrame:
        return why.breakdown(self.meas)

    @cached_property
    def gaps(self) -> pd.DataFrame:
        return why.gaps(self.matrix, self.breakdown)

    @cached_property
    def why_lines(self) -> list[str]:
        return why.why_sentences(self.gaps)

    @cached_property
    def bound_share_lines(self) -> list[str]:
        return roofline.bound_share_sentences(self.points, self.matrix, self.breakdown)

    @cached_property
    def trials(self) -> pd.DataFrame:
        return trust.trials_table(self.samples)

    @cached_property
    def aa(self) -> pd.DataFrame:
        return trust.aa_control(self.pool_samples)

    @cached_property
    def stability(self) -> pd.DataFrame:
        return trust.calibration(self.pool_samples, self.run_id)

    @cached_property
    def stability_summary(self) -> dict:
        return trust.calibration_summary(self.stability)

    @cached_property
    def trust_lines(self) -> list[str]:
        return sentences.trust_sentences(self.matrix, self.cells, self.aa, trust.aa_rate(self.aa))

    @cached_property
    def trust_summary(self) -> list[str]:
        """The A/A and calibration sentences the executive summary carries, where trials exist."""
        if self.trials.empty:
            return []
        return [
            *self.trust_lines[1:],
            sentences.stability_sentence(self.stability_summary, self.run_id),
        ]

    @cached_property
    def regression_evaluation(self) -> tuple[pd.DataFrame, int | None]:
        pool = trust.noise_pool(self.samples)
        if pool.size == 0:
            return pd.DataFrame(), None
        return trust.regression_scores(pool, self.histories)

    @cached_property
    def failures(self) -> pd.DataFrame:
        return tables.failures_table(self.meas, self.cells)

    @cached_property
    def retries(self) -> pd.DataFrame:
        return tables.retries_table(self.cells)

    @cached_property
    def shared(self) -> pd.DataFrame:
        return tables.shared_machine_table(self.cells)


def load(con, campaign: str, run_id: str, baseline_run_id: str, kinds: dict) -> Analysis:
    """The run to analyse (default: the campaign's latest) and its baseline (default: the run
    before it), read from an open index."""
    run_id, baseline_run_id = tables.resolve_runs(con, campaign, run_id, baseline_run_id)
    cells = tables.load_cells(con, campaign, run_id)
    meas = tables.with_cell_readings(tables.load_measurements(con, campaign, run_id), cells)
    baseline = meas.iloc[0:0]
    if baseline_run_id:
        baseline = tables.with_cell_readings(
            tables.load_measurements(con, campaign, baseline_run_id),
            tables.load_cells(con, campaign, baseline_run_id),
        )
    sql, params = regressions.histories_query(campaign)
    histories = con.execute(sql, params).df()
    run = tables.load_run(con, campaign, run_id)
    pool = tables.pooled_run_ids(con, campaign, run_id)
    pool_samples = tables.pooled_samples(con, campaign, pool, loaded={run_id: meas})
    with_rounds = pool_samples.trials.notna() if not pool_samples.empty else []
    runs_with_rounds = pool_samples[with_rounds].run_id.nunique() if len(with_rounds) else 0
    imported = tables.imported_between(con, run["environment"]) if runs_with_rounds == 1 else None
    # the history as it stood when this run finished: a report rebuilt later says the same
    this_order = histories.loc[histories.run_id == run_id, "run_order"]
    if not this_order.empty:
        histories = histories[histories.run_order <= this_order.iloc[0]]
    return Analysis(
        campaign=campaign,
        run_id=run_id,
        baseline_run_id=baseline_run_id,
        meas=meas,
        cells=cells,
        run=run,
        baseline=baseline,
        index_calibration=tables.load_calibration(con),
        kinds=kinds,
        histories=histories.reset_index(drop=True),
        pool_samples=pool_samples,
        imported=imported,
    )


# --------------------------------------------------------------------------- the outline's parts

Text = str | Callable[[Analysis], str]
Test = Callable[[Analysis], bool]
Sources = Callable[[Analysis, pd.DataFrame], list[str]]


@dataclass(frozen=True)
class Note:
    text: Text
    when: Test | None = None


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    caption: Text
    chart: Callable[[Analysis], object]
    when: Test | None = None
    otherwise: Text = ""


@dataclass(frozen=True)
class Table:
    name: str
    caption: Text
    frame: Callable[[Analysis], pd.DataFrame]
    sources: Sources  # the executed notebooks behind the rows, from the frame before ``drop``
    drop: tuple[str, ...] = ()
    when: Test | None = None
    otherwise: Text = ""


@dataclass(frozen=True)
class Each:
    """Items whose number depends on the data (one roofline per device)."""

    items: Callable[[Analysis], list]


@dataclass(frozen=True)
class Section:
    title: str
    intro: Text
    items: tuple = ()
    empty: Test | None = None
    empty_note: Text = ""
    part: str = "results"  # or "failures": where the report places it
    name: str = ""  # a stable key for other readers of content.json (fwbench readme)


class _Fields(dict):
    def __init__(self, analysis: Analysis):
        super().__init__()
        self.analysis = analysis

    def __missing__(self, key: str):
        return getattr(self.analysis, key)


def fill(text: Text, analysis: Analysis) -> str:
    return text(analysis) if callable(text) else text.format_map(_Fields(analysis))


def literal(text: str) -> Callable[[Analysis], str]:
    """Text computed from the data, which may hold braces of its own."""
    return lambda _analysis: text


def records(family: str | None = None, metrics: Sequence[str] = (), prefix: str = "") -> Sources:
    """The notebooks behind a family's records of some metrics (all families when None)."""

    def paths(analysis: Analysis, _frame: pd.DataFrame) -> list[str]:
        rows = analysis.meas if family is None else analysis.family(family)
        if metrics:
            rows = rows[rows.metric.isin(metrics)]
        if prefix:
            rows = rows[rows.metric.str.startswith(prefix)]
        return analysis.sources(rows)

    return paths


def own_paths(_analysis: Analysis, frame: pd.DataFrame) -> list[str]:
    """Tables of cells carry their notebook's path in a column of their own."""
    return list(frame.path.dropna())


def _nonempty(attribute: str) -> Test:
    return lambda analysis: not getattr(analysis, attribute).empty


def _empty(attribute: str) -> Test:
    return lambda analysis: getattr(analysis, attribute).empty


def _no_trials_note(analysis: Analysis) -> str:
    """Why the trust section is empty: one trial per cell, or trials of another family (their
    intervals are in that family's own section)."""
    trials = analysis.cells.trial if "trial" in analysis.cells else pd.Series(dtype=float)
    if trials.fillna(0).max() > 1:
        return (
            "This run's trials are not inference measurements, so there is no JAX-vs-PyTorch "
            "ratio to pair by round, no A/A control and no calibration check here; each family "
            "that ran trials judges them in its own section."
        )
    return (
        "This campaign ran one trial per cell, so there is nothing to pair by round, no A/A "
        "control and no calibration check: its ratios are within one run and call no winner. "
        "A campaign of interleaved trials repeated as runs, with duplicate arms, has them "
        "(params/headline.yaml)."
    )


def _rooflines(analysis: Analysis) -> list:
    items = []
    points, ceilings = analysis.points, analysis.ceilings
    for i, device_name in enumerate(sorted(points.device_name.unique())):
        on_device = points[(points.device_name == device_name) & points.intensity.notna()]
        device_ceilings = ceilings[ceilings.device_name == device_name]
        if on_device.empty or device_ceilings.empty:
            text = f"{device_name}: no intensity or no ceilings, so no roofline plot."
            items.append(Note(literal(text)))
            continue
        curve = roofline.roofline_curve(device_ceilings, on_device.intensity)
        items.append(
            Figure(
                f"roofline_{i + 1}",
                f"Roofline: {device_name}",
                literal(
                    f"Achieved FLOP/s (FLOPs per image from the frameworks' counters × median "
                    f"throughput) against arithmetic intensity (XLA cost analysis FLOPs ÷ bytes) "
                    f"on {device_name}; lines are min(peak matmul, copy bandwidth × intensity) "
                    "per precision and thread count, each the best any framework measured there."
                ),
                lambda _a, on_device=on_device, curve=curve: charts.roofline_chart(
                    on_device, curve
                ),
            )
        )
    return items


def _why_figures(analysis: Analysis) -> list:
    items = []
    for model in sorted(analysis.breakdown.model.unique()):
        rows = analysis.breakdown[analysis.breakdown.model == model]
        order = why.category_order(rows.category)
        items.append(
            Figure(
                f"why_{model}",
                f"Where the time goes: {model}",
                literal(
                    f"Profiled ms per call of {model} by op category (mean over trials), per "
                    f"framework variant and batch size, on {analysis.devices}: an XLA fusion "
                    "whose ops span several categories is one kernel and counts under all of "
                    "them joined (convolution + normalisation); framework overhead is wall time "
                    "outside every op, to which an eager framework's profiler adds its own cost "
                    "per op. Where XLA ran ops on several threads at once, the bars add up to "
                    "more than the wall time."
                ),
                lambda _a, rows=rows, order=order: charts.breakdown_chart(rows, order),
            )
        )
    return items


def _web_audio_notes(analysis: Analysis) -> list:
    return [Note(literal(text)) for text in audio.sentences(analysis.meas)]


def _mfu_notes(analysis: Analysis) -> list:
    # the run's CPU's vector extensions say why a framework's kernel path is slow on it
    isa = ((analysis.run.get("environment") or {}).get("cpu") or {}).get("isa")
    notes = roofline.mfu_notes(analysis.mfu, analysis.run_id, isa)
    return [Note(literal(text)) for text in notes]


def _energy_note(analysis: Analysis) -> str:
    reasons = tables.energy_unavailable_reasons(analysis.meas)
    return "No energy was measured in this run" + (f" ({'; '.join(reasons)})." if reasons else ".")


def _ratio_heatmap(attribute: str) -> Callable[[Analysis], object]:
    return lambda analysis: charts.ratio_heatmap(getattr(analysis, attribute))


def _throughput(attribute: str) -> Callable[[Analysis], object]:
    return lambda analysis: charts.by_batch(
        getattr(analysis, attribute), "median", "images/s (median)", ci=("ci_low", "ci_high")
    )


MEMORY_METHOD_COLUMNS = {"model", "framework", "peak_mem_bytes"}

SECTIONS: tuple[Section, ...] = (
    Section(
        "Comparison matrix",
        lambda a: sentences.matrix_intro(a.matrix),
        (
            Figure(
                "ratio_matrix",
                "JAX ÷ PyTorch throughput",
                "JAX images/s ÷ PyTorch's on {devices} (the estimated ratio over rounds paired by "
                "trial and pooled runs, else the ratio of medians); best modes (each framework's "
                "fastest variant) and defaults (PyTorch eager vs JAX jit). Colour is log₂ of the "
                "ratio; ≈ marks equivalent within ±5%, ? inconclusive, (1 run) within one run.",
                _ratio_heatmap("matrix"),
            ),
            Table(
                "ratio_matrix",
                "JAX ÷ PyTorch throughput ratio with 95% and 90% intervals and the verdict "
                "(`winner`: jax, torch, equivalent, inconclusive or within one run); `design` the "
                "runs × rounds behind it, `between_term` where its between-run term came from, "
                "`p_holm` the Holm-adjusted p-value, `runs_to_decide` roughly how many runs would "
                "decide an inconclusive one, `dropped_shared` rounds left out for contention.",
                lambda a: a.matrix,
                records("inference", ["throughput_img_s"]),
                drop=("device",),
            ),
        ),
        empty=_empty("matrix"),
        empty_note="No configuration was measured with both frameworks in this run.",
    ),
    Section(
        "Trust: trials, A/A control and calibration",
        "Whether these ratios would come out the same again: the trials behind them, duplicate "
        "arms (the same configuration as two cells) judged by the verdicts' own estimator, and "
        "whether this run lands where the campaign's earlier runs predicted.",
        (
            Each(lambda a: [Note(literal(t)) for t in a.trust_lines]),
            Table(
                "trials",
                "Trials per arm: how many ran, attempts run again because the machine was shared "
                "(the campaign's rerun_shared), trials still shared after that, and trials used.",
                lambda a: a.trials,
                records("inference", ["throughput_img_s"]),
                drop=("device",),
            ),
            Table(
                "aa_control",
                "A/A control per duplicate arm and run: the copy ÷ the original, its 95% interval "
                "with the between-run term fitted on every pooled run's A/A rounds, and whether "
                "it wrongly calls a winner.",
                lambda a: a.aa,
                records("inference", ["throughput_img_s"]),
                drop=("device",),
                when=_nonempty("aa"),
            ),
            Note(lambda a: sentences.stability_sentence(a.stability_summary, a.run_id)),
            Table(
                "calibration",
                "Each best-mode comparison: the 95% prediction interval the earlier pooled runs "
                "give a new run's ratio, this run's ratio, whether it lies inside, and the "
                "verdict before and after this run is pooled in.",
                lambda a: a.stability,
                records("inference", ["throughput_img_s"]),
                drop=("device",),
                when=_nonempty("stability"),
            ),
            Note(lambda a: sentences.regression_evaluation_sentence(*a.regression_evaluation)),
            Table(
                "regression_evaluation",
                "The regression detector and two baselines on seeded synthetic 10-run histories "
                "whose points are medians of this run's trials times a run effect at the "
                "campaign's between-run SD (200 per slowdown size and 200 unchanged): recall per "
                "size, false alerts per 100 unchanged histories, runs to detection, F1; "
                "`scenario` says whether a row is the current design, more trials or more runs "
                "per point, or the same without run noise.",
                lambda a: a.regression_evaluation[0],
                records("inference", ["throughput_img_s"]),
                when=lambda a: not a.regression_evaluation[0].empty,
            ),
        ),
        empty=_empty("trials"),
        empty_note=_no_trials_note,
        name="trust",
    ),
    Section(
        "Why",
        "Where each framework's time goes, per op category, and the parts that add up to the gap "
        "in every comparison with a measured one (10_inference with `profile: true`): each "
        "category with its sign, categories that either side ran fused in one kernel counted as "
        "one block on both sides, the time outside every profiled op, and, where XLA ran ops on "
        "several threads at once, the op time the wall clock counted once.",
        (
            Each(lambda a: [Note(literal(t)) for t in a.why_lines]),
            Note(
                "No comparison with a winner has a profile on both sides.",
                when=lambda a: not a.why_lines,
            ),
            Each(_why_figures),
            Table(
                "op_breakdown",
                "Profiled ms per call by op category (mean over trials, so that the parts of a "
                "gap add up), its share of the side's summed profiled time, the profiled wall "
                "time per call, and whether a JAX profile leaves unnamed what XLA fused (one "
                "recorded before fusions were named).",
                lambda a: a.breakdown,
                records("profile", ["op_time_ms"]),
                drop=("device",),
            ),
            Table(
                "gaps",
                "Per comparison with a measured gap: each part's ms per call on the slower and "
                "the faster side and the difference, which add up to the two sides' profiled "
                "wall times and their gap; `merged` lists the categories a block holds, "
                "`assumed` marks a block merged because a JAX profile does not name its fusions.",
                lambda a: a.gaps,
                records("profile", ["op_time_ms"]),
                drop=("device",),
                when=_nonempty("gaps"),
            ),
        ),
        empty=_empty("breakdown"),
        empty_note="No cell of this run was profiled (10_inference's `profile` parameter).",
        name="why",
    ),
    Section(
        "Throughput scaling",
        "How many images per second each variant sustains as the batch grows (median over blocks "
        "of enqueued calls, one sync per block).",
        (
            Figure(
                "throughput_scaling",
                "Throughput vs batch size",
                "Median images/s over timed blocks of pipelined calls with its 95% bootstrap "
                "interval, per framework and mode, on {devices}; both axes logarithmic.",
                _throughput("samples"),
            ),
        ),
        empty=_empty("samples"),
        empty_note="No throughput was measured in this run.",
    ),
    Section(
        "Latency at batch 1",
        "Per-call latency, every call synced and timed alone, at the smallest batch size measured "
        "(1 unless the campaign left it out).",
        (
            Figure(
                "latency_batch1",
                "Latency percentiles at the smallest batch",
                "p50, p95 and p99 of per-call latency (each call synchronised and timed alone) on "
                "{devices}, at batch size {latency_batches}.",
                lambda a: charts.latency_chart(a.latency),
            ),
            Table(
                "latency_batch1",
                "Latency percentiles (ms) at the smallest batch size.",
                lambda a: a.latency,
                records("inference", prefix="latency_"),
                drop=("device",),
            ),
        ),
        empty=_empty("latency"),
        empty_note="No latency was measured in this run.",
    ),
    Section(
        "Memory",
        "Peak device memory per batch size (torch max_memory_allocated, JAX peak_bytes_in_use, "
        "CPU peak RSS) and images/s per GB of that peak.",
        (
            Figure(
                "memory_scaling",
                "Peak memory vs batch size",
                "Peak memory during the timed calls, per framework and mode, on {devices}; GB = "
                "10⁹ bytes; both axes logarithmic.",
                lambda a: charts.by_batch(a.memory, "peak_mem_gb", "peak memory (GB)"),
            ),
            Figure(
                "memory_efficiency",
                "Memory efficiency",
                "Median throughput divided by peak memory (images/s per GB), on {devices}.",
                lambda a: charts.by_batch(a.memory, "img_s_per_gb", "images/s per GB"),
            ),
            Table(
                "memory",
                "Peak memory and memory efficiency per configuration.",
                lambda a: a.memory,
                records("inference", ["peak_mem_bytes"]),
                drop=("device",),
            ),
        ),
        empty=_empty("memory"),
        empty_note="No peak memory was recorded in this run.",
    ),
    Section(
        "Compile time and break-even",
        "JAX: AOT lowering plus XLA compilation; torch.compile: first call minus a steady call; "
        "eager: 0. Break-even is the number of images after which the faster side's extra "
        "compile time is paid back: (compile_faster − compile_other) ÷ (s/img other − s/img "
        "faster).",
        (
            Figure(
                "compile_time",
                "Compile time vs batch size",
                "Seconds spent compiling before the first measured call, per compiled mode, on "
                "{devices} (eager modes compile nothing and are left out).",
                lambda a: charts.by_batch(
                    a.compile_times[a.compile_times.compile_s > 0], "compile_s", "compile time (s)"
                ),
                when=lambda a: (a.compile_times.compile_s > 0).any(),
                otherwise="Only eager modes ran, so nothing was compiled.",
            ),
            Table(
                "compile_time",
                "Compile time (s) per configuration.",
                lambda a: a.compile_times,
                records("inference", ["compile_s"]),
                drop=("device",),
            ),
            Table(
                "break_even",
                "Images (and calls) until the faster side's compile time is paid back against the "
                "other side; ∞: the slower side never pays back.",
                lambda a: a.break_even,
                records("inference", ["compile_s", "throughput_img_s"]),
                when=_nonempty("break_even"),
                otherwise="No pair with compile times on both sides, so no break-even.",
            ),
        ),
        empty=_empty("compile_times"),
        empty_note="No compile time was recorded in this run.",
    ),
    Section(
        "Energy per image",
        "Energy counter (NVML total energy on GPUs, RAPL on CPUs) read around the throughput "
        "measurement, divided by the images processed.",
        (
            Figure(
                "energy_per_image",
                "Energy per image",
                "Joules per image over the throughput measurement on {devices}.",
                lambda a: charts.by_batch(a.energy, "energy_j_per_img", "joules per image"),
            ),
            Table(
                "energy",
                "Energy per image (J).",
                lambda a: a.energy,
                records("inference", ["energy_j_per_img"]),
                drop=("device",),
            ),
        ),
        empty=_empty("energy"),
        empty_note=_energy_note,
    ),
    Section(
        "Roofline and MFU",
        literal(f"Classification rule: {roofline.RULE}"),
        (
            Note(
                "No FLOP counts were recorded in this run, so there is no roofline.",
                when=_empty("points"),
            ),
            Note(
                "No calibration of {devices} in this run or in the index (02_calibrate did not "
                "run): without measured ceilings no configuration can be placed on a roofline and "
                "no MFU can be computed.",
                when=lambda a: not a.points.empty and a.ceilings.empty,
            ),
            Each(_rooflines),
            Table(
                "roofline",
                "Achieved TFLOP/s, MFU (achieved ÷ the device's ceiling: the best peak matmul "
                "any framework measured at that precision and thread count), framework "
                "efficiency (achieved ÷ the framework's own measured peak), intensity and the "
                "regime each configuration falls in.",
                lambda a: a.points,
                records(None, ["achieved_tflops", "peak_matmul_tflops", "copy_bandwidth_gbs"]),
                drop=("device",),
                when=_nonempty("points"),
            ),
            Each(lambda a: [Note(literal(text)) for text in a.bound_share_lines]),
            Table(
                "ceilings",
                "Measured ceilings per device, precision and (on a CPU) thread count, and the run "
                "each was measured in.",
                lambda a: a.ceilings,
                records("calibration"),
                when=_nonempty("ceilings"),
            ),
        ),
        name="roofline",
    ),
    Section(
        "MFU",
        "Model FLOP utilisation of every configuration with a FLOP count, inference and "
        "training: achieved TFLOP/s ÷ the device's ceiling, the best peak matmul TFLOP/s that "
        "02_calibrate measured through any framework on the same device and precision (and, on "
        "a CPU, thread count), one ceiling for both frameworks. Framework efficiency divides by "
        "the framework's own measured peak instead: where that is far below the device's, the "
        "framework's kernel path at that precision is slow there, and a note says so.",
        (
            Each(_mfu_notes),
            Table(
                "mfu",
                "MFU per configuration: median achieved TFLOP/s over trials ÷ the device's "
                "ceiling at that precision and thread count (the framework that reached it, and "
                "the run it was measured in); framework efficiency: the same ÷ the framework's "
                "own peak there.",
                lambda a: a.mfu.dropna(subset=["mfu"]),
                records(None, ["achieved_tflops", "peak_matmul_tflops"]),
                drop=(
                    "mode",
                    "device",
                    "ceiling_campaign",
                    "ceiling_cell",
                    "framework_ceiling_campaign",
                    "ceiling_shared",
                    "channels_last",
                ),
                when=lambda a: a.mfu.mfu.notna().any(),
            ),
            Note(
                "No achieved FLOP/s was recorded in this run, so there is no MFU.",
                when=_empty("mfu"),
            ),
        ),
        name="mfu",
    ),
    Section(
        "CNN vs Transformer",
        "Where each framework wins, by architecture.",
        (
            Figure(
                "cnn_vs_transformer",
                "Who wins, by architecture",
                "JAX ÷ PyTorch throughput with its 95% interval (as in the ratio matrix) per "
                "model and batch size, best modes and defaults, on {devices}; right of the "
                "dashed line JAX is faster.",
                lambda a: charts.kind_chart(a.matrix, a.kinds),
            ),
            Table(
                "by_architecture",
                "Wins, equivalences, undecided ratios and the geometric-mean JAX ÷ PyTorch ratio per architecture.",
                lambda a: a.kind_table,
                records("inference", ["throughput_img_s"]),
            ),
        ),
        empty=_empty("matrix"),
        empty_note="No comparison to split by architecture.",
    ),
    Section(
        "Training",
        "Training speed with every step synced (each framework at its default and best "
        "practice), then the proof that both frameworks train the same function: per-step loss "
        "parity from the same weights on the same batches, and convergence on real data.",
        (
            Note("No training records in this run.", when=_empty("training")),
            Figure(
                "training_ratio_matrix",
                "JAX ÷ PyTorch training throughput",
                "Median training images/s of JAX divided by PyTorch's (batch size over the synced "
                "step time), on {devices}; 95% bootstrap interval over steps (or trials, with "
                "three or more); ≈ marks equivalent within ±5%, ? inconclusive, (1 run) within "
                "one run.",
                _ratio_heatmap("train_matrix"),
                when=_nonempty("train_matrix"),
            ),
            Table(
                "training_ratio_matrix",
                "JAX ÷ PyTorch training throughput with 95% interval and the winner.",
                lambda a: a.train_matrix,
                records("training", ["throughput_img_s"]),
                drop=("device",),
                when=_nonempty("train_matrix"),
            ),
            Figure(
                "training_throughput",
                "Training throughput vs batch size",
                "Median training images/s over synced steps with its 95% bootstrap interval, per "
                "framework and mode; both axes logarithmic.",
                _throughput("train_samples"),
                when=_nonempty("train_speed"),
            ),
            Figure(
                "training_memory",
                "Training peak memory vs batch size",
                "Peak memory over the timed training steps (torch allocator or XLA memory_stats "
                "on a GPU; process peak RSS on a CPU, which includes the runtime), GB = 10⁹ "
                "bytes.",
                lambda a: charts.by_batch(a.train_memory, "peak_mem_gb", "peak memory (GB)"),
                when=lambda a: not a.train_speed.empty and not a.train_memory.empty,
            ),
            Table(
                "training_speed",
                "Training step time (p50, p95), images/s, compile time, peak memory and energy "
                "per step (median over trials).",
                lambda a: a.train_speed,
                records("training", tables.TRAINING_SPEED),
                drop=("device",),
                when=_nonempty("train_speed"),
            ),
            Figure(
                "training_parity",
                "Loss-curve parity",
                "Per-step training loss of PyTorch (eager) and JAX (jit) from the same ported "
                "weights on the same batches, fp32 with TF32 off, dropout off; the panel title "
                "gives the largest relative difference over the steps (the bar is 1e-3).",
                lambda a: charts.parity_chart(a.parity_curves),
                when=_nonempty("parity_curves"),
            ),
            Table(
                "training_parity",
                "Largest relative difference, JAX against PyTorch: per-step loss, parameters and "
                "BatchNorm statistics after the last step.",
                lambda a: a.parity,
                records("training", tables.PARITY_METRICS),
                when=_nonempty("parity_curves"),
            ),
            Figure(
                "training_convergence",
                "Convergence",
                "Train loss per step and validation top-1 per epoch, both frameworks from the same "
                "weights, batches and learning-rate schedule (dropout on, each side its own "
                "masks).",
                lambda a: charts.convergence_chart(a.convergence_curves),
                when=_nonempty("convergence_curves"),
            ),
            Table(
                "training_convergence",
                "Validation top-1 (%) after the last epoch and mean train loss over the last "
                "epoch.",
                lambda a: a.convergence,
                records("training", tables.CONVERGENCE_METRICS),
                when=_nonempty("convergence_curves"),
            ),
        ),
    ),
    Section(
        "Memory-saving methods",
        "Peak memory and iteration time per method of one training step (12_memory): the plain "
        "eager step (none), the traced step (graph), our μ-TWO plan at several budgets "
        "(mu_two@f: only f of the activation memory may stay at the peak), "
        "torch.utils.checkpoint on segments of k blocks and on sqrt(n) segments, and "
        "torch.compile's activation_memory_budget against our rewritten graph, compiled. The "
        "activation memory is the unplanned graph's activation high-water mark; "
        "activation_saved_pct is the peak a method saves against the eager step as a share of "
        "it. Swap plans (mu_two_swap@f) are simulated only, at the bandwidth named.",
        (
            Each(lambda a: [Note(literal(t)) for t in memory_curve.sentences(a.memory_curve)]),
            Figure(
                "memory_curve",
                "Memory-time curve",
                "Measured peak memory against iteration time, one line per method; the "
                "horizontal rule is the time's 95% t-interval over trials (each trial a fresh "
                "process). Eager and compiled methods are drawn in separate panels.",
                lambda a: memory_curve.curve_chart(a.memory_curve),
                when=lambda a: not a.memory_curve.empty and "time_low" in a.memory_curve,
            ),
            Table(
                "memory_curve",
                "Per method: peak memory, activation memory saved, iteration time (geometric "
                "mean over trials with its interval), overhead against the eager step paired by "
                "trial (with its interval), the simulator's errors and the float64 proof.",
                lambda a: a.memory_curve,
                records("memory"),
                when=_nonempty("memory_curve"),
            ),
            Each(
                lambda a: [
                    Note(literal(t))
                    for t in memory_breakdown.breakdown_sentences(a.memory_breakdown)
                ]
            ),
            Figure(
                "memory_breakdown",
                "What the peak is made of, against batch size",
                "The step's memory at its peak by part (parameters with buffers, gradients, "
                "optimizer state, activations, other), for the unplanned traced step and for our "
                "plan at its smallest budget, per batch size: the simulator's parts at its peak "
                "(median over trials), whose total is the measured peak to within the "
                "simulator's peak error above.",
                lambda a: memory_breakdown.parts_chart(a.memory_breakdown),
                when=lambda a: not a.memory_breakdown.empty,
            ),
            Table(
                "memory_breakdown",
                "The peak's parts in MiB per model, batch size and plan, with the activations' "
                "share of the peak.",
                lambda a: memory_breakdown.peak_shares(a.memory_breakdown),
                records("memory", [memory_breakdown.METRIC]),
                when=lambda a: not a.memory_breakdown.empty,
            ),
            Table(
                "memory_methods",
                "Memory-method metrics per mode.",
                lambda a: a.memory_methods,
                records("memory"),
            ),
            Figure(
                "memory_methods",
                "Peak memory by method",
                "Peak memory of one training iteration per memory-saving method, per framework.",
                lambda a: charts.by_mode_bars(
                    a.memory_methods, "peak_mem_bytes", "peak memory (bytes)"
                ),
                when=lambda a: MEMORY_METHOD_COLUMNS <= set(a.memory_methods.columns),
            ),
        ),
        empty=lambda a: a.memory_methods.empty or "mode" not in a.memory_methods,
        empty_note="No memory-method records in this run.",
        name="memory",
    ),
    Section(
        "Validation",
        "Both frameworks compute the same function: output and gradient agreement, FLOP and "
        "parameter counts.",
        (
            Table(
                "validation",
                "Validation metrics per model.",
                lambda a: a.validation,
                records("validation"),
            ),
        ),
        empty=_empty("validation"),
        empty_note="No validation records in this run.",
    ),
    Section(
        "Distributed training",
        "Each strategy on 1 and N worker processes (13_distributed): step time between barriers "
        "(the slowest rank's), the share of it spent on communication (synced step against a "
        "compute-only step), weak-scaling efficiency (throughput at N over N times the "
        "throughput at 1, the batch per worker fixed), the state each rank holds, and the "
        "all-reduce bus bandwidth by message size (busbw = algbw x 2(n-1)/n, as nccl-tests). "
        "Every strategy is first proven to train the one-process function in float64 (losses "
        "within 1e-9 of both frameworks' references).",
        (
            Table(
                "distributed",
                "Step time, communication share, scaling efficiency and per-rank memory.",
                lambda a: a.distributed,
                records("distributed", tables.DISTRIBUTED_METRICS),
                when=_nonempty("distributed"),
            ),
            Table(
                "distributed_parity",
                "The float64 gate: largest relative loss difference against the one-process "
                "references.",
                lambda a: a.distributed_parity,
                records("distributed", tables.DISTRIBUTED_PARITY_METRICS),
                when=_nonempty("distributed_parity"),
            ),
            Figure(
                "allreduce_busbw",
                "All-reduce bus bandwidth",
                "One fp32 all-reduce per message size at the largest world size.",
                lambda a: charts.busbw_chart(a.busbw),
                when=_nonempty("busbw"),
            ),
        ),
        empty=lambda a: a.distributed.empty and a.distributed_parity.empty,
        empty_note="No distributed records in this run.",
        name="distributed",
    ),
    Section(
        "Web audio",
        "One wav2vec2 speech encoder (random weights from transformers' config) on the same audio "
        "in PyTorch eager, JAX jit, native ONNX Runtime and onnxruntime-web in Chromium "
        "(14_web_audio). The real-time factor is the median latency / the audio's seconds: below "
        "1 keeps up with a microphone. Every runtime's output is held to PyTorch's on the same "
        "fp32 input (max |diff| / max |PyTorch|, sanity bound 1e-4); the Flax twin's float64 "
        "proof is the gate. All runtimes of a thread count share one cell, timed one after the "
        "other in a single trial, so these ratios carry no interval and no A/A check.",
        (
            Each(_web_audio_notes),
            Figure(
                "web_audio_rtf",
                "Real-time factor by runtime and audio length",
                "Median latency / audio seconds per runtime, audio length and thread count; lower "
                "is faster, below 1 keeps up. Software WebGPU (SwiftShader) is a correctness "
                "check, not a GPU's speed.",
                lambda a: audio.rtf_chart(a.web_audio),
                when=_nonempty("web_audio"),
            ),
            Table(
                "web_audio",
                "Latency p50/p95 (ms), real-time factor, load time (fetch and session creation, "
                "s), first call (s) and agreement with PyTorch, per runtime, thread count and "
                "audio length: medians over trials.",
                lambda a: a.web_audio,
                records("web_audio", audio.WEB_AUDIO_METRICS),
                when=_nonempty("web_audio"),
            ),
            Table(
                "web_audio_skipped",
                "Runtimes that did not run here, with the reason each gave (the browser's own "
                "words).",
                lambda a: a.web_audio_skipped,
                records("web_audio", ["latency_p50_ms"]),
                when=_nonempty("web_audio_skipped"),
            ),
            Table(
                "web_audio_capabilities",
                "The capability matrix: what each browser offered the page.",
                lambda a: a.web_audio_capabilities,
                records("web_audio", ["browser_capabilities"]),
                when=_nonempty("web_audio_capabilities"),
            ),
        ),
        empty=lambda a: a.web_audio.empty and a.web_audio_skipped.empty,
        empty_note="No web-audio records in this run.",
        name="web_audio",
    ),
    Section(
        "Prediction",
        "How well the predictor does on configurations no fit has seen (21_prediction: grouped "
        "hold-outs by model family, batch size above 16, thread count and CPU; MAPE, the share "
        "within ±10% and ±15%, the worst error, how often the 90% interval held, the correct "
        "JAX-vs-PyTorch winner where the measured gap is decided), and how much throughput the "
        "recommender gives up when it picks from predictions alone (22_recommend: median regret "
        "and the share of queries within 5%). Goals: MAPE ≤ 10% on unseen batch sizes, ≤ 15% on "
        "unseen families, a correct winner ≥ 90%, regret ≤ 5% in ≥ 90% of queries.",
        (
            Table(
                "prediction",
                "Scores per hold-out (21_prediction) and per kind of query (22_recommend).",
                lambda a: a.prediction,
                records("prediction"),
            ),
        ),
        empty=_empty("prediction"),
        empty_note="No prediction records in this run.",
    ),
    Section(
        "History",
        lambda a: a.history_line,
        (
            Table(
                "history",
                "Level changes in this campaign's histories up to run {run_id}: the metric and "
                "configuration, the run where the new level starts, the change and its p-value.",
                lambda a: a.changes,
                lambda a, changes: a.sources(a.meas[a.meas.metric.isin(changes.metric)]),
                when=_nonempty("changes"),
            ),
        ),
        empty=lambda a: not a.baseline_run_id,
        empty_note="No earlier run of this campaign.",
    ),
    Section(
        "Failed cells and out-of-memory batch sizes",
        "",
        (
            Table(
                "failures",
                "Records that are not ok, with the last line of their error.",
                lambda a: a.failures,
                own_paths,
                drop=("path",),
            ),
        ),
        empty=_empty("failures"),
        empty_note="Nothing failed.",
        part="failures",
    ),
    Section(
        "Retries",
        "Cells whose kernel died and that were run again with the campaign's retry environment.",
        (
            Table(
                "retries",
                "Retried cells, what changed, and the final status.",
                lambda a: a.retries,
                own_paths,
                drop=("path",),
            ),
        ),
        empty=_empty("retries"),
        empty_note="No cell was retried.",
        part="failures",
    ),
    Section(
        "Cells run on a shared machine",
        literal(
            "Cells during which other processes and the hypervisor took more than "
            f"{SHARED_FRACTION:.0%} of the CPU time. On a shared CPU, PyTorch's OpenMP threads "
            "wait on each other, so such a cell's times say more about the neighbours than about "
            "the framework."
        ),
        (
            Note(lambda a: sentences.contention_sentence(a.cells)),
            Table(
                "shared_machine",
                "Cells run on a shared machine: share of all CPU time taken by other processes and "
                "stolen by the hypervisor, and the 1-minute load average before the cell.",
                lambda a: a.shared,
                own_paths,
                drop=("path",),
                when=_nonempty("shared"),
            ),
        ),
        part="failures",
        name="shared_machine",
    ),
)


# --------------------------------------------------------------------------- the loop


def _ignore(_shown) -> None:
    pass


def _add(content: ReportContent, analysis: Analysis, item, show: Callable) -> None:
    if getattr(item, "when", None) is not None and not item.when(analysis):
        if getattr(item, "otherwise", ""):
            _add(content, analysis, Note(item.otherwise), show)
        return
    if isinstance(item, Each):
        for each in item.items(analysis):
            _add(content, analysis, each, show)
    elif isinstance(item, Note):
        text = fill(item.text, analysis)
        content.note(text)
        show(f"*{text}*")
    elif isinstance(item, Figure):
        chart = item.chart(analysis)
        show(content.figure(chart, item.name, item.title, fill(item.caption, analysis)))
    elif isinstance(item, Table):
        frame = item.frame(analysis)
        sources = item.sources(analysis, frame)
        if item.drop:
            frame = frame.drop(columns=list(item.drop))
        show(content.table(frame, item.name, fill(item.caption, analysis), sources))
    else:
        raise TypeError(f"not an outline item: {item!r}")


def add_section(
    content: ReportContent, analysis: Analysis, section: Section, show: Callable = _ignore
) -> None:
    """Start ``section`` in ``content`` and add its items, or its empty note; ``show`` sees the
    heading and notes as markdown, and each figure and table, for a notebook to display."""
    intro = fill(section.intro, analysis)
    content.section(section.title, intro, part=section.part, name=section.name)
    show(f"### {section.title}\n\n{intro}")
    if section.empty is not None and section.empty(analysis):
        _add(content, analysis, Note(section.empty_note), show)
        return
    for item in section.items:
        _add(content, analysis, item, show)


def summarise(content: ReportContent, analysis: Analysis) -> None:
    """The executive summary, methodology and limitations."""
    a = analysis
    training = sentences.training_sentences(a.train_matrix, a.parity, a.convergence)
    content.summary = sentences.executive_summary(
        a.matrix,
        a.kind_table,
        a.history_line,
        a.failures,
        a.retries,
        training,
        sentences.shared_machine_sentence(a.shared, a.cells),
        a.trust_summary,
    )
    content.methodology = sentences.methodology(
        a.run, a.meas, a.cells, [a.samples, a.train_samples]
    )
    content.limitations = sentences.limitations(a.samples, a.meas)


def build(content: ReportContent, analysis: Analysis, show: Callable = _ignore) -> None:
    """Every section of SECTIONS in order, then the summary: the whole report's content."""
    charts.use_theme()
    for section in SECTIONS:
        add_section(content, analysis, section, show)
    summarise(content, analysis)
