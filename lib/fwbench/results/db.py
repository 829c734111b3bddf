"""The DuckDB index over executed notebooks: ingest (idempotent) and query.

The executed notebooks are the evidence; this database is derived from them and can be deleted and
rebuilt with ``fwbench ingest`` at any time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import nbformat

from fwbench.results.records import COLUMNS, RECORDS_MIME, load_schema
from fwbench.vocab import CUT, ENV_DB, KIT_COMMIT_FILE, family_of, named_commit

_DEFAULT_DB_NAME = "fwbench.duckdb"

# A failed cell still yields one row, so that the failure is visible next to the measurements.
DESCRIPTIVE = ("model", "framework", "mode", "device", "precision", "batch_size")
# A cell the manifest still holds as pending when its run is indexed never ran to the end: the
# run stopped before it (gpu/run.sh's time cap, a stopped runner). It is indexed as ``CUT``, a
# cells row and a cell_status record, so that a report names it rather than say every cell ran.
_CUT_ERROR = (
    "not run: the run stopped before this cell finished (a time cap or a stopped runner), "
    "or was still going when it was indexed"
)

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR, campaign VARCHAR, started_at VARCHAR, finished_at VARCHAR,
    git_sha VARCHAR, host VARCHAR, campaign_file VARCHAR, environment JSON,
    PRIMARY KEY (campaign, run_id)
);
CREATE TABLE IF NOT EXISTS cells (
    run_id VARCHAR, campaign VARCHAR, notebook VARCHAR, cell VARCHAR, trial INTEGER,
    status VARCHAR, error VARCHAR, duration_s DOUBLE, retried BOOLEAN, retry_env JSON,
    parameters JSON, path VARCHAR, load_1m_before DOUBLE, other_cpu_frac DOUBLE,
    steal_frac DOUBLE, shared_machine BOOLEAN
);
-- columns added after the first release; an index built before them gains them empty
ALTER TABLE cells ADD COLUMN IF NOT EXISTS load_1m_before DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS other_cpu_frac DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS steal_frac DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS shared_machine BOOLEAN;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS reruns INTEGER;
CREATE TABLE IF NOT EXISTS measurements (
    run_id VARCHAR, campaign VARCHAR, notebook VARCHAR, cell VARCHAR, trial INTEGER,
    status VARCHAR, error VARCHAR, family VARCHAR, model VARCHAR, framework VARCHAR,
    mode VARCHAR, device VARCHAR, device_name VARCHAR, precision VARCHAR, batch_size INTEGER,
    threads INTEGER, metric VARCHAR, value DOUBLE, unit VARCHAR, n INTEGER, ci_low DOUBLE,
    ci_high DOUBLE, extra JSON
);
-- an index built before the threads column gains it empty, as do records made before it
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS threads INTEGER;
"""


class IngestError(ValueError):
    """A malformed record or notebook: reported naming the notebook; nothing is written."""


def default_db_path(out: str | os.PathLike | None = None) -> Path:
    if os.environ.get(ENV_DB):
        return Path(os.environ[ENV_DB])
    return Path(out or "executed") / _DEFAULT_DB_NAME


def index_path(given: str | os.PathLike | None, out: str | os.PathLike | None = None) -> Path:
    """The index a command reads: the path its ``--db`` gave, else ``default_db_path(out)``."""
    return Path(given) if given else default_db_path(out)


def connect(db_path: str | os.PathLike, read_only: bool = False):
    db_path = Path(db_path)
    if read_only and not db_path.exists():
        raise FileNotFoundError(f"no database at {db_path}; run `fwbench ingest` first")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    # here, not at the top: a GPU node runs campaigns with `fwbench run --no-index` and carries
    # no DuckDB (gpu/kit.txt), so only the commands that open the index need it
    import duckdb

    con = duckdb.connect(str(db_path), read_only=read_only)
    if not read_only:
        con.execute(_SCHEMA_SQL)
    return con


@dataclass
class _RunData:
    run_dir: Path
    manifest: dict
    cells: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)


def _records_in(nb) -> list[dict]:
    rows = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if RECORDS_MIME in data:
                payload = data[RECORDS_MIME]
                if isinstance(payload, str):
                    payload = json.loads(payload)
                rows.extend(payload if isinstance(payload, list) else [payload])
    return rows


