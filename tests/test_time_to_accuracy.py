"""Time to accuracy: an attempt's clock and target on real trainers (ResNet-18 at 32 px on
digits), the search's shared first draws, the notebook through the runner for both frameworks,
and the report's tables and verdicts on its records."""

import json

import numpy as np
import pandas as pd
import pytest

from fwbench.data import batches
from fwbench.families.training import training_tta, tuning
from tests.conftest import REPO, run_cli

RECORDS_MIME = "application/vnd.fwbench.records+json"


@pytest.fixture(scope="module")
def digits():
    return batches.load("digits", 32)


def test_a_miss_scores_worse_than_the_seconds_it_spent():
    reached = tuning.Attempt("torch", 0.1, 64, 0, 90.0, seconds=12.0)
    reached.evals = [{"step": 10, "epoch": 0.5, "seconds": 12.0, "val_top1": 91.0}]
    assert reached.score() == 12.0 and reached.reached
    missed = tuning.Attempt("torch", 0.1, 64, 0, 90.0)
    missed.evals = [{"step": 10, "epoch": 0.5, "seconds": 5.0, "val_top1": 45.0}]
    assert not missed.reached and missed.best_top1 == 45.0
    assert missed.score() == pytest.approx(5.0 * (tuning.MISS_FACTOR + 0.5))


@pytest.mark.parametrize("framework", ["torch"])  # JAX's attempts: the notebook test below
def test_an_attempt_stops_at_the_target_with_its_clock_on_training_only(digits, framework):
    make = tuning.trainer_factory("resnet18", framework, digits, seed=0)
    common = {"lr": 0.05, "batch_size": 64, "seed": 1, "evals_per_epoch": 4}
    found = tuning.run_attempt(make, digits, target=50.0, max_epochs=2, **common)
    assert found.framework == framework
    assert found.reached and found.best_top1 >= 50.0
    assert found.seconds == found.evals[-1]["seconds"] > 0
    times = [e["seconds"] for e in found.evals]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert len(found.losses) == found.steps == found.evals[-1]["step"]
    assert all(np.isfinite(found.losses))
    assert (found.compile_s > 0) == (framework == "jax")  # JAX's step compiled off the clock
    # an unreachable target runs every epoch and misses
    missed = tuning.run_attempt(make, digits, target=100.0, max_epochs=1, **common)
    assert not missed.reached and missed.evals[-1]["epoch"] == 1.0
    assert missed.score() > 2 * missed.spent_s
    with pytest.raises(ValueError, match="validation top-1"):
        tuning.run_attempt(make, digits, target=0.0, max_epochs=1, **common)


def test_both_frameworks_search_from_the_same_first_draws():
    def attempt_at(speed):
        def run(lr, batch_size):
            found = tuning.Attempt("x", lr, batch_size, 0, 90.0, seconds=speed * abs(np.log(lr)))
            found.evals = [{"step": 1, "epoch": 1, "seconds": found.seconds, "val_top1": 95}]
            return found

        return run

    space = {"trials": 6, "seed": 3, "lr_range": (1e-3, 1.0), "batch_sizes": [32, 64]}
    slow = tuning.search(attempt_at(5.0), **space)
    fast = tuning.search(attempt_at(1.0), **space)
    first = [(a.lr, a.batch_size) for a in slow.attempts[:2]]  # the random third of 6 trials
    assert first == [(a.lr, a.batch_size) for a in fast.attempts[:2]]
    best = min(slow.attempts, key=tuning.Attempt.score)
    assert slow.best == {"lr": best.lr, "batch_size": best.batch_size}
    assert len(slow.attempts) == 6
    with pytest.raises(ValueError, match="0 < low < high"):
        tuning.search(attempt_at(1.0), **{**space, "lr_range": (0.1, 0.01)})


