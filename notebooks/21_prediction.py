# %% [markdown]
# # 21 · Prediction: how well can we predict a configuration nobody ran?
#
# **Purpose.** Fit the predictor (`fwbench.families.prediction.predictor`: a sum of costs, each op
# category's FLOPs and output bytes over the machine's measured ceilings plus the op count, with
# the costs fitted per framework and mode (`costs`), corrected in log space by gradient boosting
# over the setting, the model's size and its op mix, where folds that hold lineages out say the
# correction helps) on every measured inference
# configuration in the index, and score it only on what no fit has seen: grouped hold-outs that
# leave out a lineage (the models built from the same blocks, `fwbench.models.lineage`), the
# batch sizes above 16, a thread count, or a CPU. Random splits
# would put a model's batch 4 in training and its batch 8 in test and flatter the predictor.
# For each hold-out: MAPE, the median error, the share within ±10%, ±15% and ±20%, the worst
# error, how often the
# conformal interval held the measurement, and the correct-winner rate (JAX jit against PyTorch
# eager, in the comparisons whose paired interval excludes 1). Records: family `prediction`,
# the hold-out in `extra`. It forecasts the training time per epoch too, the forward's forecast times a
# training multiple learned from measured steps, against every epoch 11_training timed (hold-out
# `epoch`). The table it learned from is saved beside this notebook as
# `training_table.csv`; `fwbench predict` fits on the newest one.
#
# What enters (`fwbench.families.prediction.dataset`): configurations on hardware that names
# itself (a CPU with family and model), each framework's modes (no channels_last arms), the
# median over clean trials, and only where 02_calibrate measured that hardware's ceilings.
#
# **Run it:** `fwbench run params/prediction.yaml` (after the sweep, `params/sweep_cpu.yaml`).
#
# **Runtime:** 3 to 8 min on a 2-core CPU: the features of each measured model and batch size
# (about a second each, on PyTorch's meta device), one fit per hold-out fold, a real forward per
# model at `memory_batch_sizes`, two traced training steps per memory case, and one fit per
# model with a measured training step or epoch.

# %% tags=["parameters"]
holdouts = ["lineage", "batch", "threads", "cpu"]
memory_batch_sizes = [1, 16]  # inference peaks measured at these of the table's batch sizes
memory_training = True  # also extrapolate the memory campaigns' training peaks from batch 2 and 3
epoch_check = True  # forecast each training epoch the index timed (11_training's timed_epochs)
db_path = ""  # empty: $FWBENCH_DB, else executed/fwbench.duckdb
seed = 0

# %%
import json
import os
from pathlib import Path

import altair as alt
import pandas as pd
from IPython.display import Markdown, display
from tqdm import tqdm

from fwbench import vocab
from fwbench.families.prediction import (
    baselines,
    costs,
    dataset,
    efficiency,
    epochs,
    forecast,
    frozen,
    frozen_score,
    kernel_model,
    peaks,
    prediction_charts,
    predictor,
    ratio,
)
from fwbench.measure.goals import Goal
from fwbench.pipeline.campaign import find_repo_root
from fwbench.results import db as fw_db
from fwbench.results.records import Recorder

root = find_repo_root(Path.cwd())
db_file = Path(db_path) if db_path else fw_db.default_db_path()
db_file = db_file if db_file.is_absolute() else root / db_file
# the frozen test set's models stay out of the table: they are scored once, never learned from
tested = frozen.frozen_models(root)
table, left_out = dataset.build(
    db_file, tested, progress=lambda items: tqdm(items, desc="features")
)
print(f"{len(table)} configurations from {table.model.nunique() if len(table) else 0} models")
for reason, count in left_out.items():
    print(f"left out: {count} ({reason})")
coverage = (
    table.groupby(["device_name", "framework", "mode", "precision", "threads"])
    .agg(models=("model", "nunique"), configurations=("model", "size"))
    .reset_index()
)
coverage

