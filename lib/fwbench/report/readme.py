"""``fwbench readme CAMPAIGN``: the README's results block, written from a built report.

The README quotes one reference run. Copied by hand, the quote drifts from the report it cites;
here it is generated from ``report/<campaign>/`` (its ``content.json`` and ``tables/*.csv``): which
run, the contention reading, the JAX ÷ PyTorch ratios, training, MFU, the trust figures and the
why-sentences. Only the text between the
two marker lines is rewritten, and rewriting it again from the same report changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from fwbench.report import sections
from fwbench.vocab import model_label, series_label

BEGIN = "<!-- results:start -->"
END = "<!-- results:end -->"


class ReadmeError(ValueError):
    """Bad input to ``fwbench readme``: no README, no markers, or no report to quote."""


def _link(target: Path, readme_dir: Path) -> str:
    return Path(os.path.relpath(Path(target).resolve(), Path(readme_dir).resolve())).as_posix()


def _table(tables: Path, name: str) -> pd.DataFrame:
    path = tables / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ratio_cell(r) -> str:
    text = f"{r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    return f"{text} (tie)" if r.winner == "tie" else text


def modes_label(r) -> str:
    return f"JAX {r.jax_variant} vs PyTorch {r.torch_variant}"


def percent(ratio: float) -> str:
    """An MFU as a percentage with three significant digits, trailing zeros kept."""
    value = 100 * ratio
    return f"{value:.0f}%" if value >= 100 else f"{value:.1f}%" if value >= 10 else f"{value:.2f}%"


def _comparison_groups(matrix: pd.DataFrame):
    """Per device and precision: one group when best modes are the defaults everywhere, else two."""
    for (device, precision), rows in matrix.groupby(["device_name", "precision"], sort=True):
        best, defaults = rows[rows.comparison == "best"], rows[rows.comparison == "defaults"]
        key = ["model", "batch_size", "jax_variant", "torch_variant"]
        same = best[key].reset_index(drop=True).equals(defaults[key].reset_index(drop=True))
        if same:
            yield device, precision, "best modes and defaults", best
        else:
            yield device, precision, "best modes", best
            if not defaults.empty:
                yield device, precision, "defaults", defaults


def inference_part(matrix: pd.DataFrame, report_link: str) -> list[str]:
    if matrix.empty:
        return ["No inference configuration was measured with both frameworks in this run."]
    parts = [
        "Inference: JAX ÷ PyTorch median images/s with a 95% bootstrap interval; below 1, PyTorch "
        f"is faster; (tie): the interval contains 1 ([comparison matrix]({report_link}"
        "#comparison-matrix))."
    ]
    for device, precision, label, rows in _comparison_groups(matrix):
        pairs = rows[["jax_variant", "torch_variant"]].drop_duplicates()
        uniform = len(pairs) == 1
        modes = f": {modes_label(next(pairs.itertuples()))}" if uniform else ""
        batches = sorted({int(b) for b in rows.batch_size})
        header = ["model", *([] if uniform else ["modes"]), *(f"batch {b}" for b in batches)]
        body = []
        for model, group in rows.groupby("model", sort=True):
            cells = {int(r.batch_size): ratio_cell(r) for r in group.itertuples()}
            row = [model_label(model)]
            if not uniform:
                variants = group[["jax_variant", "torch_variant"]].drop_duplicates()
                row.append("; ".join(map(modes_label, variants.itertuples())))
            body.append(row + [cells.get(b, "") for b in batches])
        parts.append(f"{precision} on {device}, {label}{modes}:")
        parts.append(_markdown(header, body))
    return parts


def training_part(matrix: pd.DataFrame, speed: pd.DataFrame, report_link: str) -> list[str]:
    if matrix.empty:
        return []
    step = {}
    if not speed.empty and "step_time_p50_ms" in speed:
        for r in speed.itertuples():
            key = (r.model, r.device_name, r.precision, int(r.batch_size), r.framework, r.variant)
            step[key] = r.step_time_p50_ms
    rows = matrix[matrix.comparison == "best"]
    body = []
    for r in rows.sort_values(["model", "device_name", "precision", "batch_size"]).itertuples():
        base = (r.model, r.device_name, r.precision, int(r.batch_size))
        torch_ms = step.get((*base, "torch", r.torch_variant))
        jax_ms = step.get((*base, "jax", r.jax_variant))
        body.append(
            [
                model_label(r.model),
                str(int(r.batch_size)),
                r.precision,
                modes_label(r),
                ratio_cell(r),
                "" if pd.isna(torch_ms) else f"{torch_ms:.0f}",
                "" if pd.isna(jax_ms) else f"{jax_ms:.0f}",
            ]
        )
    header = ["model", "batch", "precision", "modes (best)", "JAX ÷ PyTorch"]
    header += ["PyTorch ms/step", "JAX ms/step"]
    return [
        "Training, every step synced: JAX ÷ PyTorch images/s with a 95% bootstrap interval, and "
        f"the median step time ([training]({report_link}#training)):",
        _markdown(header, body),
    ]


def mfu_part(mfu: pd.DataFrame, section: dict | None, run_id: str, report_link: str):
    link = f"([MFU]({report_link}#mfu))"
    notes = [i["text"] for i in (section or {}).get("items", []) if i["kind"] == "note"]
    if mfu.empty:
        return [" ".join([f"MFU: none in this run {link}.", *notes])]
    sources = sorted(set(mfu.ceiling_run_id.astype(str)))
    where = ", ".join(
        "this run" if s == run_id else f"run `{s}` (this run did not calibrate)" for s in sources
    )
    batches = sorted({int(b) for b in mfu.batch_size})
    body = []
    keys = ["family", "model", "framework", "variant", "device_name", "precision"]
    for key, group in mfu.groupby(keys, sort=True):
        family, model, framework, variant, device, precision = key
        cells = {int(r.batch_size): percent(r.mfu) for r in group.itertuples()}
        label = series_label(framework, variant)
        body.append(
            [family, model_label(model), label, precision] + [cells.get(b, "") for b in batches]
        )
    header = ["family", "model", "framework · mode", "precision", *(f"batch {b}" for b in batches)]
    return [
        "MFU: achieved FLOP/s ÷ the peak matmul FLOP/s that 02_calibrate measured through the same "
        f"framework on the same device and precision, ceilings from {where} {link}:",
        _markdown(header, body),
        *notes,
    ]


def results_block(
    campaign: str, report_dir: Path, readme_dir: Path, out: Path, figures_dir: Path
) -> str:
    """The markdown between the markers, from report ``report_dir`` of ``campaign``."""
    try:
        content = sections.read(report_dir)
    except FileNotFoundError:
        raise ReadmeError(
            f"no report at {report_dir}: build it first with `fwbench report {campaign}`"
        ) from None
    if content["campaign"] != campaign:
        raise ReadmeError(f"{report_dir} is a report of campaign {content['campaign']!r}")
    tables = Path(report_dir) / sections.TABLES_DIR
    run_id = content["run_id"]
    report_link = _link(Path(report_dir) / "report.md", readme_dir)
    matrix = _table(tables, "ratio_matrix")
    devices = sorted(set(matrix.device_name)) if not matrix.empty else []
    shared = sections.section_by_name(content, "shared_machine") or {"items": []}
    contention = " ".join(i["text"] for i in shared["items"] if i["kind"] == "note")
    parts = [
        f"<!-- Written by `fwbench readme {campaign}` from {_link(report_dir, readme_dir)}/ "
        "(content.json and tables/); rebuild the report and run it again instead of editing. -->",
        f"**Campaign `{campaign}`, run `{run_id}`** ([report]({report_link}), [executed notebooks]"
        f"({_link(Path(out) / campaign / run_id, readme_dir)}/))"
        + (f", on {', '.join(devices)}" if devices else "")
        + f". {contention}".rstrip(),
    ]
    figure = Path(figures_dir) / "ratio_matrix.png"
    if figure.is_file():
        parts.append(
            f"![JAX ÷ PyTorch throughput ratio, run {run_id}]({_link(figure, readme_dir)})"
        )
    parts += inference_part(matrix, report_link)
    parts += training_part(
        _table(tables, "training_ratio_matrix"), _table(tables, "training_speed"), report_link
    )
    section = sections.section_by_name(content, "mfu")
    parts += mfu_part(_table(tables, "mfu"), section, run_id, report_link)
    parts += notes_part(content, "trust", "How far these ratios can be trusted", report_link)
    parts += notes_part(content, "why", "Why", report_link)
    return "\n\n".join(parts)


def notes_part(content: dict, name: str, heading: str, report_link: str) -> list[str]:
    """A section's generated notes as bullets (the trust figures, the why-sentences)."""
    section = sections.section_by_name(content, name)
    notes = [i["text"] for i in (section or {"items": []})["items"] if i["kind"] == "note"]
    if not notes:
        return []
    return [f"{heading} ([report]({report_link})):", "\n".join(f"- {n}" for n in notes)]


