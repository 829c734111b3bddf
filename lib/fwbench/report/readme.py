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
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fwbench.pipeline import environment
from fwbench.pipeline.trial import write_text_atomic
from fwbench.report import sections
from fwbench.vocab import (
    PREDICTION_ERROR_METRICS,
    PREDICTION_GOALS,
    model_label,
    series_label,
    setting_words,
    threads_words,
)

# a run named by its id in a sentence ("of run" and the id), which the front page words otherwise
NAMED_RUN = re.compile(r"\brun `?\d{8}T\d{6}Z`?")


def markers(campaign: str) -> tuple[str, str]:
    """The lines around ``campaign``'s block in the README."""
    return f"<!-- results:{campaign}:start -->", f"<!-- results:{campaign}:end -->"


class ReadmeError(ValueError):
    """Bad input to ``fwbench readme``: no README, no markers, or no report to quote."""


def _link(target: Path, readme_dir: Path) -> str:
    return Path(os.path.relpath(Path(target).resolve(), Path(readme_dir).resolve())).as_posix()


def _table(tables: Path, name: str) -> pd.DataFrame:
    path = tables / f"{name}.csv"
    if not path.is_file():
        return pd.DataFrame()
    table = pd.read_csv(path)
    if "threads" not in table and "precision" in table:
        table["threads"] = 0  # a report built before threads were part of a configuration
    return table


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


VERDICT_NOTES = {
    "equivalent": "equivalent within ±5%",
    "inconclusive": "inconclusive",
    "within one run": "within one run",
}


def ratio_cell(r) -> str:
    """A ratio with its interval and, unless a framework is faster, the verdict's words. A table
    from a report built before verdicts pooled runs has no ``between_term`` column: its intervals are
    within one run, and say so."""
    text = f"{r.ratio:.2f}× [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    if not isinstance(getattr(r, "between_term", None), str):
        return f"{text} (within one run)"
    note = VERDICT_NOTES.get(r.winner)
    return f"{text} ({note})" if note else text


def modes_label(r) -> str:
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
        designs = ", ".join(sorted(set(matrix.design)))
        return f"95% intervals, design {designs}"
    words = {
        "paired": f"the geometric mean of rounds paired by trial, 95%, over {span} interleaved "
        "rounds of one run (within one run: no between-run term)",
        "within-run": "the ratio of median images/s with a 95% bootstrap interval over samples "
        "from one run (no between-run term)",
    }
    return "; where no trials pair, ".join(words[k] for k in ("paired", "within-run") if k in kinds)


def inference_part(matrix: pd.DataFrame, report_link: str) -> list[str]:
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
        parts.append(f"{setting}, {label}{modes}:")
        parts.append(_markdown(header, body))
    return parts


def training_part(matrix: pd.DataFrame, speed: pd.DataFrame, report_link: str) -> list[str]:
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
                modes_label(r),
                ratio_cell(r),
                "" if pd.isna(torch_ms) else f"{torch_ms:.0f}",
                "" if pd.isna(jax_ms) else f"{jax_ms:.0f}",
            ]
        )
    header = ["model", "batch", "setting", "modes (best)", "JAX ÷ PyTorch"]
    header += ["PyTorch ms/step", "JAX ms/step"]
    return [
        f"Training, every step synced: JAX ÷ PyTorch images/s, {interval_words(rows)}, and "
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
        _markdown(header, body),
        *notes,
    ]


