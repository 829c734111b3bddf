"""What a report's outline is made of: sections and their items (figures, tables, notes), the
text templates they fill from an ``Analysis``, and the small functions every family's sections
share (whose notebooks a table cites, when an item shows).

A ``Section`` names its title and intro and lists its items, each with the function that computes
it from one run's records and its caption. A section with no data for its subject shows its
stated ``empty_note`` instead of its items; an item with a ``when`` shows only where that holds,
and its ``otherwise`` note where it does not. Captions, intros and notes are ``str.format``
templates over the analysis's attributes ("on {devices}"), or functions of the analysis where the
text is computed. Each family's sections live in ``families/<family>/<family>_report.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fwbench.report import charts

# an ``outline.Analysis``; named loosely here, since the outline imports every family's sections
Analysis = Any

Text = str | Callable[[Analysis], str]
Test = Callable[[Analysis], bool]
_Sources = Callable[[Analysis, pd.DataFrame], list[str]]


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
    sources: _Sources  # the executed notebooks behind the rows, from the frame before ``drop``
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
    when: Test | None = None  # left out of the report, heading and all, where this is false


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


def records(family: str | None = None, metrics: Sequence[str] = (), prefix: str = "") -> _Sources:
    """The notebooks behind a family's records of some metrics (all families when None)."""

    def paths(analysis: Analysis, _frame: pd.DataFrame) -> list[str]:
        rows = analysis.meas if family is None else analysis.family(family)
        if metrics:
            rows = rows[rows.metric.isin(metrics)]
        if prefix:
            rows = rows[rows.metric.str.startswith(prefix)]
        return analysis.sources(rows)

    return paths


def pooled(family: str, metrics: Sequence[str] = ()) -> _Sources:
    """The notebooks behind a family's records of some metrics in every run the verdicts pool:
    what a pooled number links, so that each run's trials can be traced."""

    def paths(analysis: Analysis, _frame: pd.DataFrame) -> list[str]:
        rows = analysis.pool_meas if not analysis.pool_meas.empty else analysis.meas
        rows = rows[rows.family == family]
        if metrics:
            rows = rows[rows.metric.isin(metrics)]
        return analysis.pooled_sources(rows)

    return paths


def own_paths(_analysis: Analysis, frame: pd.DataFrame) -> list[str]:
    """Tables of cells carry their notebook's path in a column of their own."""
    return list(frame.path.dropna())


_Frame = str | Callable[[Analysis], pd.DataFrame]


def per_analysis(make: Callable[[Analysis], Any]) -> Callable[[Analysis], Any]:
    """A family's own frame of an analysis, computed once per analysis (``Analysis.once``):
    the family's report module owns it, and ``Analysis`` keeps only what families share."""

    @functools.wraps(make)
    def once(analysis: Analysis):
        return analysis.once(make)

    return once


def _frame(source: _Frame) -> Callable[[Analysis], pd.DataFrame]:
    """A frame by the analysis's attribute name, or a family's ``per_analysis`` function."""
    return source if callable(source) else (lambda analysis: getattr(analysis, source))


def nonempty(source: _Frame) -> Test:
    frame = _frame(source)
    return lambda analysis: not frame(analysis).empty


def empty(source: _Frame) -> Test:
    frame = _frame(source)
    return lambda analysis: frame(analysis).empty


def ratio_heatmap(source: _Frame) -> Callable[[Analysis], object]:
    frame = _frame(source)
    return lambda analysis: charts.ratio_heatmap(frame(analysis))


def throughput(source: _Frame) -> Callable[[Analysis], object]:
    frame = _frame(source)
    return lambda analysis: charts.by_batch(
        frame(analysis), "median", "images/s (median)", ci=("ci_low", "ci_high")
    )
