"""``fwbench readme CAMPAIGN``: a results block of the README, written from a built report.

The README quotes reference runs, one block per campaign. Copied by hand, a quote drifts from the
report it cites; here it is generated from ``report/<campaign>/`` (its ``content.json`` and
``tables/*.csv``): which run, the contention reading, the JAX ÷ PyTorch ratios, training, MFU,
the share of the roofline bound, the trust figures and the why-sentences. Only the text between
the campaign's two marker lines (``markers``) is rewritten, and rewriting it again from the same
report changes nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from fwbench.families.inference import inference_three_way
from fwbench.measure import verdicts
from fwbench.publish import catalog
from fwbench.report import sections
from fwbench.report.blocks import ReadmeError, rewrite_block
from fwbench.report.sections import markdown_table, notes_part, read_table
from fwbench.results import layout
from fwbench.vocab import (
    model_label,
    series_label,
    setting_words,
    threads_words,
)

# a run named by its id in a sentence ("of run" and the id), which the front page words otherwise
NAMED_RUN = re.compile(r"\brun `?\d{8}T\d{6}Z`?")


def _link(target: Path, readme_dir: Path) -> str:
    return Path(os.path.relpath(Path(target).resolve(), Path(readme_dir).resolve())).as_posix()


def _ratio_cell(r) -> str:
    """A ratio with its interval and, unless a framework is faster, the verdict's words. A table
    from a report built before verdicts pooled runs has no ``between_term`` column: its intervals are
    within one run, and say so."""
    text = f"{r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    if not isinstance(getattr(r, "between_term", None), str):
        return f"{text} (within one run)"
    note = verdicts.WORDS.get(r.winner)
    return f"{text} ({note})" if note else text


def _modes_label(r) -> str:
    return f"JAX {r.jax_variant} vs PyTorch {r.torch_variant}"


def percent(ratio: float) -> str:
    """An MFU as a percentage with three significant digits, trailing zeros kept."""
    value = 100 * ratio
    return f"{value:.0f}%" if value >= 100 else f"{value:.1f}%" if value >= 10 else f"{value:.2f}%"


def _comparison_groups(matrix: pd.DataFrame):
    """Per device, precision and threads: one group when best modes are the defaults everywhere,
    else two."""
    keys = ["device_name", "precision", "threads"]
    for (device, precision, threads), rows in matrix.groupby(keys, sort=True):
        best, defaults = rows[rows.comparison == "best"], rows[rows.comparison == "defaults"]
        key = ["model", "batch_size", "jax_variant", "torch_variant"]
        same = best[key].reset_index(drop=True).equals(defaults[key].reset_index(drop=True))
        setting = f"{precision} on {device}"
        if threads_words(threads):
            setting += f", {threads_words(threads)}"
        if same:
            yield setting, "best modes and defaults", best
        else:
            yield setting, "best modes", best
            if not defaults.empty:
                yield setting, "defaults", defaults


def interval_words(matrix: pd.DataFrame) -> str:
    """How the matrix's ratios and intervals were computed, in the words of the report."""
    kinds = set(matrix.interval) if "interval" in matrix else {"within-run"}
    paired = matrix[matrix.interval == "paired"] if "interval" in matrix else matrix.iloc[0:0]
    rounds = sorted({int(r) for r in paired.rounds}) if not paired.empty else []
    span = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}" if rounds else ""
    if "design" in matrix:
        # "; " between designs: one design's own words hold commas
        designs = "; ".join(sorted(set(matrix.design)))
        return f"95% intervals, design {designs}"
    words = {
        "paired": f"the geometric mean of rounds paired by trial, 95%, over {span} interleaved "
        "rounds of one run (within one run: no between-run term)",
        "within-run": "the ratio of median images/s with a 95% bootstrap interval over samples "
        "from one run (no between-run term)",
    }
    return "; where no trials pair, ".join(words[k] for k in ("paired", "within-run") if k in kinds)


def _inference_part(matrix: pd.DataFrame, report_link: str) -> list[str]:
    if matrix.empty:
        return ["No inference configuration was measured with both frameworks in this run."]
    parts = [
        f"Inference: JAX ÷ PyTorch images/s, {interval_words(matrix)}; below 1, PyTorch is faster; "
        f"a ratio with no faster framework carries its verdict's words "
        f"([comparison matrix]({report_link}#comparison-matrix))."
    ]
    for setting, label, rows in _comparison_groups(matrix):
        pairs = rows[["jax_variant", "torch_variant"]].drop_duplicates()
        uniform = len(pairs) == 1
        modes = f": {_modes_label(next(pairs.itertuples()))}" if uniform else ""
        batches = sorted({int(b) for b in rows.batch_size})
        header = ["model", *([] if uniform else ["modes"]), *(f"batch {b}" for b in batches)]
        body = []
        for model, group in rows.groupby("model", sort=True):
            cells = {int(r.batch_size): _ratio_cell(r) for r in group.itertuples()}
            row = [model_label(model)]
            if not uniform:
                variants = group[["jax_variant", "torch_variant"]].drop_duplicates()
                row.append("; ".join(map(_modes_label, variants.itertuples())))
            body.append(row + [cells.get(b, "") for b in batches])
        parts.append(f"{setting}, {label}{modes}:")
        parts.append(markdown_table(header, body))
    return parts