def results_block(
    campaign: str,
    report_dir: Path,
    readme_dir: Path,
    out: Path,
    figures_dir: Path,
    into: str | None = None,
    brief: bool = False,
) -> str:
    """The markdown between the markers, from report ``report_dir`` of ``campaign`` (built with
    ``fwbench report CAMPAIGN --into INTO`` when ``into`` is given). ``brief`` keeps the run line,
    the inference verdicts and the trust figures: the README's front page quotes no more, and the
    report has the rest."""
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
    distributed = _table(tables, "distributed")
    if not devices and "device_name" in distributed:
        devices = sorted(set(distributed.device_name))
    shared = sections.section_by_name(content, "shared_machine") or {"items": []}
    contention = " ".join(i["text"] for i in shared["items"] if i["kind"] == "note")
    command = f"fwbench readme {campaign}{f' --into {into}' if into else ''}"
    command += " --brief" if brief else ""
    parts = [
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
    progress = progress_sentence(Path(out) / campaign / run_id / "manifest.json")
    if progress:
        parts.append(progress)
    if brief:
        parts += inference_part(matrix, report_link)
        parts += notes_part(content, "trust", "How far these ratios can be trusted", report_link)
        # the front page names no run: the report it links to does
        return NAMED_RUN.sub("the newest run", "\n\n".join(parts))
    figure = Path(figures_dir) / "ratio_matrix.svg"
    if figure.is_file():
        parts.append(
            f"![JAX ÷ PyTorch throughput ratio, run {run_id}]({_link(figure, readme_dir)})"
        )
    families = distributed_part(distributed, _table(tables, "distributed_parity"), report_link)
    families += prediction_part(_table(tables, "prediction"), report_link)
    if _has_data(content, "web_audio"):
        families += notes_part(content, "web_audio", "Web audio", report_link)
    # the memory-time curve's sentences (the section's notes); none for runs before the curve
    if _has_data(content, "memory"):
        families += notes_part(content, "memory", "Memory-saving methods", report_link)
    if matrix.empty and families:
        # a campaign of other families: the inference parts would only say they are empty
        parts += notes_part(content, "trust", "How far these numbers can be trusted", report_link)
        return "\n\n".join(parts + families)
    parts += inference_part(matrix, report_link)
    parts += training_part(
        _table(tables, "training_ratio_matrix"), _table(tables, "training_speed"), report_link
    )
    section = sections.section_by_name(content, "mfu")
    parts += mfu_part(_table(tables, "mfu"), section, run_id, report_link)
    parts += notes_part(content, "roofline", "Share of the roofline bound", report_link)
    parts += notes_part(content, "trust", "How far these ratios can be trusted", report_link)
    parts += notes_part(content, "why", "Why", report_link)
    return "\n\n".join(parts + families)


def _has_data(content: dict, name: str) -> bool:
    """Whether a section shows a table or figure, not only its empty note."""
    section = sections.section_by_name(content, name) or {"items": []}
    return any(item["kind"] != "note" for item in section["items"])


def _mib(nbytes: float) -> str:
    return "" if pd.isna(nbytes) else f"{nbytes / 2**20:.1f}"


def _share(frac: float) -> str:
    return "" if pd.isna(frac) else f"{100 * frac:.0f}%"


def distributed_part(table: pd.DataFrame, parity: pd.DataFrame, report_link: str) -> list[str]:
    """13_distributed's step times, communication share, weak-scaling efficiency and per-rank
    state, with the float64 gate each strategy passed."""
    if table.empty:
        return []
    gate = {}
    if not parity.empty:
        for r in parity.itertuples():
            worst = max(r.dist_fp64_loss_parity_max_rel, r.dist_fp64_cross_framework_max_rel)
            gate[(r.model, r.framework, r.strategy)] = f"{worst:.1e} ({r.status})"
    rows = [
        [
            str(r.model),
            f"{r.framework} {r.strategy}",
            str(int(r.world_size)),
            f"{r.step_ms:.1f}",
            _share(getattr(r, "comm_overhead_frac", float("nan"))),
            "" if pd.isna(r.scaling_efficiency) else f"{r.scaling_efficiency:.2f}",
            _mib(getattr(r, "state_bytes_per_rank", float("nan"))),
            gate.get((r.model, r.framework, r.strategy), "") if r.world_size > 1 else "",
        ]
        for r in table.sort_values(["model", "framework", "strategy", "world_size"]).itertuples()
    ]
    header = [
        "model",
        "strategy",
        "processes",
        "step (ms)",
        "communication",
        "weak scaling",
        "state per rank (MiB)",
        "float64 gate (largest relative loss gap)",
    ]
    return [
        f"Distributed training ({', '.join(sorted(set(table.precision)))}, one core per process) "
        f"([report]({report_link}#distributed-training)):",
        _markdown(header, rows),
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
    machine = environment.machine_words(manifest.get("environment") or {})
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


PREDICTION_COLUMNS = [
    ("mape_pct", "MAPE"),
    ("within_15pct", "within ±15%"),
    ("worst_pct", "worst"),
    ("interval_coverage_pct", "90% interval held"),
    ("correct_winner_rate", "correct winner"),
    ("memory_error_pct", "memory error"),
    ("regret_within_5pct", "regret ≤ 5%"),
]


def prediction_part(table: pd.DataFrame, report_link: str) -> list[str]:
    """21_prediction's hold-outs and 22_recommend's queries, one row each, with the goal each
    is held to and by how much it is met or missed."""
    if table.empty:
        return []
    group = table.columns[0]
    columns = [(c, label) for c, label in PREDICTION_COLUMNS if c in table]
    body = []
    for row in table.itertuples(index=False):
        values = dict(zip(table.columns, row, strict=True))
        cells = ["" if pd.isna(values[c]) else f"{values[c]:.1f}%" for c, _ in columns]
        # "hold-out: batch" -> the batch hold-out's goal; "query: latency" -> the queries' goal
        kind, _, name = str(values[group]).partition(": ")
        goal = PREDICTION_GOALS.get("query" if kind == "query" else name)
        words = ""
        if goal is not None and not pd.isna(values.get(goal[0], float("nan"))):
            metric, bound = goal
            at_most = metric in PREDICTION_ERROR_METRICS
            value = values[metric]
            met = value <= bound if at_most else value >= bound
            sign = "≤" if at_most else "≥"
            label = dict(PREDICTION_COLUMNS)[metric]
            words = f"{label} {sign} {bound:g}%: " + (
                "met" if met else f"missed by {abs(value - bound):.1f} points"
            )
        body.append([values[group], *cells, words])
    return [
        f"Prediction: each row scored only on what no fit saw ([report]({report_link}#prediction)):",
        _markdown([group, *(label for _, label in columns), "goal"], body),
    ]


def notes_part(content: dict, name: str, heading: str, report_link: str) -> list[str]:
    """A section's generated notes as bullets (the trust figures, the why-sentences)."""
    section = sections.section_by_name(content, name)
    notes = [i["text"] for i in (section or {"items": []})["items"] if i["kind"] == "note"]
    if not notes:
        return []
    return [f"{heading} ([report]({report_link})):", "\n".join(f"- {n}" for n in notes)]


def replace_block(text: str, block: str, campaign: str, where: str = "README") -> str:
    """``text`` with everything between ``campaign``'s marker lines replaced by ``block``."""
    begin, end = markers(campaign)
    lines = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.strip() == begin]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ReadmeError(
            f"{where} needs one line {begin} followed by one line {end} around the results of "
            f"{campaign} (found {len(starts)} and {len(ends)})"
        )
    head, tail = lines[: starts[0] + 1], lines[ends[0] :]
    return "".join(head) + block.rstrip("\n") + "\n" + "".join(tail)


def update_readme(
    campaign: str,
    readme: Path,
    out: Path,
    report_dir: Path | None = None,
    figures_dir: Path | None = None,
    into: str | None = None,
    brief: bool = False,
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
        ),
    )


def rewrite_block(readme: Path, name: str, block_for: Callable[[], str]) -> bool:
    """Replace the block marked ``name`` in ``readme`` with ``block_for()``; True if it changed.
    The markers are checked before ``block_for`` runs: a README without them is bad input, found
    before any work. The file is replaced whole, never left half-written."""
    readme = Path(readme)
    if not readme.is_file():
        raise ReadmeError(f"{readme}: no such file")
    text = readme.read_text()
    replace_block(text, "", name, str(readme))
    new = replace_block(text, block_for(), name, str(readme))
    if new == text:
        return False
    write_text_atomic(readme, new)
    return True