# %% [markdown]
# ## The table it learned from
# Saved beside this executed notebook, so that `fwbench predict` on a fresh clone fits on exactly
# what this run scored (a kernel started by hand has no such folder and saves nothing).

# %%
folder = os.environ.get(vocab.ENV_EXECUTED_DIR)
if folder:
    saved = forecast.save_table(table, Path(folder))
    print(saved.relative_to(root) if saved.is_relative_to(root) else saved.name)

# %% [markdown]
# ## What each kind of op costs
# The cost model fitted on the whole table: the share of the measured peak a FLOP of each category
# runs at, the share of the copy bandwidth its output bytes are written at, and the time an op
# takes beyond its work. `fit` says how each setting's set came about: `shrunk` where its rows
# span `MIN_SHRINK_LINEAGES` lineages (costs of its own, pulled toward `all`'s scaled per
# group by the `shrink` weight that leave-one-lineage-out cross-validation on its rows picked:
# `inf` is the scaled costs, 0 a free fit), `scaled` where a thinner setting multiplies `all`'s
# FLOP, byte and op costs by one factor each; the correction learns what is left of its
# difference.
# The terms are fitted jointly, so a share is a term's cost with the others in place, not one
# kernel's measured efficiency: a depthwise convolution's FLOPs are few and its time is carried
# mostly by its bytes, so its FLOP share can read near the peak. The profiles say what a kernel
# reaches.

# %%
costs.cost_table(table) if len(table) else "no rows"

# %% [markdown]
# ## Grouped hold-outs
# Each row of a hold-out is predicted by a fit that never saw its group. A hold-out the data
# cannot make (one thread count, one CPU) is said so and recorded as `skipped`. Beside each
# score, its baseline on the same rows (`fwbench.families.prediction.baselines`, recorded as
# `predictor: baseline`): the seconds of the fold's nearest model by FLOPs in the same setting,
# scaled by FLOPs, and always the framework that won most of the fold's decided pairs. A goal
# is met only where the predictor beats its baseline too.

# %%
rec = Recorder("prediction", extra={"seed": seed})
scored, summary, against = [], [], []
for kind in holdouts:
    held = predictor.evaluate(table, kind, seed=seed) if len(table) else table
    if held.empty:
        reason = f"the data cannot make a {kind} hold-out (one group, or no rows)"
        rec.add("mape_pct", None, "%", status="skipped", error=reason, extra={"holdout": kind})
        print(f"{kind}: skipped: {reason}")
        continue
    found = predictor.interval_scores(held.seconds, held.predicted, held.low, held.high)
    # a winner is judged only where the fold was fitted on both frameworks' settings
    found.update(predictor.winner_score(held))
    unseen = int((~held.setting_seen).sum())
    if unseen:
        print(
            f"{kind}: {unseen} of {len(held)} rows are of a framework and mode its fold never "
            f"trained on; {found['unjudged_pairs']} decided JAX-vs-PyTorch pairs are left out "
            "of the winner score for it"
        )
    extra = {"holdout": kind, "folds": int(held.fold.nunique()), "rows": found["n"]}
    for metric in predictor.SCORE_METRICS:
        rec.add(metric, found[metric], "%", n=found["n"], extra=extra)
    rec.add(
        "correct_winner_rate",
        found["correct_winner_rate"],
        "%",
        n=found["decided_pairs"],
        extra=extra,
    )
    # the baselines on the same rows from the same folds' training rows: FLOPs scaled from the
    # nearest model of the setting, and always the framework that won most often
    held = baselines.add_to_holdout(held, table, kind)
    base = baselines.holdout_scores(held)
    base_extra = {**extra, "predictor": baselines.NAME}
    for metric in predictor.SCORE_METRICS:
        if metric in base:
            rec.add(metric, base[metric], "%", n=base["n"], extra=base_extra)
    rec.add(
        "correct_winner_rate",
        base["correct_winner_rate"],
        "%",
        n=base["decided_pairs"],
        extra=base_extra,
    )
    summary.append({"holdout": kind, **found})
    against.append({"holdout": kind, **base})
    scored.append(held.assign(holdout=kind))
