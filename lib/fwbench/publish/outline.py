"""The report's outline: every family's sections in the report's order, the ``Analysis`` they are
computed from, and the one loop that fills a ``ReportContent``.

What a section is made of is ``report/items.py``; each family's sections are
``families/<family>/<family>_report.py`` (``catalog``). notebooks/20_analysis.py calls ``build``, and
``fwbench report`` runs that notebook, so what the notebook shows and what the report says come from the same loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import pandas as pd

from fwbench.families.analysis import analysis_report
from fwbench.families.calibration import calibration_report
from fwbench.families.distributed import distributed_report
from fwbench.families.inference import inference_report
from fwbench.families.memory import memory_report
from fwbench.families.prediction import prediction_report
from fwbench.families.training import training_report
from fwbench.families.validation import validation_report
from fwbench.families.web_audio import web_audio_report, web_audio_tables
from fwbench.publish import catalog
from fwbench.report import charts, regressions, roofline, sentences, tables, trust, why
from fwbench.report.items import Each, Figure, Note, Section, Table, fill
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
    # verdicts.Between: the CPU model's shared between-run term (trust.shared_between), or None
    imported: object = None
    # every run's round noise on this CPU model over this campaign's arms (trust.round_noise_on_this_cpu)
    round_noise: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the paired-ratio regression detector scored on this CPU model's real run-to-run residuals
    paired_detector: dict = field(default_factory=dict)
    # per-op profiles of ``<campaign>_why`` on this CPU model (why.companion_why), for the
    # sides this run did not profile, and the run and cells they come from
    why_run_id: str = ""
    why_meas: pd.DataFrame = field(default_factory=pd.DataFrame)
    why_cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    # every pooled run's measurements with its cells' readings (column run_id), for families
    # whose verdicts read their own metrics' rounds
    pool_meas: pd.DataFrame = field(default_factory=pd.DataFrame)
    # every pooled run's cells, so that a number pooled over runs links all their notebooks
    pool_cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    # a family's own frames (items.per_analysis), each computed once
    computed: dict = field(default_factory=dict, repr=False, compare=False)

    def once(self, make: Callable):
        """``make(self)``, computed on first use: how a family's report module keeps its own
        frames of this run without this class listing them."""
        if make not in self.computed:
            self.computed[make] = make(self)
        return self.computed[make]

    def sources(self, rows: pd.DataFrame) -> list[str]:
        cells = self.cells
        if not self.why_cells.empty:
            cells = pd.concat([cells, self.why_cells], ignore_index=True)
        return tables.source_paths(rows, cells)

    def pooled_sources(self, rows: pd.DataFrame) -> list[str]:
        """The notebooks behind ``rows`` of ``pool_meas``: every pooled run's, not this run's
        alone."""
        cells = self.pool_cells if not self.pool_cells.empty else self.cells
        return tables.source_paths(rows, cells)

    def family(self, name: str) -> pd.DataFrame:
        if name == "profile":
            return self.profiles
        return self.meas[self.meas.family == name]

    @cached_property
    def profiles(self) -> pd.DataFrame:
        """This run's profile records, and the companion campaign's for the sides it lacks."""
        own = self.meas[self.meas.family == "profile"]
        return why.with_borrowed(own, self.why_meas)

    @cached_property
    def borrowed_line(self) -> list[str]:
        """Where borrowed profiles come from; nothing where the run borrowed none."""
        if self.why_meas.empty:
            return []
        borrowed = self.profiles[self.profiles.campaign != self.campaign]
        if borrowed.empty:
            return []
        sides = len(borrowed[[*tables.CONFIG, *tables.SERIES]].drop_duplicates())
        return [why.borrowed_sentence(self.campaign, self.why_run_id, sides)]

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
        return inference_report.latency_at_smallest_batch(self.meas)

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
            pd.DataFrame()
            if self.matrix.empty
            else inference_report.break_even_table(self.matrix, self.meas)
        )

    @cached_property
    def energy(self) -> pd.DataFrame:
        return inference_report.energy_table(self.meas)

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
        return inference_report.kind_summary(self.matrix, self.kinds)

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
        return why.breakdown(self.profiles)

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
        return trust.aa_control(self.pool_samples, self.imported)

    @cached_property
    def stability(self) -> pd.DataFrame:
        return trust.calibration(self.pool_samples, self.run_id)

    @cached_property
    def equivalence_reach(self) -> dict:
        return trust.equivalence_reach(self.pool_samples, self.run_id, self.imported)

    @cached_property
    def stability_summary(self) -> dict:
        return trust.calibration_summary(
            self.stability, self.pool_samples, self.run_id, self.imported
        )

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
        return analysis_report.failures_table(self.meas, self.cells)

    @cached_property
    def retries(self) -> pd.DataFrame:
        return analysis_report.retries_table(self.cells)

    @cached_property
    def shared(self) -> pd.DataFrame:
        return analysis_report.shared_machine_table(self.cells)


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
    # each pooled run's measurements read once, for the samples and for the families' own rounds
    pool_cells = {run_id: cells} | {
        rid: tables.load_cells(con, campaign, rid) for rid in pool if rid != run_id
    }
    loaded = {run_id: meas} | {
        rid: tables.with_cell_readings(
            tables.load_measurements(con, campaign, rid), pool_cells[rid]
        )
        for rid in pool
        if rid != run_id
    }
    pool_samples = tables.pooled_samples(con, campaign, pool, loaded=loaded)
    pool_meas = pd.concat(loaded.values(), ignore_index=True)
    with_rounds = pool_samples.trials.notna() if not pool_samples.empty else []
    runs_with_rounds = pool_samples[with_rounds].run_id.nunique() if len(with_rounds) else 0
    # the CPU model's shared between-run term: a single run imports it, and a campaign whose own
    # runs fit a term of 0 takes it instead (verdicts.fit's floor)
    # every campaign's samples on this CPU model, read once: the shared between-run term, the
    # detector's residuals and the round-noise table all compare across campaigns
    on_cpu = tables.samples_on_cpu(con, run["environment"], until=run_id)
    repeated = trust.repeated_rounds(on_cpu) if runs_with_rounds else {}
    imported = trust.shared_between(repeated)
    why_run_id, why_meas, why_cells = why.companion_why(con, campaign, run["environment"])
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
        round_noise=trust.round_noise_on_this_cpu(con, on_cpu, pool_samples),
        paired_detector=trust.paired_detector(repeated),
        why_run_id=why_run_id,
        why_meas=why_meas,
        why_cells=why_cells,
        pool_meas=pool_meas,
        pool_cells=pd.concat(pool_cells.values(), ignore_index=True),
    )


# --------------------------------------------------------------------------- the outline's parts


# the report's order; a family the order does not name (a new one, found by ``catalog``) shows its
# sections after the families it names, before the run's own history
_PLACED: tuple[Section, ...] = (
    inference_report.COMPARISON,
    inference_report.PUBLISHED_SECTION,
    inference_report.TORCHAX,
    inference_report.THREE_WAY,
    inference_report.TUNING,
    inference_report.EXPERT,
    analysis_report.TRUST,
    analysis_report.ROUND_NOISE,
    inference_report.WHY,
    inference_report.THROUGHPUT,
    inference_report.LATENCY,
    inference_report.MEMORY,
    inference_report.COMPILE,
    inference_report.ENERGY,
    calibration_report.ROOFLINE,
    calibration_report.MFU,
    inference_report.KINDS,
    training_report.TRAINING,
    training_report.TIME_TO_ACCURACY,
    memory_report.METHODS,
    validation_report.VALIDATION,
    distributed_report.DISTRIBUTED,
    web_audio_report.WEB_AUDIO,
    prediction_report.PREDICTION,
)
_CLOSING: tuple[Section, ...] = (
    analysis_report.HISTORY,
    analysis_report.FAILURES,
    analysis_report.RETRIES,
    analysis_report.SHARED_MACHINE,
)
_UNPLACED = tuple(
    section
    for module in catalog.BY_FAMILY.values()
    for section in module.SECTIONS
    if not any(section is placed for placed in (*_PLACED, *_CLOSING))
)
SECTIONS: tuple[Section, ...] = (*_PLACED, *_UNPLACED, *_CLOSING)


# the families outside inference whose verdicts pair their own trials as rounds
TRIALS_AS_ROUNDS = (distributed_report, web_audio_tables)


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
    if section.when is not None and not section.when(analysis):
        return
    intro = fill(section.intro, analysis)
    content.section(section.title, intro, part=section.part, name=section.name)
    show(f"### {section.title}\n\n{intro}")
    if section.empty is not None and section.empty(analysis):
        _add(content, analysis, Note(section.empty_note), show)
        return
    for item in section.items:
        _add(content, analysis, item, show)


def _summarise(content: ReportContent, analysis: Analysis) -> None:
    """The executive summary, methodology and limitations."""
    a = analysis
    training = training_report.summary_sentences(a)
    content.summary = sentences.executive_summary(
        a.matrix,
        a.kind_table,
        a.history_line,
        a.failures,
        a.retries,
        [*training, *web_audio_report.summary_sentences(a)],
        sentences.shared_machine_sentence(a.shared, a.cells),
        a.trust_summary,
    )
    content.methodology = sentences.methodology(
        a.run, a.meas, a.cells, [a.samples, training_report.samples(a)]
    )
    # the families whose verdicts take trials as rounds count theirs beside inference's
    trials = [family.most_trials(a.meas) for family in TRIALS_AS_ROUNDS]
    content.limitations = sentences.limitations(a.samples, a.meas, trials)


def build(content: ReportContent, analysis: Analysis, show: Callable = _ignore) -> None:
    """Every section of SECTIONS in order, then the summary: the whole report's content."""
    charts.use_theme()
    for section in SECTIONS:
        add_section(content, analysis, section, show)
    _summarise(content, analysis)
