"""The distributed report's tables read the timed trials its verdicts read: the float64 gate's
cell, run once before the rounds (trial 0, two steps with compilation in them), shows as a gate in
the parity table and never as a timing. Built from records alone: no process is started here."""

import numpy as np
import pandas as pd
import pytest

from fwbench.families.distributed import distributed_report as dist
from fwbench.report import sentences

# two workers' step, compute-only step and all-reduce in run 20261201T224517Z of
# distributed_scaling: its four timed trials, and the gate's cell run once before them
TIMED = {
    ("torch", "ddp"): {
        "step_ms": [59.18, 49.79, 57.34, 40.45],
        "compute_only_step_ms": [45.83, 32.78, 45.46, 29.74],
        "grad_allreduce_ms": [6.2, 5.91, 6.92, 5.38],
    },
    ("jax", "dp_fused"): {
        "step_ms": [147.24, 215.07, 193.5, 156.02],
        "compute_only_step_ms": [140.16, 161.91, 146.85, 144.76],
        "grad_allreduce_ms": [10.47, 13.35, 12.01, 11.26],
    },
}
GATE = {
    ("torch", "ddp"): {"step_ms": 42.9, "compute_only_step_ms": 28.98, "grad_allreduce_ms": 5.82},
    ("jax", "dp_fused"): {"step_ms": 179.8, "compute_only_step_ms": 9449.75, "grad_allreduce_ms": 15.69},
}  # fmt: skip


def _row(framework, strategy, metric, value, trial, world_size=2, precision="fp32", run="r1"):
    return {"family": "distributed", "model": "mobilenet_v3_small", "framework": framework,
            "precision": precision, "device_name": "cpu X", "metric": metric, "value": value,
            "status": "ok", "run_id": run, "trial": trial,
            "notebook": "13_distributed", "cell": f"{framework}_{strategy}_{trial}",
            "extra": {"strategy": strategy, "world_size": world_size}}  # fmt: skip


def _records(gate=True, run="r1") -> pd.DataFrame:
    rows = []
    for (framework, strategy), metrics in TIMED.items():
        for trial in range(1, 5):
            for metric, values in metrics.items():
                rows.append(_row(framework, strategy, metric, values[trial - 1], trial, run=run))
            # one worker's step, so that each trial is a round at both world sizes
            step = metrics["step_ms"][trial - 1] / 2
            rows.append(_row(framework, strategy, "step_ms", step, trial, world_size=1, run=run))
        if gate:
            for metric, value in GATE[(framework, strategy)].items():
                rows.append(_row(framework, strategy, metric, value, 0, run=run))
            for metric in dist.DISTRIBUTED_PARITY_METRICS:
                rows.append(_row(framework, strategy, metric, 2e-16, 0, precision="fp64", run=run))
    return pd.DataFrame(rows)


def test_the_tables_read_the_timed_trials_and_leave_the_gate_to_the_parity_table():
    meas = _records()
    table = dist.distributed_table(meas).set_index(["framework", "strategy", "world_size"])
    ddp, fused = table.loc[("torch", "ddp", 2)], table.loc[("jax", "dp_fused", 2)]
    assert ddp.step_ms == pytest.approx(np.median(TIMED[("torch", "ddp")]["step_ms"]))
    assert ddp.step_ms == pytest.approx(53.565)  # 49.79 with the gate pooled in
    assert fused.step_ms == pytest.approx(174.76)  # 179.8 with the gate pooled in
    assert fused.compute_only_step_ms == pytest.approx(145.805)  # not the gate's compilation
    # the same trials as the verdicts' rounds: the tables' medians are unchanged by the gate
    assert dist.distributed_table(_records(gate=False)).equals(dist.distributed_table(meas))
    rounds = dist.scaling_rounds(meas)
    assert set(rounds["round"]) == {1, 2, 3, 4}
    # the parts and the sentences (the index's headline) read the same medians
    parts = dist.step_parts_table(dist.distributed_table(meas)).set_index("strategy")
    assert parts.loc["ddp", "step_ms"] == pytest.approx(53.565)
    gap = dist.gap_sentences(parts.reset_index())[0]
    assert f"step is {174.76 - 53.565:.1f} ms longer than torch ddp's" in gap
    # the gate is a gate: its result, not its steps
    parity = dist.distributed_parity_table(meas)
    assert list(parity.status) == ["ok", "ok"] and (parity.world_size == 2).all()


def test_a_campaign_run_once_keeps_its_one_cell_and_each_pooled_run_its_own_trials():
    once = _records()[lambda frame: frame.trial == 0]  # the gate's cells alone
    table = dist.distributed_table(once).set_index(["framework", "strategy"])
    assert table.loc[("torch", "ddp"), "step_ms"] == GATE[("torch", "ddp")]["step_ms"]
    # a run with trials and a run without, pooled: each is read on its own terms
    pooled = pd.concat([_records(run="r1"), once.assign(run_id="r0")], ignore_index=True)
    kept = dist.timed_rows(dist._distributed_rows(pooled, ["step_ms"]))
    assert set(kept[kept.run_id == "r1"].trial) == {1, 2, 3, 4}
    assert set(kept[kept.run_id == "r0"].trial) == {0}


def test_the_limitations_count_the_timed_trials():
    assert dist.most_trials(_records()) == 4
    lines = sentences.limitations(pd.DataFrame(), _records(), [dist.most_trials(_records())])
    assert not any(line.startswith("Fewer than three trials") for line in lines)
    assert dist.most_trials(_records().iloc[0:0]) == 0