def _training_part(matrix: pd.DataFrame, speed: pd.DataFrame, report_link: str) -> list[str]:
    if matrix.empty:
        return []
    step = {}
    if not speed.empty and "step_time_p50_ms" in speed:
        for r in speed.itertuples():
            key = (r.model, r.device_name, r.precision, r.threads, int(r.batch_size))
            key += (r.framework, r.variant)
            step[key] = r.step_time_p50_ms
    rows = matrix[matrix.comparison == "best"]
    body = []
    for r in rows.sort_values(["model", "device_name", "precision", "batch_size"]).itertuples():
        base = (r.model, r.device_name, r.precision, r.threads, int(r.batch_size))
        torch_ms = step.get((*base, "torch", r.torch_variant))
        jax_ms = step.get((*base, "jax", r.jax_variant))
        body.append(
            [
                model_label(r.model),
                str(int(r.batch_size)),
                setting_words(r.precision, r.threads),
                _modes_label(r),
                _ratio_cell(r),
                "" if pd.isna(torch_ms) else f"{torch_ms:.0f}",
                "" if pd.isna(jax_ms) else f"{jax_ms:.0f}",
            ]
        )
    header = ["model", "batch", "setting", "modes (best)", "JAX ÷ PyTorch"]
    header += ["PyTorch ms/step", "JAX ms/step"]
    return [
        f"Training, every step synced: JAX ÷ PyTorch images/s, {interval_words(rows)}, and "
        f"the median step time ([training]({report_link}#training)):",
        markdown_table(header, body),
    ]


def _mfu_part(mfu: pd.DataFrame, section: dict | None, run_id: str, report_link: str):
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
    keys = ["family", "model", "framework", "variant", "device_name", "precision", "threads"]
    for key, group in mfu.groupby(keys, sort=True):
        family, model, framework, variant, _device, precision, threads = key
        cells = {int(r.batch_size): percent(r.mfu) for r in group.itertuples()}
        label = series_label(framework, variant)
        setting = setting_words(precision, threads)
        body.append(
            [family, model_label(model), label, setting] + [cells.get(b, "") for b in batches]
        )
    header = ["family", "model", "framework · mode", "setting", *(f"batch {b}" for b in batches)]
    return [
        "MFU: achieved FLOP/s ÷ the device's ceiling, the best peak matmul FLOP/s any framework's "
        f"02_calibrate reached on the same device, precision and threads, ceilings from {where} "
        f"{link}:",
        markdown_table(header, body),
        *notes,
    ]


def _brief_ratios(content: dict, tables: Path, matrix: pd.DataFrame, report_link: str) -> list:
    """The front page's ratios: a three-way campaign's three ways (its report has the trust
    figures), else the JAX ÷ PyTorch matrix and how far it can be trusted."""
    three_way = inference_three_way.readme_lines(read_table(tables, "three_way"), report_link)
    if three_way:
        return three_way
    trust = notes_part(content, "trust", "How far these ratios can be trusted", report_link)
    return _inference_part(matrix, report_link) + trust


def _family_lines(content: dict, tables: Path, report_link: str) -> list[str]:
    """Each family's own lines (a family report module's ``readme_part``), in the catalog's
    order (by family name)."""
    return [
        line
        for module in catalog.BY_FAMILY.values()
        if hasattr(module, "readme_part")
        for line in module.readme_part(content, tables, report_link)
    ]


