"""Validation (01_validation): both frameworks compute the same function (outputs and gradients,
FLOPs and parameter counts).
"""

from __future__ import annotations

from fwbench.report.items import Section, Table, empty, records

VALIDATION = Section(
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
    empty=empty("validation"),
    empty_note="No validation records in this run.",
)


SECTIONS = (VALIDATION,)