@pytest.mark.slow
def test_the_notebook_tunes_both_frameworks_and_the_report_compares_them(tmp_path):
    campaign = tmp_path / "tta.yaml"
    campaign.write_text(
        "campaign: tta_test\nsteps:\n"
        + "".join(
            # JAX trains its expert twin: the stock ResNet-18's small-output convolutions at
            # 32 px take most of this test's time on XLA:CPU, and the plumbing is the same
            f"  - notebook: {REPO}/notebooks/15_time_to_accuracy\n"
            f"    params: {{framework: {framework}, mode: {mode}, model: resnet18, target: 40.0,\n"
            "             max_epochs: 1, evals_per_epoch: 4, search_trials: 1, seeds: 2,\n"
            "             batch_sizes: [64], lr_range: [0.02, 0.1]}\n"
            for framework, mode in (("torch", "default"), ("jax", "jit-expert"))
        )
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = []
    for executed in out.glob("tta_test/*/15_time_to_accuracy/*.ipynb"):
        records += [
            row
            for cell in json.loads(executed.read_text())["cells"]
            for output in cell.get("outputs", [])
            for row in output.get("data", {}).get(RECORDS_MIME, [])
        ]
    meas = pd.DataFrame(records).assign(run_id="r1")
    assert set(meas.family) == {"training"}
    searched = meas[meas.metric == training_tta.SEARCH]
    assert len(searched) == 2 and set(searched.framework) == {"torch", "jax"}
    compiles = {r.framework: r.extra["compile_s"] for r in searched.itertuples()}
    assert compiles["jax"] > 0 and compiles["torch"] == 0  # JAX's step compiled off the clock
    # the same seed: both frameworks' searches began at the same configuration
    first = searched[[e["search_trial"] == 0 for e in searched.extra]]
    assert len({e["lr"] for e in first.extra}) == 1
    best = training_tta.best_table(meas).set_index("framework")
    assert list(best.replicates) == [2, 2] and (best.reached == 2).all()
    assert (best.tta_median_s > 0).all()
    compared = training_tta.tta_verdicts(meas)
    assert list(compared.model) == ["resnet18"]
    assert compared.design.iloc[0] == "1 run × 2 data orders"
    assert compared.verdict.iloc[0] == "within one run"
    assert training_tta.sentences(meas)[0].startswith("ResNet-18 to 40% validation top-1: JAX")
    # a second run pools with the first: each run's best, and the rounds nested in two runs
    two = pd.concat([meas, meas.assign(run_id="r2")], ignore_index=True)
    assert len(training_tta.best_table(two)) == 4
    assert training_tta.tta_verdicts(two).design.iloc[0] == "2 runs × 2 data orders"
    assert "each run's search in turn" in training_tta.sentences(two)[0]


def _records(run_id, target, evals, seconds, compile_s):
    """Synthetic records of one run: both frameworks' searches and 3 replicates on ResNet-18,
    each replicate reaching ``target`` at its ``evals``-th evaluation."""
    design = {"target": target, "evals_per_epoch": 6, "max_epochs": 8, "search_trials": 1,
              "search_seed": 0}  # fmt: skip
    rows = []
    for framework, mode in (("torch", "eager"), ("jax", "jit-expert")):
        attempt = {"lr": 0.02, "reached": True, "best_top1": target + 1,
                   "compile_s": compile_s[framework], "evals": [{}] * evals[framework]}  # fmt: skip
        common = {"run_id": run_id, "family": "training", "model": "resnet18",
                  "framework": framework, "mode": mode, "status": "ok", "batch_size": 64}  # fmt: skip
        rows.append({**common, "metric": training_tta.SEARCH, "value": 1.0,
                     "extra": {**design, **attempt, "search_trial": 0}})  # fmt: skip
        for order in (1, 2, 3):
            rows.append({**common, "metric": training_tta.TTA,
                         "value": seconds[framework] * (1 + 0.01 * order),
                         "extra": {**design, **attempt, "replicate": order,
                                   "best": {"lr": 0.02, "batch_size": 64}}})  # fmt: skip
    return rows


def test_only_runs_of_one_design_pool_and_the_compile_is_counted_apart():
    slow_compile = {"torch": 0.0, "jax": 20.0}
    new = [
        _records(rid, 97.0, {"torch": 14, "jax": 12}, {"torch": 10.0, "jax": 5.0}, slow_compile)
        for rid in ("r2", "r3")
    ]
    # an earlier design (target 90, JAX 3x slower): not the same study, so it must not pool
    old = _records("r1", 90.0, {"torch": 2, "jax": 2}, {"torch": 2.0, "jax": 6.0}, slow_compile)
    meas = pd.DataFrame([*old, *new[0], *new[1]])
    mine = training_tta.same_design(meas, "r3")
    assert set(mine.run_id) == {"r2", "r3"}
    assert set(training_tta.same_design(meas, "r1").run_id) == {"r1"}
    found = training_tta.tta_verdicts(mine).iloc[0]
    assert found.design == "2 runs × 3 data orders"
    assert found.jax_over_torch_s == pytest.approx(0.5, rel=1e-6)
    # JAX's 20 s of compile against PyTorch eager's none: (5 + 20) / 10 with it counted
    assert found.with_compile == pytest.approx(2.5, rel=0.03)
    best = training_tta.best_table(mine).set_index(["framework", "run"])
    assert best.evals_median.loc[("jax", "r3")] == 12
    assert best.tta_with_compile_median_s.loc[("jax", "r3")] == pytest.approx(25.1)
    said = training_tta.sentences(mine)
    assert said[1].startswith("ResNet-18 with the compile of the step counted")
    assert f"{found.with_compile:.2f}×" in said[1] and "JAX 12, PyTorch 14" in said[1]
    assert "fewer than" not in said[1]
    # the old design's evaluations were 2: its sentence says the seconds are mostly step speed
    assert "fewer than 10" in training_tta.sentences(meas[meas.run_id == "r1"])[1]
    # two runs that disagree far more than their data orders do leave no bounded interval
    assert training_tta._interval(0.0, float("inf")).startswith("(no bounded interval")
    assert training_tta._interval(0.21, 0.34) == "[0.21, 0.34]"