summary = pd.DataFrame(summary)
against = pd.DataFrame(against).set_index("holdout") if against else pd.DataFrame()
summary

# %% [markdown]
# Where each hold-out's misses gather: its MAPE by setting (framework and mode) and image size,
# with the predictions (`mape_pct`) and with the cost model's alone, before the correction
# (`cost_mape_pct`). A setting fitted on few lineages in a fold (the cost table's `fit` and
# `shrink`) and the 32 px rows, whose time is mostly launches, are where to look first.

# %%
predictor.error_table(pd.concat(scored)) if scored else "no hold-out scored"

# %% [markdown]
# ## Each op category's efficiency, from the per-op profiles
# The profiles (`10_inference` with `profile`, e.g. `params/sweep_cpu_why.yaml`) say how long each
# op category took in each model; its roofline time (FLOPs over the peak, output bytes over the
# copy bandwidth) over that is its efficiency, at most 1
# (`fwbench.families.prediction.efficiency`). A model nobody profiled is then priced op by op:
# each category's roofline over its setting's efficiency, plus the time outside every op. Scored
# on the lineage hold-out (efficiencies learned from the other lineages' profiles), beside the
# predictor's fitted cost sum (`cost_mape_pct`) and its corrected prediction (`predicted_mape_pct`)
# on the same rows. Nothing here feeds the predictor yet.

# %%
times = efficiency.build(db_file, tested, progress=lambda items: tqdm(items, desc="profiles"))
per_category = efficiency.efficiencies(times)
if len(per_category):
    display(prediction_charts.efficiency_chart(per_category))
per_category

# %%
per_op = efficiency.lineage_holdout(times, table)
lineage_held = next((s for s in scored if s.holdout.iloc[0] == "lineage"), None)
per_op_scores = efficiency.holdout_table(per_op, lineage_held) if len(per_op) else pd.DataFrame()
for r in per_op_scores.itertuples():
    extra = {"holdout": "lineage", "predictor": "per-op sum", "setting": r.setting}
    for metric in ("mape_pct", "median_pct", "within_15pct", "within_20pct"):
        rec.add(f"per_op_{metric}", getattr(r, f"per_op_{metric}"), "%", n=r.rows, extra=extra)
per_op_scores if len(per_op_scores) else "no profiled setting to price the table's rows by"

# %% [markdown]
# ## The JAX ÷ PyTorch ratio, predicted directly
# A ratio read off two predictions carries both their errors. The direct model
# (`fwbench.families.prediction.ratio`) learns the log ratio of JAX's seconds over PyTorch
# eager's in pairs measured in the same run, from the JAX side's setting (jit on a Flax twin, or
# torchax), the sizes and the op mix, reading what cross-validation by lineage keeps, with a 90%
# conformal interval from the same folds. Scored on the lineage hold-out, beside the ratio of the
# predictor's two lineage hold-out predictions (`indirect_*`); the correct winner is judged on
# the pairs whose paired trials decide it.

# %%
ratio_held = (
    ratio.evaluate(table, lineage_held.predicted, seed=seed)
    if lineage_held is not None
    else pd.DataFrame()
)
ratio_scores = ratio.scores(ratio_held) if len(ratio_held) else pd.DataFrame()
for r in ratio_scores.itertuples():
    for label in ("direct", "indirect"):
        name = "ratio, direct" if label == "direct" else "ratio of two predictions"
        extra = {"holdout": "lineage", "predictor": name, "jax_mode": r.jax_mode}
        for metric in ("mape_pct", "within_20pct", "correct_winner_pct"):
            recorded = "correct_winner_rate" if metric == "correct_winner_pct" else metric
            n = r.decided if metric == "correct_winner_pct" else r.pairs
            value = getattr(r, f"{label}_{metric}")
            if pd.notna(value):
                rec.add(recorded, value, "%", n=n, extra=extra)
    rec.add(
        "interval_coverage_pct",
        r.direct_coverage_pct,
        "%",
        n=r.pairs,
        extra={"holdout": "lineage", "predictor": "ratio, direct", "jax_mode": r.jax_mode},
    )
