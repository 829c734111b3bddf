# %% [markdown]
# # 22 · Recommend: would the recommender have picked the best configuration?
#
# **Purpose.** `fwbench recommend` ranks a model's configurations (framework, mode, precision,
# batch size, threads, hardware) by measurements where they exist and predictions where they do
# not. Here each measured model is treated as if nobody had run it: a fit that never saw the
# model predicts all of its measured configurations, the recommender picks from the predictions
# alone, and the pick is scored against the exhaustive measured optimum as regret (how much
# throughput the pick gives up, in %). Two kinds of query (`recommend.evaluate`): the best
# configuration at a fixed batch size, and the best under a p95 latency cap at the median of the
# model's measured p95 latencies, where a pick that breaks the cap counts as 100% regret. Goal:
# regret ≤ 5% in ≥ 90% of queries (Selecta, USENIX ATC 2018: 94% within 10% of optimal), and
# better than the constant rule on the same queries (`baselines.rule_ranking`: the framework that
# won most of the other models' decided pairs, its default mode, fp32, the most threads).
# Records: family `prediction`, `regret_pct` per query and `regret_within_5pct` per kind. Last,
# the frozen test set's picks from its committed predictions (batch queries), recorded apart.
#
# **Run it:** `fwbench run params/prediction.yaml` (after 21_prediction, whose training table it
# reads; else it builds one from the index).
#
# **Runtime:** about 1 min on a 2-core CPU (one fit per model).

# %% tags=["parameters"]
db_path = ""  # empty: $FWBENCH_DB, else executed/fwbench.duckdb
seed = 0
goal_regret_pct = 5.0
goal_share_pct = 90.0

# %%
from pathlib import Path

import altair as alt
import pandas as pd
from IPython.display import Markdown, display

from fwbench.families.prediction import baselines, forecast, frozen, frozen_score, recommend
from fwbench.measure.goals import Goal
from fwbench.pipeline.campaign import find_repo_root
from fwbench.results import db as fw_db
from fwbench.results.records import Recorder

root = find_repo_root(Path.cwd())
db_file = Path(db_path) if db_path else fw_db.default_db_path()
db_file = db_file if db_file.is_absolute() else root / db_file
# the table the newest 21_prediction saved beside the index's executed notebooks, else one built
# from the index (every measured model's features: a few minutes)
table, table_source = forecast.training_table(db_file.parent, db_file, frozen.frozen_models(root))
source = Path(table_source)
print(f"from {source.relative_to(root) if source.is_relative_to(root) else source.name}")
print(f"{len(table)} configurations of {table.model.nunique() if len(table) else 0} models")

# %%
queries = recommend.evaluate(table, seed=seed) if len(table) else pd.DataFrame()
rule = f"constant rule ({baselines.NAME})"  # how a verdict names the baseline
rec = Recorder("prediction", extra={"seed": seed})
if queries.empty:
    reason = "no model has two or more measured configurations on one device to choose between"
    rec.add("regret_pct", None, "%", status="skipped", error=reason)
    print(reason)
else:
    shares = recommend.record_queries(rec, queries, goal_regret_pct)
    # the same queries answered by the constant rule: what a user gets without the predictor
    ruled = recommend.baseline_queries(table, queries)
    rule_shares = recommend.record_queries(
        rec, ruled, goal_regret_pct, {"predictor": baselines.NAME}
    )
queries

# %% [markdown]
# ## Against the goal
# Each kind of query's share within the goal's regret, and why the misses missed: what each pick
# changed from the best measured configuration (`setting` is the framework, mode or precision).