def results_block(
    campaign: str,
    report_dir: Path,
    readme_dir: Path,
    out: Path,
    figures_dir: Path,
    into: str | None = None,
    brief: bool = False,
    ratios_only: bool = False,
) -> str:
    """The markdown between the markers, from report ``report_dir`` of ``campaign`` (built with
    ``fwbench report CAMPAIGN --into INTO`` when ``into`` is given). ``brief`` keeps the run line,
    the inference verdicts and the trust figures: the README's front page quotes no more, and the
    report has the rest. ``ratios_only`` keeps the run line and the verdicts' table (an earlier
    result the front page keeps for reference; its report has the trust figures)."""
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
    matrix = read_table(tables, "ratio_matrix")
    devices = sorted(set(matrix.device_name)) if not matrix.empty else []
    distributed = read_table(tables, "distributed")
    if not devices and "device_name" in distributed:
        devices = sorted(set(distributed.device_name))
    command = f"fwbench readme {campaign}{f' --into {into}' if into else ''}"
    command += " --brief" if brief else ""
    command += " --ratios-only" if ratios_only else ""
    # the front page names no run (brief or ratios only): the report it links to does
    parts = _opening(content, command, (report_dir, readme_dir, out), devices, brief or ratios_only)
    progress = progress_sentence(Path(out) / campaign / run_id / "manifest.json")
    if progress:
        parts.append(progress)
    if ratios_only:
        return NAMED_RUN.sub(
            "the newest run", "\n\n".join(parts + _inference_part(matrix, report_link))
        )
    families = _family_lines(content, tables, report_link)
    if brief:
        # a campaign without JAX-vs-PyTorch ratios (prediction) is quoted by its family's lines
        ratios = not matrix.empty or not read_table(tables, "three_way").empty
        parts += _brief_ratios(content, tables, matrix, report_link) if ratios else families
        # the front page names no run: the report it links to does
        return NAMED_RUN.sub("the newest run", "\n\n".join(parts))
    figure = Path(figures_dir) / "ratio_matrix.svg"
    if figure.is_file():
        parts.append(
            f"![JAX ÷ PyTorch throughput ratio, run {run_id}]({_link(figure, readme_dir)})"
        )
    if matrix.empty and families:
        # a campaign of other families: the inference parts would only say they are empty
        parts += notes_part(content, "trust", "How far these numbers can be trusted", report_link)
        return "\n\n".join(parts + families)
    parts += _inference_part(matrix, report_link)
    parts += _training_part(
        read_table(tables, "training_ratio_matrix"),
        read_table(tables, "training_speed"),
        report_link,
    )
    section = sections.section_by_name(content, "mfu")
    parts += _mfu_part(read_table(tables, "mfu"), section, run_id, report_link)
    parts += notes_part(content, "roofline", "Share of the roofline bound", report_link)
    parts += notes_part(content, "trust", "How far these ratios can be trusted", report_link)
    parts += notes_part(content, "why", "Why", report_link)
    return "\n\n".join(parts + families)


def _opening(content: dict, command: str, dirs: tuple, devices: list, brief: bool) -> list:
    """A block's first lines: what wrote it, and the campaign's run, its links, devices and
    contention reading."""
    report_dir, readme_dir, out = dirs
    campaign, run_id = content["campaign"], content["run_id"]
    report_link = _link(Path(report_dir) / "report.md", readme_dir)
    shared = sections.section_by_name(content, "shared_machine") or {"items": []}
    contention = " ".join(i["text"] for i in shared["items"] if i["kind"] == "note")
    return [
        f"<!-- Written by `{command}` from "
        f"{_link(report_dir, readme_dir)}/ "
        "(content.json and tables/); rebuild the report and run it again instead of editing. -->",
        # the front page names no run: the report it links to does
        (f"**Campaign `{campaign}`**" if brief else f"**Campaign `{campaign}`, run `{run_id}`**")
        + f" ([report]({report_link}), [executed notebooks]"
        f"({_link(Path(out) / campaign / ('' if brief else run_id), readme_dir)}/))"
        + (f", on {', '.join(devices)}" if devices else "")
        + f". {contention}".rstrip(),
    ]


def progress_sentence(manifest_path: Path) -> str:
    """For a run still being continued across invocations: how many of its cells have run, from its
    manifest (its recorded order holds every trial of the campaign); "" for a finished run."""
    if not manifest_path.is_file():
        return ""
    manifest = json.loads(manifest_path.read_text())
    order = manifest.get("run_order") or {}
    planned = set(order.get("before_rounds", [])) | {k for r in order.get("rounds", []) for k in r}
    planned |= set(manifest.get("cells", {}))
    done = {k for k, c in manifest.get("cells", {}).items() if c.get("status") == "ok"}
    if not planned or planned <= done:
        return ""
    command = f"fwbench run {manifest.get('campaign_file') or 'CAMPAIGN_FILE'} --resume"
    machine = layout.machine_words(manifest.get("environment") or {})
    if machine is None:
        going_on = (
            "it was started before runs recorded their CPU's family and model, so `--resume` "
            "refuses it (it could mix two CPUs sold under one name) and the study goes on in new "
            "runs"
        )
    else:
        going_on = f"`{command}` continues it on {machine}, and on no other machine"
    return (
        f"**This run is not finished:** {len(done & planned)} of its {len(planned)} cells have "
        f"run, and the numbers below cover those only; {going_on}."
    )


def update_readme(
    campaign: str,
    readme: Path,
    out: Path,
    report_dir: Path | None = None,
    figures_dir: Path | None = None,
    into: str | None = None,
    brief: bool = False,
    ratios_only: bool = False,
) -> bool:
    """Rewrite ``readme``'s results block from the report of ``campaign``; True if it changed.

    ``into`` names a second report of one campaign (``fwbench report CAMPAIGN --into INTO``, e.g.
    the same study on another CPU): report/INTO, figures/INTO and the README block marked INTO.

    ``report_dir`` and ``figures_dir`` default to report/<campaign> and figures/<campaign> beside
    the README; ``out`` is the executed-notebook folder the block links to.
    """
    root = Path(readme).parent
    name = into or campaign
    return rewrite_block(
        readme,
        name,
        lambda: results_block(
            campaign,
            Path(report_dir or root / "report" / name),
            root,
            Path(out),
            Path(figures_dir or root / "figures" / name),
            into,
            brief,
            ratios_only,
        ),
    )
