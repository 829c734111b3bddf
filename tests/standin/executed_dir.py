# %% [markdown]
# # Stand-in notebook: where does the runner say this notebook is written?
# Purpose: writes a file into `$FWBENCH_EXECUTED_DIR` (as 10_inference's profiler saves its traces)
# and records the folder, so a test can check that the runner names the folder absolutely: the
# kernel starts in this notebook's own folder, not where the runner was started. Run by
# `pytest tests/test_runner.py`; takes about a second.

# %% tags=["parameters"]
label = "a"

# %%
import os
from pathlib import Path

from fwbench.results.records import Recorder

folder = os.environ["FWBENCH_EXECUTED_DIR"]
(Path(folder) / f"{label}.marker").write_text("written by the stand-in notebook\n")
rec = Recorder("setup", framework="none", device="cpu")
rec.add("marker_written", 1, "1", extra={"executed_dir": folder})
rec.emit()
