"""Each op category's efficiency from the per-op profiles: a real PyTorch profile of ResNet-18
priced against its own shapes stays within the roofline and sums back to what was measured; a
fused block's time is shared by roofline; the lineage hold-out never learns from the lineage it
prices."""

import numpy as np
import pandas as pd
import pytest

from fwbench.families.prediction import efficiency as eff
from fwbench.families.prediction import features
from fwbench.vocab import OVERHEAD
from tests.test_profiling import _TorchSide

SETTING = {
    "framework": "torch",
    "mode": "eager",
    "device": "cpu",
    "device_name": "CPU A (family 1, model 2)",
    "precision": "fp32",
    "threads": 2,
}


def _joined(feature_row: dict, categories: dict, **ceiling) -> pd.DataFrame:
    """Profile rows (one per category) joined with a model's features and a ceiling, as
    ``efficiency.build`` joins them."""
    base = {**SETTING, **feature_row, "peak_tflops": 0.2, "bandwidth_gbs": 10.0, **ceiling}
    return pd.DataFrame([{**base, "category": c, "ms": ms} for c, ms in categories.items()])


@pytest.fixture(scope="module")
def resnet18_profile(tmp_path_factory):
    import os

    import torch

    from fwbench.families.inference.profiling import profile_torch
    from fwbench.models import build_torch

    os.environ["FWBENCH_EXECUTED_DIR"] = str(tmp_path_factory.mktemp("traces"))

    torch.manual_seed(0)
    model = build_torch("resnet18", seed=0, image_size=64).eval()
    with torch.no_grad():
        profile = profile_torch(_TorchSide(model), torch.randn(2, 3, 64, 64), calls=3, batch_size=2)
    del os.environ["FWBENCH_EXECUTED_DIR"]
    return dict(profile.rows()), features.torch_features("resnet18", 2, 64).row()


def test_a_real_profile_stays_within_the_roofline_and_sums_back(resnet18_profile):
    categories, feature_row = resnet18_profile
    times = eff.category_times(_joined(feature_row, categories))
    table = eff.efficiencies(times)
    priced = table[table.category != eff.OVERHEAD_TERM]
    assert len(priced) >= 3  # convolutions, normalisation, activations at least
    assert ((priced.efficiency > 0) & (priced.efficiency <= 1)).all()
    overhead = table[table.category == eff.OVERHEAD_TERM].iloc[0]
    assert overhead.per == "op"
    assert overhead.overhead_us * feature_row["op_count"] / 1e3 == pytest.approx(
        categories[OVERHEAD]
    )
    # priced by its own efficiencies, the model costs what its priced categories measured
    row = _joined(feature_row, {"x": 0.0}).iloc[:1]
    measured = times.measured_s.sum()
    assert eff.per_op_seconds(row, table).iloc[0] == pytest.approx(measured, rel=1e-9)


def test_a_measurement_below_the_floor_is_clipped_to_the_roofline(resnet18_profile):
    categories, feature_row = resnet18_profile
    # a peak and bandwidth a thousand times too low put every roofline above its measurement
    times = eff.category_times(
        _joined(feature_row, categories, peak_tflops=2e-4, bandwidth_gbs=1e-2)
    )
    table = eff.efficiencies(times)
    priced = times[times.category != eff.OVERHEAD_TERM]
    assert (priced.roofline_s > priced.measured_s).any()
    assert table.efficiency.max() == 1.0


def _row(model, categories, flops, written=None, mode="jit", framework="jax"):
    row = {"model": model, "batch_size": 1, "image_size": 224, "op_count": 100, "param_bytes": 0}
    for c in ("convolution", "normalisation", "matmul/linear", "elementwise/activation"):
        row[f"flops:{c}"] = flops.get(c, 0.0)
        row[f"bytes:{c}"] = (written or {}).get(c, 0.0)
    frame = _joined(row, categories)
    return frame.assign(framework=framework, mode=mode)


def test_a_fused_block_shares_its_time_by_roofline():
    # 2e8 FLOPs of convolution (1 ms at 0.2 TFLOP/s) and 1e7 bytes of normalisation (1 ms at 10
    # GB/s), run as one 4 ms kernel: each part took 2 ms, each at half its roofline
    fused = "convolution + normalisation"
    flops = {"convolution": 2e8}
    written = {"normalisation": 1e7}
    times = eff.category_times(_row("resnet18", {fused: 4.0, OVERHEAD: 0.5}, flops, written))
    parts = times.set_index("category")
    assert parts.loc["convolution", "measured_s"] == pytest.approx(2e-3)
    assert parts.loc["normalisation", "measured_s"] == pytest.approx(2e-3)
    table = eff.efficiencies(times)
    # this CPU's rows; the same again for every CPU pooled (eff.ANY_CPU)
    assert set(table.device_name) == {SETTING["device_name"], eff.ANY_CPU}
    table = table[table.device_name == SETTING["device_name"]].set_index("category")
    assert table.loc["convolution", "efficiency"] == pytest.approx(0.5)
    assert table.loc["normalisation", "efficiency"] == pytest.approx(0.5)
    # a compiled mode's time outside the ops is per call, whatever the ops
    assert table.loc[eff.OVERHEAD_TERM, "per"] == "call"
    assert table.loc[eff.OVERHEAD_TERM, "overhead_us"] == pytest.approx(500.0)


