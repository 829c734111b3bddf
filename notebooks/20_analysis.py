# %% [markdown]
# # 20 · Analysis: how JAX and PyTorch compare, and why
#
# **Purpose.** Turn one run of a campaign into the study's answer. Reading only the DuckDB index
# (tables `runs`, `cells`, `measurements`), it builds the JAX ÷ PyTorch throughput matrix with 95%
# intervals and verdicts (best modes and defaults; every run of the campaign on the same CPU model
# and notebook sources pooled through `fwbench.measure.verdicts`), throughput scaling, latency percentiles, memory, compile
# time and its break-even, energy, the roofline with measured ceilings, CNN vs Transformer, the
# training / memory / validation families when present, the trust checks (trials paired by round,
# an A/A control on duplicate arms, calibration against the earlier pooled runs, the regression
# detector scored on this run's noise), the campaign's history through that detector, and the failures. It saves figures
# under `figures_dir`, tables under `report_dir`'s `tables/` and a `content.json` from
# which `fwbench report` writes report.md and report.html. It computes MFU here, against the
# device's ceiling (the best peak any framework's calibration reached: this run's, else the
# latest in the index), and emits it as records of its own (metric `mfu`, with the measured row's family
# and columns), which the index takes in with this notebook. The sections, in order, with their
# figures, tables, captions and the note each shows when its data is absent, are
# `fwbench.publish.outline.SECTIONS`; the computations live in `fwbench.report.tables`,
# `fwbench.report.roofline` and `fwbench.report.sentences`. This notebook loads the run and walks
# the outline once.
#
# **Run it:** `fwbench report smoke` (writes local/report/smoke/, which git ignores, with this
# notebook beside it); `fwbench report smoke --publish` runs it as a cell of the latest smoke run
# and writes the committed report/smoke/ and figures/smoke/.
#
# **Runtime:** 20 to 40 s on a 2-core CPU for the smoke campaign (figure export dominates); about
# 1 to 2 min for a full GPU campaign (more bootstrap intervals and figures).

# %% tags=["parameters"]
campaign = "smoke"
run_id = ""  # empty: the campaign's latest run
baseline_run_id = ""  # empty: the run before run_id
db_path = ""  # empty: $FWBENCH_DB, else executed/fwbench.duckdb
figures_dir = ""  # empty: local/figures/<campaign> (git ignores local/)
report_dir = ""  # empty: local/report/<campaign>
figure_formats = "svg,html,png"  # each figure's files; a published report commits "svg" alone

# %%
from pathlib import Path

from IPython.display import Markdown, display

from fwbench.models.registry import MODELS
from fwbench.pipeline.campaign import find_repo_root
from fwbench.publish import outline
from fwbench.report import roofline, trust
from fwbench.report.sections import ReportContent
from fwbench.results import db as fw_db
from fwbench.results.records import Recorder

root = find_repo_root(Path.cwd())
db_file = Path(db_path) if db_path else fw_db.default_db_path()
db_file = db_file if db_file.is_absolute() else root / db_file
# The architecture of each model comes from the registry here: the report layer may not import it.
kinds = {name: spec.kind for name, spec in MODELS.items()}
con = fw_db.connect(db_file, read_only=True)
analysis = outline.load(con, campaign, run_id, baseline_run_id, kinds)
con.close()
print(
    f"{campaign} run {analysis.run_id} (baseline: {analysis.baseline_run_id or 'none'}): "
    f"{len(analysis.meas)} records"
)
analysis.meas.groupby(["family", "status"]).size().rename("records").to_frame()

# %% [markdown]
# ## The report, section by section
# Each section's figures and tables are saved as they are shown. To look closer at one, read the
# frame behind it from `analysis` (e.g. `analysis.matrix`, `analysis.points`, `analysis.mfu`) or
# re-run a single section with `outline.add_section(content, analysis, outline.SECTIONS[i], show)`.

# %%
content = ReportContent(
    campaign,
    analysis.run_id,
    analysis.baseline_run_id,
    figures_dir=root / (figures_dir or f"local/figures/{campaign}"),
    report_dir=root / (report_dir or f"local/report/{campaign}"),
    figure_formats=tuple(figure_formats.split(",")),
)


def show(shown):
    display(Markdown(shown) if isinstance(shown, str) else shown)


outline.build(content, analysis, show)

# %% [markdown]
# ## MFU records
# MFU = achieved TFLOP/s ÷ the device's ceiling: the best peak matmul TFLOP/s 02_calibrate measured
# through any framework on the same device, precision and threads (this run's, else the latest in
# the index); each framework's own ceiling gives its framework efficiency, in `extra`. Emitting it
# as records puts it in the index beside the rows it was computed from.

# %%
mfu_records = Recorder("analysis")
roofline.add_mfu_records(mfu_records, analysis.mfu)
mfu_records.emit()

# %% [markdown]
# ## Trust records
# The A/A false-winner rate, the calibration of this run against the earlier pooled runs, and the
# regression detector's scores (section "Trust" above), as records of family `analysis`:
# `aa_false_winner_rate`, `calibration_inside_share`, `regression_recall_10pct`,
# `regression_false_alerts_per_100`. A campaign of one run has no A/A rate and no calibration.

# %%
trust_records = Recorder("analysis")
trust.add_records(
    trust_records,
    analysis.aa,
    analysis.stability_summary,
    analysis.run_id,
    *analysis.regression_evaluation,
)
trust_records.emit()

# %% [markdown]
# ## Summary
# `content.json` holds the sections above and these sentences; `fwbench report` lays them out.

# %%
content_path = content.write()
display(Markdown("\n".join(f"- {s}" for s in content.summary)))
print(
    f"wrote {content_path.relative_to(root) if content_path.is_relative_to(root) else content_path}"
)
