import json

import pytest

from tests.conftest import REPO, run_cli

RECORDS_MIME = "application/vnd.fwbench.records+json"


@pytest.mark.slow
def test_memory_notebook_runs_through_the_runner(tmp_path):
    campaign = tmp_path / "memory.yaml"
    campaign.write_text(
        f"campaign: memory_test\nsteps:\n  - notebook: {REPO}/notebooks/12_memory\n"
        "    params: {model: bert, encoder_size: tiny, seq_len: 16, batch_sizes: [2],\n"
        "             budget_fractions: [0.5], checkpoint_every: [1], sqrt_n: false,\n"
        "             profile_iters: 1, timing_iters: 1}\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "memory_test").iterdir()
    (executed,) = (run_dir / "12_memory").glob("*.ipynb")
    notebook = json.loads(executed.read_text())
    records = [
        row
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        for row in output.get("data", {}).get(RECORDS_MIME, [])
    ]
    peaks = {r["mode"]: r["value"] for r in records if r["metric"] == "peak_mem_bytes"}
    assert {"none", "graph", "mu_two@0.5", "checkpoint_every_1"} <= set(peaks)
    assert all(v > 0 for v in peaks.values())
    assert all(r["family"] == "memory" and r["status"] == "ok" for r in records)
    # the time model is checked on the plan against the graph timed in interleaved rounds; the
    # graph's row says how far the profile's window drifted instead
    timed = {r["mode"]: r for r in records if r["metric"] == "sim_time_error_pct"}
    assert set(timed) == {"mu_two@0.5"}
    assert timed["mu_two@0.5"]["extra"]["timed_by"] == "interleaved rounds"
    drift = {r["mode"] for r in records if r["metric"] == "profile_drift_pct"}
    assert drift == {"graph"}
    errors = [r["value"] for r in records if r["metric"] == "sim_peak_error_pct"]
    assert errors and all(abs(e) <= 10 for e in errors)
    # the float64 proof of the plan and of the simulated swap plan, and the checkpointing
    # baseline's float64 gradient gate with dropout active (BERT), each within 1e-10
    exact = {r["mode"]: r["value"] for r in records if r["metric"] == "exact_max_abs_diff"}
    assert set(exact) == {"mu_two@0.5", "mu_two_swap@0.5", "checkpoint_every_1"}
    assert max(exact.values()) <= 1e-10
    # what each plan replays, and how much of it runs a node twice: the report's reason
    replay = {r["mode"]: r["value"] for r in records if r["metric"] == "replay_ms"}
    repeat = {r["mode"]: r["value"] for r in records if r["metric"] == "replay_repeat_pct"}
    assert set(replay) == set(repeat) == {"mu_two@0.5", "mu_two_swap@0.5"}
    recomputed = {r["mode"]: r["value"] for r in records if r["metric"] == "recomputed_bytes"}
    for mode, ms in replay.items():  # a plan replays exactly when it recomputes something
        assert (ms > 0) == (recomputed[mode] > 0) and 0 <= repeat[mode] < 100
    swap = [r for r in records if r["mode"] == "mu_two_swap@0.5"]
    assert swap and all(r["extra"]["simulated_only"] for r in swap)
    # the seed's breakdown of every simulated peak: five parts that add up to it
    predicted = {r["mode"]: r["value"] for r in records if r["metric"] == "predicted_peak_bytes"}
    parts = [r for r in records if r["metric"] == "peak_part_bytes"]
    assert (
        {r["mode"] for r in parts} == set(predicted) == {"graph", "mu_two@0.5", "mu_two_swap@0.5"}
    )
    for mode, peak in predicted.items():
        mine = {r["extra"]["part"]: r["value"] for r in parts if r["mode"] == mode}
        assert len(mine) == 5 and sum(mine.values()) == peak and mine["params"] > 0


@pytest.mark.slow
def test_the_notebook_measures_jax_planners_beside_torch_and_the_report_pairs_them(tmp_path):
    import pandas as pd

    from fwbench.families.memory import memory_curve, memory_frameworks

    campaign = tmp_path / "memory.yaml"
    campaign.write_text(
        f"campaign: memory_jax_test\nsteps:\n  - notebook: {REPO}/notebooks/12_memory\n"
        "    params: {model: resnet18, image_size: 32, batch_sizes: [2], budget_fractions: [0.5],\n"
        "             checkpoint_every: [1], sqrt_n: false, profile_iters: 1, timing_iters: 1,\n"
        "             time_rounds: 1, swap_bandwidth_gbs: 0.0, jax_planners: true,\n"
        "             jax_policies: [nothing_saveable], jax_budgets: [0.5],\n"
        "             jax_compile_cache: true}\n"
        "    trials: 2\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = []
    for executed in (out / "memory_jax_test").glob("*/12_memory/*.ipynb"):
        trial = int(executed.stem.rsplit("trial=", 1)[1]) if "trial=" in executed.stem else 1
        records += [
            {**row, "trial": trial, "cell": executed.stem}
            for cell in json.loads(executed.read_text())["cells"]
            for output in cell.get("outputs", [])
            for row in output.get("data", {}).get(RECORDS_MIME, [])
        ]
    jax_rows = [r for r in records if r["framework"] == "jax"]
    peaks = {r["mode"]: r["value"] for r in jax_rows if r["metric"] == "peak_mem_bytes"}
    plans = {"jax_remat_every_1", "jax_policy_nothing_saveable", "jax_budget@0.5"}
    assert set(peaks) == {"jax_none", *plans}
    # XLA's own accounting of each compiled step: its temporaries, within its peak (on XLA:CPU
    # a plan does not lower them: docs/upstream/xla_cpu_remat_cse.py)
    temps = {r["mode"]: r["value"] for r in jax_rows if r["metric"] == "xla_temp_bytes"}
    assert set(temps) == set(peaks) and all(0 < temps[m] < peaks[m] for m in peaks)
    exact = {r["mode"]: r["value"] for r in jax_rows if r["metric"] == "exact_max_abs_diff"}
    assert set(exact) == plans
    assert max(exact.values()) <= 1e-10
    meas = pd.DataFrame(records).assign(run_id="r1", device_name="cpu")
    table = memory_frameworks.frameworks_table(memory_curve.curve_table(meas))
    assert set(table.framework) == {"PyTorch", "JAX"}
    jax_plan = table[table.method == "jax_remat_every_1"].iloc[0]
    assert jax_plan.trials == 2 and pd.notna(jax_plan.overhead_pct)  # against jax_none, paired
    said = memory_frameworks.sentences(table)
    assert said and said[0].startswith("resnet18 at batch 2: the plain training step holds")
    # the JAX policy given μ-TWO's budget keeps some of the blocks' named values, and the report
    # puts the two planners given budget 0.5 side by side
    budget = [r for r in jax_rows if r["mode"] == "jax_budget@0.5"]
    assert {r["extra"]["method"] for r in budget} == {"jax_budget"}
    assert all(r["extra"]["budget"] == 0.5 and r["extra"]["saved_names"] for r in budget)
    (side_by_side,) = memory_frameworks.budget_sentences(table)
    assert (
        "fwbench's μ-TWO plan saves" in side_by_side and "JAX's budget policy saves" in side_by_side
    )