# %%
if not queries.empty:
    # why the misses: what each pick changed from the best measured configuration (`setting` is
    # the framework, mode or precision)
    all_causes = recommend.miss_causes(queries, goal_regret_pct)
    lines = []
    for kind, group in queries.groupby("query"):
        share = shares[kind]
        # a goal is met only where the predictor's picks also beat the constant rule's
        floor = rule_shares.get(kind)
        verdict = Goal(share, goal_share_pct, False, floor).words(rule)
        worst = group.sort_values("regret_pct").iloc[-1]
        causes = all_causes[all_causes["query"] == kind]
        why = "; ".join(
            f"{cause.misses} changed {cause.differs or 'nothing'}"
            if cause.differs != recommend.NO_PICK
            else f"{cause.misses} found nothing predicted under the cap"
            for cause in causes.itertuples()
        )
        lines.append(
            f"- **{kind}** queries: regret ≤ {goal_regret_pct:g}% in {share:.0f}% of "
            f"{len(group)} (goal ≥ {goal_share_pct:g}%): {verdict}. Median regret "
            f"{group.regret_pct.median():.1f}%; the worst, {worst.regret_pct:.1f}%, on "
            f"{worst.model} ({worst.device_name}); {int(group.violates.sum())} picks broke "
            "their latency cap."
            + (
                f" Of its {int(causes.misses.sum())} misses, against the best: {why}."
                if why
                else ""
            )
        )
    display(Markdown("\n".join(lines)))
    display(all_causes)
    display(
        alt.Chart(queries)
        .mark_bar()
        .encode(
            x=alt.X("regret_pct:Q", bin=alt.Bin(step=2.5), title="regret (%)"),
            y=alt.Y("count():Q", title="queries"),
            color="query:N",
            tooltip=["query", "count()"],
        )
        .properties(title="Regret of recommendations made from predictions alone", width=360)
    )

# %% [markdown]
# ## On the frozen test set
# The models of each frozen set (`params/frozen_test*.yaml`) were predicted, and the predictions
# committed, before anyone measured them; `fwbench freeze-test --score` scored them once. Here
# the same committed predictions pick a configuration at each batch size (PyTorch eager or JAX
# through torchax, the set's two settings), and the pick pays its measured gap to the best. This
# is one more figure from that single scoring's rows (`frozen_test.score.csv`), not a second
# look with a changed predictor. Latency queries need a predicted p95, which the committed
# predictions do not hold, so the set has batch queries only.

# %%
for test_campaign in frozen.set_files(root):
    label = frozen.set_label(test_campaign)
    scored_file = frozen_score.paths(test_campaign)[1].with_suffix(".csv")
    test_queries = (
        recommend.committed_queries(pd.read_csv(scored_file)) if scored_file.is_file() else None
    )
    if test_queries is None or test_queries.empty:
        print(f"the {label} is not scored yet: no test figure")
        continue
    test_share = recommend.record_queries(rec, test_queries, goal_regret_pct, {"test": label})[
        "batch"
    ]
    # the constant rule on the same queries, its framework the training table's majority winner
    # without the set's own models (a scored set's rows are training data now)
    own = set(frozen.campaign_models(test_campaign))
    ruled = recommend.committed_baseline_queries(
        pd.read_csv(scored_file), baselines.majority_winner(table[~table.model.isin(own)])
    )
    floor = recommend.record_queries(
        rec, ruled, goal_regret_pct, {"test": label, "predictor": baselines.NAME}
    )["batch"]
    verdict = Goal(test_share, goal_share_pct, False, floor).words(rule)
    worst = test_queries.sort_values("regret_pct").iloc[-1]
    display(
        Markdown(
            f"On the {label} the committed predictions' picks have regret ≤ "
            f"{goal_regret_pct:g}% in {test_share:.0f}% of {len(test_queries)} batch queries "
            f"(goal ≥ {goal_share_pct:g}%): {verdict}. Median regret "
            f"{test_queries.regret_pct.median():.1f}%; the worst, {worst.regret_pct:.1f}%, on "
            f"{worst.model} at batch {worst.batch_size} (picked {worst.chosen}; best "
            f"{worst.best})."
        )
    )
    display(test_queries)

# %%
rec.emit()