ratio_scores if len(ratio_scores) else "no JAX-vs-PyTorch pair to score"

# %% [markdown]
# ## Kernel by kernel: the kernel-level predictor on the lineage hold-out
# The op-category predictor prices a model by what its ops ask for; the kernel-level one
# (`fwbench.families.prediction.kernel_model`) by what runs: each kernel the framework launches
# (XLA's fusions and library calls, eager PyTorch's aten ops) priced from micro-benchmarks of its
# own kind timed on the same CPU (23_kernels, `params/kernels_cpu.yaml`), summed, plus the call's
# measured overhead, times one scale per setting fitted on the other lineages' rows. Settings:
# PyTorch eager, JAX jit of the stock twin, JAX through torchax, on each CPU model and thread
# count the index has micro-benchmarks for. Beside it, on the same rows: the op-category
# predictor's lineage hold-out and the baseline. The four study models' own kernels are in the
# micro-benchmark table (their shapes priced by measurement); a new model's are priced from
# their neighbours, which only the frozen test scores.

# %%
kernel_held = (
    kernel_model.holdout_from_index(
        db_file, table, progress=lambda items: tqdm(items, desc="kernels")
    )
    if len(table)
    else table
)
kernel_scores = pd.DataFrame()
if len(kernel_held) and kernel_held.predicted.notna().any():
    kernel_held = kernel_held[kernel_held.predicted.notna()]
    kernel_scores = kernel_model.side_by_side(
        kernel_held,
        lineage_held,
        baselines.add_to_holdout(kernel_held, table, "lineage"),
    )
    # the kernel-level predictor's scores, and the other two on the same rows beside them
    named = {"kernels": "kernels", "op categories": "op categories, kernel rows",
             baselines.NAME: f"{baselines.NAME}, kernel rows"}  # fmt: skip
    for r in kernel_scores.itertuples():
        extra = {"holdout": "lineage", "predictor": named[r.predictor], "setting": r.setting}
        for metric in (*predictor.SCORE_METRICS, "correct_winner_rate"):
            n = r.decided_pairs if metric == "correct_winner_rate" else r.n
            if pd.notna(getattr(r, metric)):
                rec.add(metric, getattr(r, metric), "%", n=int(n), extra=extra)
    display(kernel_scores)
    shares = [c for c in kernel_held.columns if c.startswith("share:")]
    display(
        kernel_held.assign(error_pct=(kernel_held.predicted / kernel_held.seconds - 1) * 100)[
            ["model", "framework", "mode", "batch_size", "seconds", "summed_s", "predicted",
             "error_pct", *shares]
        ].round(4)
    )  # fmt: skip
else:
    print("no micro-benchmarks for a CPU model the table has rows of: run params/kernels_cpu.yaml")

# %% [markdown]
# ## The frozen test: models nobody looked at, scored once
# The hold-outs above are validation: the predictor was designed while reading them. The test is
# each frozen set (`params/frozen_test.yaml`, then `params/frozen_test_<name>.yaml`): models drawn
# before the predictor changed, predicted and committed before they were measured, scored once by
# `fwbench freeze-test --score`. Its
# figures are quoted apart from the hold-outs', with how many times the set has been scored,
# and beside the baselines on the same rows (FLOPs scaled from the nearest training model of the
# setting; always the framework that won most of the training pairs), which need no scoring.
# The baselines read today's training table, which holds more than the predictor had when the
# set was frozen: if anything, a stricter yardstick.

