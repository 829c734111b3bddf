"""The working state one command works on, owned by one object: the executed-notebook folder
(``out``), its DuckDB index (derived from it) and the checkout the notebooks come from.

A command builds one ``Lab`` from its options (``Lab.at``) and calls one method: ``run`` (a
campaign's runs, each indexed as it ends), ``index``, ``ensure_index``, ``run_once`` (a quick
campaign executed and indexed, as ``predict`` calibrates) or ``report`` (20_analysis executed for
a run, then the report laid out). "Run a notebook, then index it, then read the index" is put
together here and nowhere else: this module is the only caller of ``db.ingest``, and the report
layer below it only reads results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fwbench.pipeline import runner
from fwbench.pipeline.campaign import Campaign, Cell
from fwbench.results import db
from fwbench.results.layout import make_slug
from fwbench.vocab import ANALYSIS_NOTEBOOK

# The report layer is imported where a report is built: a GPU node runs campaigns with
# `fwbench run --no-index` from a kit without the report's libraries (gpu/kit.txt).


class ReportError(ValueError):
    """Bad input to ``fwbench report`` (unknown campaign or run) or an analysis that failed."""


@dataclass(frozen=True)
class Lab:
    out: Path
    db_path: Path

    @classmethod
    def at(cls, out: str | Path | None = "executed", db_path: str | Path | None = None) -> Lab:
        """The folder ``out`` (default ``executed``) and its index: ``db_path``, else
        ``$FWBENCH_DB``, else ``OUT/fwbench.duckdb``."""
        out = Path(out or "executed")
        return cls(out, db.index_path(db_path, out))

    # ----------------------------------------------------------------------- the index

    def index(self, folder: Path | None = None, progress=None) -> dict:
        """Take the executed notebooks under ``folder`` (default: all of ``out``) into the index;
        the counts ``db.ingest`` returns (``db.IngestError`` for a run it refuses)."""
        return db.ingest(folder or self.out, self.db_path, progress=progress)

    def ensure_index(self, progress=None) -> str | None:
        """Build the index from ``out`` where it is missing (a fresh clone); the one line to fail
        with if neither exists, else None."""
        if self.db_path.exists():
            return None
        if not self.out.is_dir():
            return f"no index at {self.db_path} and no executed notebooks at {self.out}"
        self.index(progress=progress)
        return None

    # ----------------------------------------------------------------------- runs

    def run(self, campaign: Campaign, *, index: bool = True, on_run=None, **options) -> list:
        """Run the campaign's series (``runner.run_series`` with ``options``), each run indexed
        as it ends so that a series stopped half-way leaves its finished runs indexed;
        ``on_run(outcome, counts, refusal)`` hears of each (``counts`` None without ``index``,
        ``refusal`` the ingest's error or None). Returns the runs' outcomes."""

        def after_run(outcome) -> None:
            counts, refusal = None, None
            if index:
                try:
                    counts = self.index(outcome.run_dir)
                except db.IngestError as exc:
                    refusal = str(exc)
            if on_run is not None:
                on_run(outcome, counts, refusal)

        return runner.run_series(campaign, self.out, after_run=after_run, **options)

    def run_once(self, campaign: Campaign, only: str | None = None) -> Path:
        """One run of the cells ``only`` selects, indexed; its folder."""
        run_dir, _ = runner.run_campaign(campaign, self.out, only=only)
        self.index(run_dir)
        return run_dir

    # ----------------------------------------------------------------------- reports

    def report(
        self,
        campaign: str,
        run_id: str | None = None,
        *,
        baseline_run_id: str | None = None,
        into: str | None = None,
        publish: bool = False,
        report_dir: Path | None = None,
        figures_dir: Path | None = None,
        timeout: float | None = None,
    ) -> Path:
        """Execute the analysis for one run of ``campaign`` and lay out its report; returns
        report.md. Built under ``local/`` where git does not look, with the analysis notebook
        beside it, and the run only read; ``publish`` makes it the committed reference: the
        analysis runs as a cell of the run (under the output lock, recorded in its manifest),
        the index takes in its records and the report goes to ``report/`` and ``figures/``.
        ``into`` names the report (default: the campaign); ``report_dir`` and ``figures_dir``
        override where it goes."""
        from fwbench.publish import render
        from fwbench.report.tables import error_line

        if not self.db_path.exists():
            if not (self.out / campaign).is_dir():
                raise ReportError(
                    f"no runs of campaign {campaign!r}: {self.out / campaign} does not exist and "
                    f"there is no index at {self.db_path}"
                )
            try:
                self.index()
            except db.IngestError as exc:
                raise ReportError(str(exc)) from None
        run_id, baseline = self._resolve(campaign, run_id, baseline_run_id)
        run_dir = self.out / campaign / run_id
        if not (run_dir / "manifest.json").is_file():
            raise ReportError(
                f"the index knows run {run_id} but {run_dir} is missing; pass its --out"
            )
        root = render.repo_root()
        default_report, default_figures = render.report_dirs(root, into or campaign, publish)
        report_dir = Path(report_dir or default_report).resolve()
        figures_dir = Path(figures_dir or default_figures).resolve()
        cell = self._analysis_cell(
            campaign, run_id, baseline, root, (report_dir, figures_dir), publish
        )
        # unpublished, the analysis notebook sits beside its report and the run is only read
        home = run_dir if publish else report_dir
        try:
            result = runner.execute_into_run(
                cell, self.out, run_dir, timeout, None if publish else home
            )
        except runner.RunnerBusy as exc:
            raise ReportError(str(exc)) from None
        if publish:
            self.index(run_dir)
        executed = home / result.path
        if result.status != "ok":
            raise ReportError(
                f"the analysis notebook {result.status}: {error_line(result.error)} "
                f"(see {executed})"
            )
        return render.render(report_dir, out=self.out, analysis_notebook=executed)

    def _resolve(self, campaign: str, run_id: str | None, baseline: str | None) -> tuple:
        from fwbench.report.tables import resolve_runs

        con = db.connect(self.db_path, read_only=True)
        try:
            return resolve_runs(con, campaign, run_id or "", baseline or "")
        except LookupError as exc:
            raise ReportError(str(exc)) from None
        finally:
            con.close()

    def _analysis_cell(self, campaign, run_id, baseline, root, dirs, publish) -> Cell:
        from fwbench.report import charts

        report_dir, figures_dir = dirs
        params = {
            "campaign": campaign,
            "run_id": run_id,
            "baseline_run_id": baseline,
            "db_path": _from_root(self.db_path.resolve(), root),
            "figures_dir": _from_root(figures_dir, root),
            "report_dir": _from_root(report_dir, root),
            "figure_formats": ",".join(
                charts.PUBLISHED_FORMATS if publish else charts.FIGURE_FORMATS
            ),
        }
        return Cell(
            notebook=ANALYSIS_NOTEBOOK,
            notebook_path=root / "notebooks" / f"{ANALYSIS_NOTEBOOK}.py",
            slug=make_slug(params, ["campaign"], 0, 1),
            parameters=params,
        )


def _from_root(path: Path, root: Path) -> str:
    """A path inside the repository relative to its root (the notebook resolves it there), so the
    executed notebook committed as evidence names no machine's folders; others stay absolute."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
