# %% [markdown]
# # 21 · Orders: is duet benchmarking steadier than interleaved trials here?
#
# **Purpose.** Duet benchmarking (Bulej et al., ICPE 2020) runs both arms of a comparison at the
# same time, each pinned to its own core with one thread, so that a disturbance of the machine
# falls on both at once and cancels in their ratio. Interleaved trials run the arms one after the
# other in each round. This notebook sets the two orders side by side on an A/A experiment (the
# same PyTorch configuration as both arms, differing only in the seed) and measures the spread
# of the per-round log ratio each order leaves, plus whether the report's paired interval wrongly
# calls a winner. The order with the smaller spread is the one to keep; the answer is this
# machine's, in its noisy state, not a law.
#
# **Run it:** `fwbench run params/aa_interleaved.yaml && fwbench run params/aa_duet.yaml && fwbench
# run params/orders.yaml` (the last runs this notebook over the two campaigns' latest runs).
#
# **Runtime:** a few seconds (it reads the index); the two campaigns take about 7 and 5 minutes.

# %% tags=["parameters"]
campaigns = ["aa_interleaved", "aa_duet"]
arm = "seed"  # the cell parameter the two arms differ in
db_path = ""  # empty: $FWBENCH_DB, else executed/fwbench.duckdb
figures_dir = "figures/orders"
report_dir = "report/orders"

# %%
from pathlib import Path

import altair as alt
import pandas as pd

from fwbench.pipeline.campaign import find_repo_root
from fwbench.report import charts, tables, trust
from fwbench.results import db as fw_db
from fwbench.results.records import Recorder

root = find_repo_root(Path.cwd())
db_file = Path(db_path) if db_path else fw_db.default_db_path()
db_file = db_file if db_file.is_absolute() else root / db_file
con = fw_db.connect(db_file, read_only=True)
parts = []
for campaign in campaigns:
    run_id, _ = tables.resolve_runs(con, campaign)
    meas = tables.load_measurements(con, campaign, run_id)
    cells = tables.load_cells(con, campaign, run_id)
    spread = trust.arm_spread(meas, cells, arm)
    shared = int(cells.shared_machine.fillna(False).astype(bool).sum())
    parts.append(spread.assign(campaign=campaign, run_id=run_id, shared_cells=shared))
con.close()
spread = pd.concat(parts, ignore_index=True)
spread["order"] = spread.campaign.str.replace("aa_", "", regex=False)
spread

# %% [markdown]
# ## The spread each order leaves
# The standard deviation of log(arm B ÷ arm A) over rounds is the noise a paired comparison
# works against: its interval's width grows with it. `arm_cv` is each arm's own variation over
# rounds, the noise an unpaired comparison would face.

# %%
chart = (
    alt.Chart(charts.labelled(spread))
    .mark_bar()
    .encode(
        x=alt.X("order:N", title=None),
        y=alt.Y("log_ratio_sd:Q", title="SD of the per-round log ratio (A/A)"),
        color=alt.Color("order:N", legend=None),
        column=alt.Column("batch_size:O", title="batch size"),
        tooltip=[
            "order:N",
            "batch_size:O",
            "rounds:Q",
            alt.Tooltip("log_ratio_sd:Q", format=".4f"),
            alt.Tooltip("arm_cv:Q", format=".4f"),
            alt.Tooltip("ratio:Q", format=".4f"),
        ],
    )
    .properties(width=140, height=200)
)
out_figures = root / figures_dir
out_figures.mkdir(parents=True, exist_ok=True)
charts.save(
    chart,
    out_figures,
    "aa_spread_by_order",
    "A/A spread: duet against interleaved trials",
    "Standard deviation over rounds of log(seed 1 ÷ seed 0) throughput of the same PyTorch "
    "configuration (ResNet-50, 64 px), with the arms run side by side on one core each (duet) "
    "or one after the other with the machine's threads (interleaved).",
)
out_tables = root / report_dir
out_tables.mkdir(parents=True, exist_ok=True)
spread.to_csv(out_tables / "aa_spread_by_order.csv", index=False)
chart

# %% [markdown]
# ## Which order to keep
# A generated sentence per batch size, and the records (family `analysis`, metric
# `aa_log_ratio_sd`, mode = the order) that the index keeps.

# %%
by = spread.pivot_table(index="batch_size", columns="order", values="log_ratio_sd")
lines = []
for batch_size, row in by.iterrows():
    if {"duet", "interleaved"} <= set(row.index) and row.notna().all():
        better = "duet" if row["duet"] < row["interleaved"] else "interleaved"
        factor = max(row) / min(row)
        lines.append(
            f"Batch {batch_size}: the A/A log-ratio spread is {row['duet']:.3f} in duet and "
            f"{row['interleaved']:.3f} interleaved; {better} is {factor:.1f}× steadier."
        )
print("\n".join(lines) or "The two orders were not both measured.")
rec = Recorder("analysis", framework="torch", device="cpu")
for r in spread.itertuples():
    rec.add(
        "aa_log_ratio_sd",
        r.log_ratio_sd,
        "ratio",
        n=int(r.rounds),
        mode=r.order,
        model=r.model,
        batch_size=int(r.batch_size),
        device_name=r.device_name,
        precision=r.precision,
        extra={
            "campaign": r.campaign,
            "run_id": r.run_id,
            "arm_cv": r.arm_cv,
            "false_winner": bool(r.false_winner),
            "shared_cells": int(r.shared_cells),
        },
    )
rec.emit()