# %%
for test_campaign in frozen.set_files(root):
    label = frozen.set_label(test_campaign)
    predictions_file, score_file = frozen_score.paths(test_campaign)
    test_score = json.loads(score_file.read_text()) if score_file.is_file() else None
    if test_score is None:
        state = "predicted, not yet measured" if predictions_file.is_file() else "not yet predicted"
        print(f"the {label} is {state}: no test figure yet")
        continue
    extra = {"test": label, "times_scored": test_score["times_scored"]}
    for metric, name in frozen_score.RECORDED.items():
        if test_score.get(metric) is not None:
            rec.add(name, test_score[metric], "%", n=test_score["measured"], extra=extra)
    display(Markdown(f"**The {label}** (`{test_campaign.name}`)"))
    display(frozen_score.goal_table(test_score))
    scored_rows = pd.read_csv(score_file.with_suffix(".csv"))
    # the baselines on the same rows, beside the single scoring (which they never change), from
    # a training table without the set's own models (a scored set's rows are training data now)
    measured_set = frozen_score.newest_run(frozen_score.measured_rows(db_file), test_campaign.stem)
    own = set(frozen.campaign_models(test_campaign))
    test_base = baselines.test_scores(scored_rows, measured_set, table[~table.model.isin(own)])
    base_extra = {**extra, "predictor": baselines.NAME}
    for metric, name in frozen_score.RECORDED.items():
        if pd.notna(test_base.get(metric, float("nan"))):
            n = test_base["decided_pairs"] if metric == "correct_winner_pct" else test_base["n"]
            rec.add(name, test_base[metric], "%", n=n, extra=base_extra)
    display(
        pd.DataFrame(
            {
                "predictor (scored once)": {m: test_score.get(m) for m in frozen_score.RECORDED},
                baselines.NAME: {m: test_base.get(m) for m in frozen_score.RECORDED},
            }
        )
    )
    display(scored_rows.groupby(["framework", "mode", "batch_size"]).error_pct.describe())
    # which kernel kinds the kernel-level predictor's time sat in, and so which carry its error:
    # each row's kinds priced again from the set's own CPU's micro-benchmarks (no fit needed)
    kernel_rows = scored_rows.get("predictor", pd.Series("", index=scored_rows.index)) == "kernels"
    priced = scored_rows[kernel_rows]
    if len(priced):
        parts = [
            kernel_model.shares_from_index(
                db_file, rows, device, int(threads), lambda items: tqdm(items, desc="kinds")
            )
            for (device, threads), rows in priced.groupby(["device_name", "threads"])
        ]
        with_shares = pd.concat(parts)
        by_kind = frozen_score.error_by_kind(with_shares) if len(with_shares) else pd.DataFrame()
        for r in by_kind.itertuples():
            kind_extra = {**extra, "predictor": f"kernels, {r.kind} kernels"}
            rec.add("time_share_pct", r.time_share_pct, "%", n=len(priced), extra=kind_extra)
            rec.add("error_carried_pct", r.error_carried_pct, "%", n=len(priced), extra=kind_extra)
            if r.rows_led:
                rec.add("mape_pct", r.mape_pct, "%", n=r.rows_led, extra=kind_extra)
                rec.add("median_signed_pct", r.median_signed_pct, "%", n=r.rows_led,
                        extra=kind_extra)  # fmt: skip
        if len(by_kind):
            display(Markdown(f"Where the kernel-level predictor's error sits ({len(priced)} rows)"))
            display(by_kind.round(1))
        else:
            print(f"no micro-benchmarks in the index for the CPU the {label} was measured on")

# %% [markdown]
# ## Against the goals
# MAPE ≤ 10% for unseen batch sizes, ≤ 15% for unseen lineages, ≥ 90% of all predictions
# within ±15%, a correct winner in ≥ 90% of decided comparisons. A miss is said with its size.
# Memory is scored in its own section below.

