"""Tidy measurement records, embedded in the executed notebook that produced them.

A notebook calls ``Recorder.add`` once per measured quantity and ``Recorder.emit`` once (or a few
times) to display them. ``emit`` writes one output of MIME type ``RECORDS_MIME`` holding the rows as
JSON, so the executed notebook alone proves its numbers; ``fwbench ingest`` reads these outputs back.
The columns are those of DESIGN.md section 4; ``record.schema.json`` in this package documents them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from fwbench import vocab

RECORDS_MIME = "application/vnd.fwbench.records+json"

# Where a record came from. The runner exports these to the kernel; ingest falls back to the notebook's
# metadata and path, so a notebook run by hand in JupyterLab still produces valid records.
CONTEXT_ENV = {
    "run_id": vocab.ENV_RUN_ID,
    "campaign": vocab.ENV_CAMPAIGN,
    "notebook": vocab.ENV_NOTEBOOK,
    "cell": vocab.ENV_CELL,
}

_STATUSES = ("ok", "failed", "timeout", "oom", "skipped")

COLUMNS = (
    "run_id",
    "campaign",
    "notebook",
    "cell",
    "trial",
    "status",
    "error",
    "family",
    "model",
    "framework",
    "mode",
    "device",
    "device_name",
    "precision",
    "batch_size",
    "threads",
    "metric",
    "value",
    "unit",
    "n",
    "ci_low",
    "ci_high",
    "extra",
)


def load_schema() -> dict:
    text = resources.files("fwbench.results.schema").joinpath("record.schema.json").read_text()
    return json.loads(text)


def _finite_or_none(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# A kernel started by hand (JupyterLab, `make lab`) has no runner context. Its records say so rather
# than leaving the columns empty, so a number measured by hand never passes for a campaign's.
INTERACTIVE = "interactive"


def context_from_env() -> dict:
    ctx = {key: os.environ.get(var) for key, var in CONTEXT_ENV.items()}
    if ctx["run_id"] is None:
        # jupyter_server tells the kernel which notebook it serves; papermill and nbclient do not.
        session = os.environ.get("JPY_SESSION_NAME")
        ctx.update(run_id=INTERACTIVE, campaign=INTERACTIVE, cell=INTERACTIVE)
        ctx["notebook"] = ctx["notebook"] or (Path(session).stem if session else None)
    trial = os.environ.get(vocab.ENV_TRIAL)
    ctx["trial"] = int(trial) if trial else 0
    return ctx


def intra_op_threads() -> int | None:
    """The intra-op thread count a cell ran with: CPU timings scale with it, so two cells
    measured with different counts are not comparable.

    torch's own count where torch is already loaded (it may have been changed with
    ``torch.set_num_threads``); importing torch only to ask would cost seconds and memory in a
    JAX cell. Otherwise what torch's OpenMP pool would start with: ``OMP_NUM_THREADS``, else
    every CPU the process may use; never more than the cores it is pinned to.
    """
    cores = len(os.sched_getaffinity(0))  # a pinned process has no more, whatever a pool says
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        return min(int(torch.get_num_threads()), cores)
    with contextlib.suppress(ValueError):
        env = int(os.environ.get("OMP_NUM_THREADS", ""))
        if env > 0:
            return min(env, cores)
    return cores


class Recorder:
    """Collects records that share their descriptive columns (family, model, framework, ...).

    ``defaults`` are columns every row gets unless ``add`` overrides them; ``extra`` is merged
    into every row's ``extra`` (a row's own keys win), and ``extras`` adds more for a block.
    """

    def __init__(self, family: str, *, extra: dict | None = None, **defaults: Any):
        self.family = family
        self.defaults = defaults
        self.extra = dict(extra or {})
        self.rows: list[dict] = []

    @contextlib.contextmanager
    def extras(self, **extra: Any):
        """Rows added inside the ``with`` block carry ``extra`` too."""
        saved = self.extra
        self.extra = {**saved, **extra}
        try:
            yield self
        finally:
            self.extra = saved

    def add(
        self,
        metric: str,
        value: float | None,
        unit: str,
        *,
        n: int | None = None,
        ci_low: float | None = None,
        ci_high: float | None = None,
        status: str = "ok",
        error: str | None = None,
        extra: dict | None = None,
        **columns: Any,
    ) -> dict:
        """Add one row. ``columns`` override the recorder's defaults (e.g. ``batch_size=8``)."""
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {_STATUSES}, got {status!r}")
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown record columns: {sorted(unknown)}")
        row = {col: None for col in COLUMNS}
        row.update(context_from_env())
        row["threads"] = intra_op_threads()
        row.update({"family": self.family, **self.defaults, **columns})
        row.update(
            metric=metric,
            value=_finite_or_none(value),
            unit=unit,
            n=None if n is None else int(n),
            ci_low=_finite_or_none(ci_low),
            ci_high=_finite_or_none(ci_high),
            status=status,
            error=error,
            extra={**self.extra, **(extra or {})},
        )
        if row["batch_size"] is not None:
            row["batch_size"] = int(row["batch_size"])
        self.rows.append(row)
        return row

    def add_summary(
        self,
        prefix: str,
        summary: dict,
        unit: str,
        *,
        samples: list,
        extra: dict | None = None,
        **columns: Any,
    ) -> None:
        """``{prefix}_p50_{unit}`` ... ``{prefix}_std_{unit}`` from ``fwbench.measure.stats.summarize``.

        The median carries its 95% interval and, in ``extra``, the raw samples (what the analysis
        bootstraps over) and the noise flag; ``extra`` adds to that.
        """
        n = summary["n"]
        self.add(
            f"{prefix}_p50_{unit}",
            summary["p50"],
            unit,
            n=n,
            ci_low=summary["median_ci_low"],
            ci_high=summary["median_ci_high"],
            extra={
                "samples": samples,
                "iqr_over_median": summary["iqr_over_median"],
                "noisy": summary["noisy"],
                **(extra or {}),
            },
            **columns,
        )
        for key in ("p90", "p95", "p99", "mean", "std"):
            self.add(f"{prefix}_{key}_{unit}", summary[key], unit, n=n, **columns)

    def add_compile_and_memory(self, result: Any, **columns: Any) -> None:
        """``compile_s`` (and JAX's ``lower_s`` / ``xla_compile_s``) and ``peak_mem_bytes`` of a
        benchmark result that has those attributes (inference and training results do)."""
        self.add("compile_s", result.compile_s, "s", **columns)
        if result.lower_s is not None:
            self.add("lower_s", result.lower_s, "s", **columns)
            self.add("xla_compile_s", result.xla_compile_s, "s", **columns)
        self.add(
            "peak_mem_bytes",
            result.peak_mem_bytes,
            "bytes",
            extra={"source": result.peak_mem_source},
            **columns,
        )

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(COLUMNS))

    def emit(self) -> None:
        """Display the collected rows as one embedded records output, then start a fresh batch."""
        from IPython.display import display

        rows = self.rows
        self.rows = []
        if not rows:
            return
        table = _plain_table(rows)
        display({RECORDS_MIME: rows, "text/plain": table}, raw=True)


def _plain_table(rows: list[dict]) -> str:
    """A short text view so the output reads well where the custom MIME type is not rendered."""
    shown = ["status", "model", "framework", "batch_size", "metric", "value", "unit"]
    lines = ["  ".join(shown)]
    for row in rows:
        lines.append("  ".join("" if row.get(c) is None else str(row.get(c)) for c in shown))
    return f"{len(rows)} fwbench records\n" + "\n".join(lines)
