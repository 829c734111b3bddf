"""Distributed training (13_distributed): each strategy on one and N processes, proven in float64
first, and the collectives' bus bandwidth.
"""

from __future__ import annotations

from fwbench.report import charts, tables
from fwbench.report.items import Each, Figure, Section, Table, empty, nonempty, records, throughput


DISTRIBUTED = Section(
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
            when=nonempty("distributed"),
        ),
        Table(
            "distributed_parity",
            "The float64 gate: largest relative loss difference against the one-process "
            "references.",
            lambda a: a.distributed_parity,
            records("distributed", tables.DISTRIBUTED_PARITY_METRICS),
            when=nonempty("distributed_parity"),
        ),
        Figure(
            "allreduce_busbw",
            "All-reduce bus bandwidth",
            "One fp32 all-reduce per message size at the largest world size.",
            lambda a: charts.busbw_chart(a.busbw),
            when=nonempty("busbw"),
        ),
    ),
    empty=lambda a: a.distributed.empty and a.distributed_parity.empty,
    empty_note="No distributed records in this run.",
    name="distributed",
)


SECTIONS = (DISTRIBUTED,)