# %%
lines = []
for row in summary.itertuples():
    metric, bound = vocab.PREDICTION_GOALS[row.holdout]
    value = getattr(row, metric)
    at_most = metric in vocab.PREDICTION_ERROR_METRICS
    # a goal is met only where the predictor also beats what a user gets without it
    floor = against[metric].get(row.holdout) if metric in against else None
    word = Goal(value, bound, at_most, floor).words()
    lines.append(
        f"- **{row.holdout}** hold-out ({row.n} predictions): MAPE {row.mape_pct:.1f}%, "
        f"{row.within_15pct:.0f}% within ±15%, worst {row.worst_pct:.0f}%, interval held "
        f"{row.interval_coverage_pct:.0f}% (nominal {predictor.COVERAGE:.0%}); goal "
        f"{metric} {'≤' if metric in vocab.PREDICTION_ERROR_METRICS else '≥'} {bound:g}: "
        f"{word}. Correct winner "
        + (
            f"{row.correct_winner_rate:.0f}% of {row.decided_pairs} decided comparisons"
            + (
                f" ({row.unjudged_pairs} more left out: a framework their fold never trained on)."
                if row.unjudged_pairs
                else "."
            )
            if row.decided_pairs
            else (
                f"not scored: each of its {row.unjudged_pairs} decided JAX-vs-PyTorch "
                "comparisons has a framework whose every row sits in the held-out group."
                if row.unjudged_pairs
                else "not scored: no decided JAX-vs-PyTorch comparison in this hold-out."
            )
        )
    )
if scored:
    # why a miss: the fold and setting the errors gather in, and which part of the predictor made
    # them, the cost model or the correction on top of it
    where = predictor.worst_group(pd.concat(scored))
    if where["mape_pct"] > where["cost_mape_pct"]:
        part = (
            f"the cost model alone missed them by {where['cost_mape_pct']:.0f}%, and the "
            "correction, chosen where lineage folds of the training rows said it helps, carried "
            "to them what that setting's other lineages taught it and made them worse"
        )
    else:
        part = (
            f"the cost model alone missed them by {where['cost_mape_pct']:.0f}% and the correction "
            "narrowed that: the cost terms do not price this lineage's work in that setting"
        )
    lines.append(
        f"\nThe fit had {len(table)} configurations of {table.model.nunique()} models on "
        f"{table.device_name.nunique()} CPUs ({', '.join(sorted(table.device_name.unique()))}). "
        f"Its largest errors gather in the {where['holdout']} hold-out's fold {where['fold']!r} "
        f"(MAPE {where['fold_mape_pct']:.0f}%), and there in the {where['rows']} rows of "
        f"{where['setting']} ({where['mape_pct']:.0f}%): {part}. The error table above splits every "
        "hold-out so (`cost_mape_pct` is the cost model alone)."
    )
display(Markdown("\n".join(lines) or "No hold-out could be scored."))

# %%
if scored:
    points = pd.concat(scored)[
        [
            "holdout",
            "fold",
            "model",
            "framework",
            "mode",
            "precision",
            "batch_size",
            "threads",
            "device_name",
            "seconds",
            "predicted",
        ]
    ].assign(error_pct=lambda f: (f.predicted / f.seconds - 1) * 100)
    # every hold-out point is drawn: thousands once the index grows, past altair's default cap
    with alt.data_transformers.disable_max_rows():
        display(
            prediction_charts.versus_chart(
                points,
                measured="seconds",
                predicted="predicted",
                unit="s per call",
                color="framework",
                shape="precision",
            )
            .facet(column="holdout:N")
            .properties(
                title="Predicted against measured, each point by a fit that never saw its group"
            )
        )
    # one bar per group, its mean taken here rather than over every point in the chart
    by_group = (
        points.assign(abs_error_pct=points.error_pct.abs())
        .groupby(["holdout", "fold"], as_index=False)
        .abs_error_pct.agg(mape_pct="mean", predictions="size")
    )
    display(
        alt.Chart(by_group)
        .mark_bar()
        .encode(
            x=alt.X("mape_pct:Q", title="MAPE (%)"),
            y=alt.Y("fold:N", title=None, sort="-x"),
            color="holdout:N",
            tooltip=["holdout", "fold", "mape_pct", "predictions"],
        )
        .properties(title="Error by held-out group", width=360)
    )