def _read_notebook_rows(nb_path: Path, run_dir: Path, validator) -> tuple[dict, list[dict]]:
    """The cell summary and validated records of one executed notebook."""
    try:
        nb = nbformat.read(str(nb_path), as_version=4)
    except Exception as exc:
        raise IngestError(f"{nb_path}: not a readable notebook: {exc}") from None
    meta = nb.metadata.get("fwbench")
    if not meta:
        raise IngestError(f"{nb_path}: no fwbench metadata; was it written by `fwbench run`?")
    context = {k: meta.get(k) for k in ("run_id", "campaign", "notebook", "cell", "trial")}
    rows = []
    for i, record in enumerate(_records_in(nb)):
        errors = sorted(validator.iter_errors(record), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            where = "/".join(map(str, first.path)) or "(record)"
            raise IngestError(f"{nb_path}: record {i} is malformed at {where}: {first.message}")
        row = {c: record.get(c) for c in COLUMNS}
        row.update(context)
        rows.append(row)
    status = meta.get("status", "failed")
    if status != "ok":
        row = _status_row(context, meta.get("parameters", {}), status, meta.get("error"))
        rows.append({**row, "extra": {"duration_s": meta.get("duration_s")}})
    cell = {
        **context,
        "status": status,
        "error": meta.get("error"),
        "duration_s": meta.get("duration_s"),
        "retried": bool(meta.get("retried")),
        "retry_env": json.dumps(meta.get("retry_env") or {}),
        "parameters": json.dumps(meta.get("parameters") or {}),
        "path": str(nb_path.relative_to(run_dir.parent.parent)),
        **_machine_share(meta),
    }
    return cell, rows


def _status_row(context: dict, params: dict, status: str, error: str | None) -> dict:
    """The one record a cell that did not end ok leaves: its status, error and configuration."""
    row = {c: None for c in COLUMNS}
    row.update(context)
    row.update({k: params.get(k) for k in DESCRIPTIVE if k in params})
    if isinstance(row.get("batch_size"), list):
        row["batch_size"] = None
    row.update(
        status=status,
        error=error,
        family=family_of(context.get("notebook") or ""),
        metric="cell_status",
        unit="",
        extra={},
    )
    return row


def _cut_cells(data: _RunData) -> tuple[list[dict], list[dict]]:
    """The cells row and the record of every cell the manifest still holds as pending and whose
    notebook was not read: the cells the run never finished."""
    read = {(c["notebook"], c["cell"], c["trial"]) for c in data.cells}
    cells, rows = [], []
    for entry in (data.manifest.get("cells") or {}).values():
        key = (entry.get("notebook"), entry.get("slug"), entry.get("trial") or 0)
        if entry.get("status") != "pending" or key in read:
            continue
        run = {k: data.manifest[k] for k in ("run_id", "campaign")}
        context = run | dict(zip(("notebook", "cell", "trial"), key, strict=True))
        params = entry.get("parameters") or {}
        rows.append(_status_row(context, params, CUT, _CUT_ERROR))
        cells.append(
            {
                **context,
                "status": CUT,
                "error": _CUT_ERROR,
                "duration_s": None,
                "retried": False,
                "retry_env": json.dumps({}),
                "parameters": json.dumps(params),
                "path": None,
                **_machine_share({}),
            }
        )
    return cells, rows


def _run_commit(data: _RunData) -> str | None:
    """The commit the run's code came from: the kit's commit file gpu/run.sh put beside the
    manifest where there is one (a node's copy may carry a stale .git, whose commit the
    environment then holds), else the environment's."""
    kit = data.run_dir / KIT_COMMIT_FILE
    named = named_commit(kit.read_text()) if kit.is_file() else None
    return named or (data.manifest.get("environment") or {}).get("git_sha")


def _machine_share(meta: dict) -> dict:
    """The cell's load and contention readings; None where the notebook predates them."""
    load = (meta.get("load_average") or {}).get("before") or [None]
    contention = meta.get("contention") or {}
    return {
        "load_1m_before": load[0],
        "other_cpu_frac": contention.get("other_cpu_frac"),
        "steal_frac": contention.get("steal_frac"),
        "shared_machine": contention.get("shared"),
        # attempts of this trial discarded because the machine was shared (the runner's
        # rerun_shared); 0 where the notebook predates them
        "reruns": len(meta.get("reruns") or []),
    }


def collect(root: Path, progress=None) -> list[_RunData]:
    """Read and validate every run under ``root`` (a folder of campaigns, a campaign or a run).

    ``progress`` wraps the list of the notebooks to read, the slow part (``fwbench ingest`` gives
    it a tqdm bar)."""
    root = Path(root)
    if not root.exists():
        raise IngestError(f"{root}: no such folder")
    validator = jsonschema.Draft202012Validator(load_schema())
    runs = []
    notebooks: list[tuple[_RunData, Path]] = []
    manifests = sorted(root.rglob("manifest.json"))
    for manifest_path in manifests:
        run_dir = manifest_path.parent
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as exc:
            raise IngestError(f"{manifest_path}: malformed manifest: {exc}") from None
        data = _RunData(run_dir, manifest)
        # hidden files are partial or temporary writes of an interrupted runner: never results
        notebooks += [
            (data, nb_path)
            for nb_path in sorted(run_dir.glob("*/*.ipynb"))
            if not nb_path.name.startswith(".")
        ]
        runs.append(data)
    for data, nb_path in progress(notebooks) if progress else notebooks:
        cell, rows = _read_notebook_rows(nb_path, data.run_dir, validator)
        data.cells.append(cell)
        data.rows.extend(rows)
    for data in runs:
        cells, rows = _cut_cells(data)
        data.cells.extend(cells)
        data.rows.extend(rows)
    return runs


def _scanned_campaigns(root: Path, runs: list[_RunData]) -> dict[str, set[str]]:
    """Per campaign whose whole folder lies under ``root``: the run ids found in it. A run folder
    given alone says nothing of its campaign's other runs, so it is left out."""
    root = root.resolve()
    found: dict[str, set[str]] = {}
    for run in runs:
        folder = run.run_dir.resolve().parent
        if folder == root or root in folder.parents:
            found.setdefault(run.manifest["campaign"], set()).add(run.manifest["run_id"])
    return found


def ingest(root: str | os.PathLike, db_path: str | os.PathLike, progress=None) -> dict:
    """Validate everything first, then replace each run's rows in one transaction.

    The index mirrors the folders it was ingested from: a run of a scanned campaign folder that is
    no longer on disk (deleted, never committed) is dropped, so that no report compares with a run
    nobody can open. ``dropped`` counts them. ``progress`` goes to ``collect``."""
    runs = collect(Path(root), progress)
    con = connect(db_path)
    counts = {"runs": 0, "cells": 0, "measurements": 0, "dropped": 0}
    try:
        con.execute("BEGIN TRANSACTION")
        for campaign, present in sorted(_scanned_campaigns(Path(root), runs).items()):
            known = con.execute("SELECT run_id FROM runs WHERE campaign = ?", [campaign]).fetchall()
            for (run_id,) in known:
                if run_id in present:
                    continue
                for table in ("runs", "cells", "measurements"):
                    con.execute(
                        f"DELETE FROM {table} WHERE campaign = ? AND run_id = ?", [campaign, run_id]
                    )
                counts["dropped"] += 1
        for run in runs:
            m = run.manifest
            key = (m["campaign"], m["run_id"])
            for table in ("runs", "cells", "measurements"):
                con.execute(f"DELETE FROM {table} WHERE campaign = ? AND run_id = ?", key)
            env = m.get("environment", {})
            con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    m["run_id"],
                    m["campaign"],
                    m.get("started_at"),
                    m.get("finished_at"),
                    _run_commit(run),
                    env.get("host"),
                    m.get("campaign_file"),
                    json.dumps(env, default=str),
                ),
            )
            if run.cells:
                cell_cols = list(run.cells[0])
                con.executemany(
                    f"INSERT INTO cells ({', '.join(cell_cols)}) VALUES ({', '.join('?' * len(cell_cols))})",
                    [tuple(c[k] for k in cell_cols) for c in run.cells],
                )
            if run.rows:
                con.executemany(
                    f"INSERT INTO measurements ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                    [
                        tuple(json.dumps(r[c]) if c == "extra" else r[c] for c in COLUMNS)
                        for r in run.rows
                    ],
                )
            counts["runs"] += 1
            counts["cells"] += len(run.cells)
            counts["measurements"] += len(run.rows)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.close()
    return counts


def query(sql: str, db_path: str | os.PathLike, params: list | None = None):
    """A pandas DataFrame of ``sql`` run read-only against the index."""
    con = connect(db_path, read_only=True)
    try:
        return con.execute(sql, params or []).df()
    finally:
        con.close()