def replace_block(text: str, block: str, where: str = "README") -> str:
    """``text`` with everything between the marker lines replaced by ``block``."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.strip() == BEGIN]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ReadmeError(
            f"{where} needs one line {BEGIN} followed by one line {END} around its results "
            f"(found {len(starts)} and {len(ends)})"
        )
    head, tail = lines[: starts[0] + 1], lines[ends[0] :]
    return "".join(head) + block.rstrip("\n") + "\n" + "".join(tail)


def update_readme(
    campaign: str,
    readme: Path,
    out: Path,
    report_dir: Path | None = None,
    figures_dir: Path | None = None,
) -> bool:
    """Rewrite ``readme``'s results block from the report of ``campaign``; True if it changed.

    ``report_dir`` and ``figures_dir`` default to report/<campaign> and figures/<campaign> beside
    the README; ``out`` is the executed-notebook folder the block links to.
    """
    readme = Path(readme)
    if not readme.is_file():
        raise ReadmeError(f"{readme}: no such file")
    root = readme.parent
    text = readme.read_text()
    replace_block(text, "", str(readme))  # markers first: a README without them is bad input
    block = results_block(
        campaign,
        Path(report_dir or root / "report" / campaign),
        root,
        Path(out),
        Path(figures_dir or root / "figures" / campaign),
    )
    new = replace_block(text, block, str(readme))
    if new == text:
        return False
    tmp = readme.with_name(f".{readme.name}.tmp")
    tmp.write_text(new)
    os.replace(tmp, readme)
    return True