# %% [markdown]
# ## Memory: the model's own bytes, predicted and measured (`memory_error_pct`)
# Not the process RSS, which moves by about 28% between runs of one configuration on a CPU, more
# than the batch size moves it. What `fwbench predict` reports and `fwbench recommend` filters on is
# `model_peak_bytes`: parameters plus the activations alive at a forward's peak, read from shapes
# on the meta device without running the model. Here each PyTorch model of the table runs one real
# forward at `memory_batch_sizes`, and the CPU allocator's peak (with the parameters) is the
# measurement (`fwbench.families.prediction.peaks`).
#
# A training step's peak at a batch size never run comes from the memory family's liveness
# simulator: the step is traced at batch 2 and 3, and the memory at every position of the step
# is extrapolated to the batch size the memory campaigns measured. Goal: ≤ 10% error.

# %%
memory_scores = []
inference_configs = (
    table[(table.framework == "torch") & table.batch_size.isin(memory_batch_sizes)]
    if len(table)
    else table
)
if len(inference_configs):
    inference_peaks = peaks.inference_errors(
        inference_configs, progress=lambda items: tqdm(items, desc="forward peaks")
    )
    memory_scores.append(("memory_inference", inference_peaks))
if memory_training:
    with fw_db.connect(db_file, read_only=True) as con:
        training_measured = peaks.training_measurements(con)
    training_peaks = peaks.training_errors(
        training_measured, progress=lambda items: tqdm(items, desc="traced steps")
    )
    if len(training_peaks):
        memory_scores.append(("memory_training", training_peaks))
memory_lines = []
for kind, frame in memory_scores:
    found = predictor.errors(frame.measured_bytes, frame.predicted_bytes)
    extra = {"holdout": kind, "rows": found["n"]}
    rec.add("memory_error_pct", found["mape_pct"], "%", n=found["n"], extra=extra)
    rec.add("within_10pct", found["within_10pct"], "%", n=found["n"], extra=extra)
    rec.add("worst_pct", found["worst_pct"], "%", n=found["n"], extra=extra)
    _, bound = vocab.PREDICTION_GOALS[kind]
    word = (
        "meets"
        if found["mape_pct"] <= bound
        else f"misses by {found['mape_pct'] - bound:.1f} points"
    )
    worst = frame.loc[frame.error_pct.abs().idxmax()]
    memory_lines.append(
        f"- **{kind}** ({found['n']} peaks): mean error {found['mape_pct']:.1f}%, "
        f"{found['within_10pct']:.0f}% within ±10%; goal ≤ {bound:g}%: {word}. Worst: {worst.model} at batch "
        f"{worst.batch_size}, predicted {worst.predicted_bytes / 2**20:.0f} MiB against "
        f"{worst.measured_bytes / 2**20:.0f} MiB measured ({worst.error_pct:+.1f}%)."
    )
display(Markdown("\n".join(memory_lines) or "No memory prediction could be checked."))
for _kind, frame in memory_scores:
    display(
        frame.assign(
            predicted_mib=frame.predicted_bytes / 2**20, measured_mib=frame.measured_bytes / 2**20
        )
        .drop(columns=["predicted_bytes", "measured_bytes"])
        .round(1)
    )

# %%
if memory_scores:
    points = pd.concat(
        frame.assign(kind=kind)[
            ["kind", "model", "batch_size", "predicted_bytes", "measured_bytes"]
        ]
        for kind, frame in memory_scores
    ).assign(
        predicted_mib=lambda f: f.predicted_bytes / 2**20,
        measured_mib=lambda f: f.measured_bytes / 2**20,
    )
    display(
        prediction_charts.versus_chart(
            points,
            measured="measured_mib",
            predicted="predicted_mib",
            unit="peak (MiB)",
            color="kind",
            size=260,
        ).properties(title="The model's own bytes: predicted against the allocator's measurement")
    )