def test_the_lineage_hold_out_never_learns_from_the_lineage_it_prices():
    # ResNets and ViTs profiled; the ViTs alone ran matmuls, at a tenth of the roofline
    resnet = _row("resnet18", {"convolution": 2.0, OVERHEAD: 0.1}, {"convolution": 2e8})
    resnext = _row("resnext50_32x4d", {"convolution": 4.0, OVERHEAD: 0.1}, {"convolution": 2e8})
    vit = _row("vit_b_16", {"matmul/linear": 10.0, OVERHEAD: 0.1}, {"matmul/linear": 2e8})
    times = eff.category_times(pd.concat([resnet, resnext, vit], ignore_index=True))
    table = pd.concat([resnet, resnext, vit]).drop_duplicates("model").drop(columns="category")
    table = table.assign(seconds=[2.1e-3, 4.1e-3, 10.1e-3])
    held = eff.lineage_holdout(times, table).set_index("model")
    # a ViT's matmuls were only ever profiled in ViTs: with them held out it cannot be priced
    assert "vit_b_16" not in held.index
    # ResNet and ResNeXt are one lineage: each is priced by neither (no convolution left)
    assert held.empty
    # a ResNet priced with the ViTs held out learns from both ResNets: a third of the roofline
    no_vit = eff.efficiencies(times[times.model != "vit_b_16"])
    priced = eff.per_op_seconds(table[table.model == "resnet18"], no_vit).iloc[0]
    assert priced == pytest.approx(1e-3 / (2e-3 / 6e-3) + 100e-6)


def _per_op(models, lineages, per_op_s, index=None):
    """Two per-op hold-out rows of one setting, measured at 1 s and 2 s."""
    return pd.DataFrame(
        {
            **{k: [v, v] for k, v in SETTING.items()},
            "model": models,
            "batch_size": [1, 1],
            "image_size": [224, 224],
            "lineage": lineages,
            "seconds": [1.0, 2.0],
            "per_op_s": per_op_s,
        },
        index=index,
    )


def test_the_hold_out_table_scores_each_setting_and_all():
    per_op = _per_op(["a", "b"], ["x", "y"], per_op_s=[1.1, 1.0])
    table = eff.holdout_table(per_op).set_index("setting")
    assert table.loc["all", "per_op_mape_pct"] == pytest.approx(30.0)
    assert table.loc["all", "per_op_within_15pct"] == pytest.approx(50.0)
    assert table.loc["torch eager", "rows"] == 2
    assert np.isnan(table.loc["all"].get("cost_mape_pct", np.nan))


def test_a_cpu_nobody_profiled_is_priced_by_every_cpus_shares_at_its_own_ceilings():
    profiled = _row("resnet18", {"convolution": 2.0, OVERHEAD: 0.1}, {"convolution": 2e8})
    table = eff.efficiencies(eff.category_times(profiled))
    other = profiled.iloc[:1].assign(device_name="CPU B (family 3, model 4)", peak_tflops=0.4)
    # half the roofline on CPU A; CPU B's peak is twice A's, so its convolutions take half as long
    assert eff.per_op_seconds(other, table).iloc[0] == pytest.approx(1e-3 + 100e-6)
    assert eff.per_op_seconds(profiled.iloc[:1], table).iloc[0] == pytest.approx(2e-3 + 100e-6)


def test_the_hold_out_table_matches_the_predictors_rows_one_to_one():
    # one configuration measured in two runs: two rows of the table, each scored once
    per_op = _per_op(["a", "a"], ["x", "x"], per_op_s=[1.0, 1.0], index=[7, 9])
    held = pd.DataFrame({"cost": [1.5, 2.0], "predicted": [1.0, 3.0]}, index=[7, 9])
    table = eff.holdout_table(per_op, held).set_index("setting")
    assert table.loc["all", "rows"] == 2
    assert table.loc["all", "per_op_mape_pct"] == pytest.approx(25.0)
    assert table.loc["all", "cost_mape_pct"] == pytest.approx(25.0)
    assert table.loc["all", "predicted_mape_pct"] == pytest.approx(25.0)
