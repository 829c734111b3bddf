"""Where a run's files live and how they are named: the checkout's root, a cell's slug (the
folder name that carries its settings), whole-file writes, and the words that name the machine a
run's environment describes. The pipeline writes by these rules and the report reads by them, so
they sit here, below both."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

# the slug key of an A/A copy: a cell of its own whose records say so
AA_COPY = "aa_copy"


def find_repo_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds ``notebooks/``; else the cwd."""
    for folder in [start, *start.parents]:
        if (folder / "notebooks").is_dir():
            return folder
    return Path.cwd()


def _slug_value(value) -> str:
    if isinstance(value, (list, tuple)):
        return "-".join(_slug_value(v) for v in value)
    text = str(value)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "none"


def make_slug(
    parameters: dict, keys: list[str], trial: int, trials: int, aa_copy: bool = False
) -> str:
    parts = [f"{k}={_slug_value(parameters[k])}" for k in sorted(keys)]
    if aa_copy:
        # a suffix in the slug's own key=value form, so slug_settings and slug_without_trial
        # read a copy's slug as they read any other
        parts.append(f"{AA_COPY}=1")
    if trials > 1:
        parts.append(f"trial={trial}")
    return "__".join(parts) or "default"


def slug_without_trial(slug: str) -> str:
    """A slug of ``make_slug`` less its trial: what the trials of one cell share."""
    return "__".join(p for p in slug.split("__") if not re.fullmatch(r"trial=\d+", p))


def slug_settings(slug: str) -> dict[str, str]:
    """The ``key=value`` pairs of a slug of ``make_slug``, values as the slug writes them."""
    pairs = (p.split("=", 1) for p in slug.split("__") if "=" in p)
    return dict(pairs)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` whole: a reader (or a stop half-way) never sees it half-written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def machine_words(env: dict) -> str | None:
    """The hardware a run's records describe, as ``--resume`` compares it: the CPU with family and
    model, and the GPUs by name; None for an environment captured before the CPU's family and
    model were recorded."""
    cpu = env.get("cpu")
    if not cpu:
        return None
    name = cpu.get("name") or "unknown CPU"
    if cpu.get("family") is not None and cpu.get("model") is not None:
        name = f"{name} (family {cpu['family']}, model {cpu['model']})"
    # an entry without a name says why no GPU could be read (no NVML), not that there is one
    gpus = sorted(g["name"] for g in env.get("gpus") or [] if g.get("name"))
    return " + ".join([name, *gpus])
