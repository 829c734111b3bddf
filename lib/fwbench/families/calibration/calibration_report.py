"""Calibration (02_calibrate): the ceilings the roofline and MFU divide by, one roofline per
device, and every configuration's model FLOP utilisation.
"""

from __future__ import annotations

from fwbench.report import charts, roofline
from fwbench.report.items import (
    Each,
    Figure,
    Note,
    Section,
    Table,
    empty,
    literal,
    nonempty,
    records,
)


def _rooflines(analysis) -> list:
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


def _mfu_notes(analysis) -> list:
    # the run's CPU's vector extensions say why a framework's kernel path is slow on it
    isa = ((analysis.run.get("environment") or {}).get("cpu") or {}).get("isa")
    notes = roofline.mfu_notes(analysis.mfu, analysis.run_id, isa)
    return [Note(literal(text)) for text in notes]


ROOFLINE = Section(
    "Roofline and MFU",
    literal(f"Classification rule: {roofline.RULE}"),
    (
        Note(
            "No FLOP counts were recorded in this run, so there is no roofline.",
            when=empty("points"),
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
            when=nonempty("points"),
        ),
        Each(lambda a: [Note(literal(text)) for text in a.bound_share_lines]),
        Table(
            "ceilings",
            "Measured ceilings per device, precision and (on a CPU) thread count, and the run "
            "each was measured in.",
            lambda a: a.ceilings,
            records("calibration"),
            when=nonempty("ceilings"),
        ),
    ),
    name="roofline",
)


MFU = Section(
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
            when=empty("mfu"),
        ),
    ),
    name="mfu",
)


SECTIONS = (ROOFLINE, MFU)
