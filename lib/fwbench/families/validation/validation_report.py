"""Validation (01_validation): both frameworks compute the same function (outputs and gradients,
FLOPs and parameter counts).
"""

from __future__ import annotations

from fwbench.report import tables
from fwbench.report.items import Section, Table, empty, per_analysis, records


@per_analysis
def checks(analysis):
    return tables.family_table(analysis.meas, "validation")


VALIDATION = Section(
    "Validation",
    "Both frameworks compute the same function: output and gradient agreement, FLOP and "
    "parameter counts.",
    (
        Table(
            "validation",
            "Validation metrics per model.",
            checks,
            records("validation"),
        ),
    ),
    empty=empty(checks),
    empty_note="No validation records in this run.",
)


SECTIONS = (VALIDATION,)