# %% [markdown]
# ## Training time per epoch, against a stopwatch (hold-out `epoch`)
# A training step is a multiple of its forward: the inference predictor forecasts the forward at
# the step's batch and image size, and the multiple is learned from the index's measured training
# steps, per framework (`fwbench.families.prediction.epochs`). An epoch is the pass's steps times
# that step. Each measured epoch (11_training with `timed_epochs`, `params/epoch_check.yaml`) is
# forecast by what never saw its model: the inference fit without it, the multiple from the other
# models' steps. `steps × measured step` shows what a real pass adds to its timed steps (batches
# drawn and placed, no warm-up between them).

# %%
epoch_scores = pd.DataFrame()
if epoch_check and len(table):
    with fw_db.connect(db_file, read_only=True) as con:
        train_steps, train_epochs = epochs.measured(con)
        hardware = dataset.ceilings(con)
    train_steps = epochs.with_features(train_steps, hardware)
    train_epochs = epochs.with_features(train_epochs, hardware)
    # one fit without each model serves its steps' forwards and its epochs' forecasts
    fits = epochs.fits_without(table, [*train_steps.model, *train_epochs.model], seed=seed)
    train_steps = epochs.with_forward(table, train_steps, fits=fits)
    if folder and len(train_steps):
        # beside the training table: what `fwbench predict --epoch-images` learns its multiple from
        epochs.save_steps(train_steps, Path(folder))
    print(
        f"{len(train_steps)} training steps of {train_steps.model.nunique() if len(train_steps) else 0}"
        f" models teach the multiple; {len(train_epochs)} measured epochs to forecast"
    )
    epoch_scores = epochs.epoch_errors(table, train_steps, train_epochs, fits=fits)
scorable = epoch_scores[epoch_scores.multiple_rows > 0] if len(epoch_scores) else epoch_scores
if len(scorable):
    found = predictor.interval_scores(
        scorable.epoch_s, scorable.predicted_s, scorable.low, scorable.high
    )
    extra = {"holdout": "epoch", "folds": int(scorable.model.nunique()), "rows": found["n"]}
    for metric in predictor.SCORE_METRICS:
        rec.add(metric, found[metric], "%", n=found["n"], extra=extra)
    metric, bound = vocab.PREDICTION_GOALS["epoch"]
    word = "meets" if found[metric] >= bound else f"misses by {bound - found[metric]:.1f} points"
    worst = scorable.loc[scorable.error_pct.abs().idxmax()]
    display(
        Markdown(
            f"- **epoch** ({found['n']} measured epochs of {scorable.model.nunique()} models): "
            f"MAPE {found['mape_pct']:.1f}%, {found['within_15pct']:.0f}% within ±15%, interval "
            f"held {found['interval_coverage_pct']:.0f}%; goal {metric} ≥ {bound:g}: {word}. "
            f"Worst: {worst.model} on {worst.framework} at batch {worst.batch_size}, "
            f"{worst.predicted_s:.1f} s forecast against {worst.epoch_s:.1f} s measured "
            f"({worst.error_pct:+.1f}%), with a multiple of {worst.multiple:.2f} from "
            f"{worst.multiple_rows} other steps."
        )
    )
    display(
        scorable[
            [
                "model",
                "framework",
                "batch_size",
                "image_size",
                "threads",
                "device_name",
                "steps",
                "n_trials",
                "epoch_s",
                "steps_times_step_s",
                "forward_s",
                "multiple",
                "predicted_s",
                "low",
                "high",
                "error_pct",
            ]
        ].round(3)
    )
else:
    reason = (
        "no measured epoch with another model's training step of its framework in the index "
        "(run params/epoch_check.yaml)"
    )
    rec.add("mape_pct", None, "%", status="skipped", error=reason, extra={"holdout": "epoch"})
    print(f"epoch: skipped: {reason}")

# %%
rec.emit()
