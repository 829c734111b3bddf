"""The kernel-level price (families/prediction/kernels.py, kernel_prices.py, kernel_bench.py and
notebooks/23_kernels): a model read as the kernels each framework launches, a kernel priced from
measurements of its own kind and shape neighbourhood, a fused XLA kernel priced as one, and a
model's kernels summing to its prediction."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fwbench.families.prediction import kernel_bench, kernel_prices, kernels
from fwbench.families.prediction.kernel_prices import KernelPrices, Setting
from fwbench.families.prediction.kernels import CONV, GROUPED_CONV, MATMUL, MEMORY, Kernel
from fwbench.measure.timing import StopRule
from tests.conftest import REPO, run_cli

# an optimized module as XLA:CPU prints it: a convolution fused with its ReLU, a depthwise
# convolution, a pooling, a reshape, a dot and a loop fusion of two elementwise ops
HLO = """
HloModule jit_forward, entry_computation_layout={(f32[8,32,14,14]{3,2,1,0})->f32[8,64]{1,0}}

%fused_conv_relu (param_0: f32[8,14,14,32], param_1: f32[3,3,32,64]) -> f32[8,14,14,64] {
  %param_0 = f32[8,14,14,32]{3,2,1,0} parameter(0)
  %param_1 = f32[3,3,32,64]{3,2,1,0} parameter(1)
  %convolution.1 = f32[8,14,14,64]{3,2,1,0} convolution(%param_0, %param_1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %constant.2 = f32[] constant(0)
  %broadcast.3 = f32[8,14,14,64]{3,2,1,0} broadcast(%constant.2), dimensions={}
  ROOT %maximum.4 = f32[8,14,14,64]{3,2,1,0} maximum(%convolution.1, %broadcast.3)
}

%fused_dw (param_0.1: f32[8,14,14,64], param_1.1: f32[5,5,1,64]) -> f32[8,7,7,64] {
  %param_0.1 = f32[8,14,14,64]{3,2,1,0} parameter(0)
  %param_1.1 = f32[5,5,1,64]{3,2,1,0} parameter(1)
  ROOT %convolution.5 = f32[8,7,7,64]{3,2,1,0} convolution(%param_0.1, %param_1.1), window={size=5x5 stride=2x2 pad=2_2x2_2}, dim_labels=b01f_01io->b01f, feature_group_count=64
}

%fused_scale (param_0.4: f32[8,64]) -> f32[8,64] {
  %param_0.4 = f32[8,64]{1,0} parameter(0)
  %multiply.8 = f32[8,64]{1,0} multiply(%param_0.4, %param_0.4)
  ROOT %add.9 = f32[8,64]{1,0} add(%multiply.8, %param_0.4)
}

ENTRY %main.20 (Arg_0.1: f32[8,32,14,14]) -> f32[8,64] {
  %Arg_0.1 = f32[8,32,14,14]{3,2,1,0} parameter(0)
  %transpose.13 = f32[8,14,14,32]{3,2,1,0} transpose(%Arg_0.1), dimensions={0,2,3,1}
  %constant.14 = f32[3,3,32,64]{3,2,1,0} constant({...})
  %fusion.1 = f32[8,14,14,64]{3,2,1,0} fusion(%transpose.13, %constant.14), kind=kOutput, calls=%fused_conv_relu
  %constant.15 = f32[5,5,1,64]{3,2,1,0} constant({...})
  %fusion.2 = f32[8,7,7,64]{3,2,1,0} fusion(%fusion.1, %constant.15), kind=kOutput, calls=%fused_dw
  %reduce-window.16 = f32[8,1,1,64]{3,2,1,0} reduce-window(%fusion.2, %constant.14), window={size=1x7x7x1 stride=1x7x7x1}, to_apply=%max
  %bitcast.17 = f32[8,64]{1,0} bitcast(%reduce-window.16)
  %constant.18 = f32[64,64]{1,0} constant({...})
  %dot.18 = f32[8,64]{1,0} dot(%bitcast.17, %constant.18), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %fusion.5 = f32[8,64]{1,0} fusion(%dot.18), kind=kLoop, calls=%fused_scale
}
"""


def test_an_optimized_module_reads_as_its_kernels_each_fusion_one():
    got = kernels.xla_kernels(HLO)
    assert [k.name for k in got] == [
        "transpose.13", "fusion.1", "fusion.2", "reduce-window.16", "dot.18", "fusion.5",
    ]  # fmt: skip
    transpose, conv, depthwise, pool, dot, scale = got
    # the convolution and the ReLU it fused are one conv kernel, its shape read off the labels
    assert conv == Kernel(CONV, (8, 32, 64, 3, 3, 1, 14, 14, 1), "fusion.1")
    assert depthwise == Kernel(GROUPED_CONV, (8, 64, 64, 5, 5, 2, 7, 7, 64), "fusion.2")
    assert dot == Kernel(MATMUL, (1, 8, 64, 64), "dot.18")
    # memory-bound: the bytes read and written, and the computing ops fused
    assert transpose == Kernel(MEMORY, (2 * 8 * 32 * 14 * 14 * 4, 1), "transpose.13")
    assert scale == Kernel(MEMORY, (2 * 8 * 64 * 4, 2), "fusion.5")
    assert pool.kind == MEMORY
    assert conv.flops == 2 * 8 * 14 * 14 * 64 * 3 * 3 * 32
    assert depthwise.flops == 2 * 8 * 7 * 7 * 64 * 5 * 5


def test_a_module_without_an_entry_is_refused():
    with pytest.raises(ValueError, match="ENTRY"):
        kernels.xla_kernels("HloModule m\n")


def test_a_kernel_takes_its_kinds_fields_only():
    with pytest.raises(ValueError, match="takes"):
        Kernel(MATMUL, (1, 2, 3))
    with pytest.raises(ValueError, match="takes"):
        Kernel("attention", (1,))


def test_what_xla_compiled_is_read_from_a_real_compile():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def forward(x, w):
        y = lax.conv_general_dilated(
            x, w, (2, 2), [(1, 1), (1, 1)], dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return jax.nn.relu(y).mean(axis=(1, 2)) @ jnp.ones((4, 10))  # fmt: skip

    x, w = jnp.ones((2, 16, 16, 3)), jnp.ones((3, 3, 3, 4))
    text = jax.jit(forward).lower(x, w).compile().as_text()
    got = kernels.xla_kernels(text)
    convs = [k for k in got if k.kind == CONV]
    assert [k.shape for k in convs] == [(2, 3, 4, 3, 3, 2, 8, 8, 1)]
    assert sum(k.flops for k in got) >= convs[0].flops


def test_eager_pytorch_reads_as_its_aten_ops_views_free():
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    ).to("meta")
    got = kernels.torch_kernels(model.eval(), torch.empty(2, 3, 8, 8, device="meta"))
    assert [k.kind for k in got] == [CONV, MEMORY, GROUPED_CONV, MATMUL]
    assert got[0].shape == (2, 3, 8, 3, 3, 2, 4, 4, 1)
    assert got[2].shape == (2, 8, 8, 3, 3, 1, 4, 4, 8)
    assert got[3].shape == (1, 2, 10, 128)
    assert got[1].shape == (2 * 2 * 8 * 4 * 4 * 4, 1)  # relu reads and writes its tensor


@pytest.mark.slow
def test_both_frameworks_run_the_same_convolutions_and_matmuls():
    # ResNet-18 at 32 px: the twin's compiled program and PyTorch's aten ops hold the same
    # convolutions and classifier, whatever XLA fused around them. Its last stages' outputs are
    # 2x2 and 1x1, which XLA runs with image and filter swapped: the kernels say what was asked
    from collections import Counter

    found = {}
    for framework in ("torch", "jax"):
        ran = kernels.model_kernels("resnet18", framework, 2, 32)
        found[framework] = Counter((k.kind, k.shape) for k in ran if k.kind != MEMORY)
    assert found["jax"] == found["torch"]
    assert sum(n for (kind, _), n in found["jax"].items() if kind == CONV) == 20


def _table(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["framework", "kind", "shape", "seconds"])


def _conv(out: int, width: int = 64, k: int = 3) -> Kernel:
    return kernels.conv_kernel(1, width, width, k, k, 1, out, out, 1)


def test_a_measured_shape_costs_its_measurement_and_another_its_own_kinds_neighbours():
    # convolutions at a tenth of the reference rate; memory kernels a thousand times slower than
    # theirs: a convolution's price must come from convolutions alone
    convs = [_conv(out) for out in (4, 7, 14, 28, 56)]
    rows = [("jax", CONV, k.shape, 10 * kernel_prices.reference_seconds(k)) for k in convs]
    memory = [Kernel(MEMORY, (2**p, 1)) for p in (12, 16, 20, 24)]
    rows += [("jax", MEMORY, k.shape, 1000 * kernel_prices.reference_seconds(k)) for k in memory]
    prices = KernelPrices().fit(_table(rows))
    assert prices.price("jax", [convs[2]])[0] == pytest.approx(rows[2][3])
    unseen = _conv(21)
    priced = prices.price("jax", [unseen])[0]
    assert priced == pytest.approx(10 * kernel_prices.reference_seconds(unseen), rel=1e-6)
    # a shape larger than any measured one costs more than its largest neighbour
    assert prices.price("jax", [_conv(112)])[0] > rows[4][3]
    with pytest.raises(KeyError, match="matmul"):
        prices.price("jax", [Kernel(MATMUL, (1, 8, 8, 8))])
    with pytest.raises(KeyError, match="torch"):
        prices.price("torch", [convs[0]])


def test_a_micro_benchmark_that_took_no_time_is_refused():
    with pytest.raises(ValueError, match="no time"):
        KernelPrices().fit(_table([("torch", CONV, _conv(4).shape, 0.0)]))
    with pytest.raises(ValueError, match="no micro-benchmarks"):
        KernelPrices().fit(_table([]))


def test_a_models_kernels_sum_to_its_prediction():
    found = [_conv(14), _conv(7), Kernel(MEMORY, (4096, 2))]
    rows = [("torch", k.kind, k.shape, s) for k, s in zip(found, (3e-3, 1e-3, 2e-5), strict=True)]
    prices = KernelPrices().fit(_table(rows)).price("torch", found)
    assert list(prices) == [3e-3, 1e-3, 2e-5]
    # a setting fitted on training models whose time is 20 µs of overhead + 2x their kernels
    summed = np.array([1e-3, 4e-3, 2e-2])
    setting = Setting.fit(20e-6, summed, 20e-6 + 2 * summed)
    assert setting.scale == pytest.approx(2.0) and setting.fitted_on == 3
    point, low, high = setting.predict(float(prices.sum()))
    assert point == pytest.approx(20e-6 + 2 * prices.sum())
    assert low == pytest.approx(point) and high == pytest.approx(point)
    shares = kernel_prices.kind_shares(found, prices)
    assert shares[CONV] == pytest.approx(4e-3 / prices.sum())
    assert sum(shares.values()) == pytest.approx(1.0)


def test_a_setting_says_how_far_its_training_models_stray():
    summed = np.array([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])
    measured = summed * np.array([0.8, 1.0, 1.0, 1.0, 1.25])
    setting = Setting.fit(0.0, summed, measured)
    assert setting.scale == pytest.approx(1.0)
    assert setting.low < 1.0 < setting.high
    with pytest.raises(ValueError, match="one measured model"):
        Setting.fit(0.0, [], [])


def test_leaving_one_out_prices_a_kernel_from_the_others_only():
    convs = [_conv(out) for out in (4, 7, 14, 28, 56)]
    rows = [("jax", CONV, k.shape, 5 * kernel_prices.reference_seconds(k)) for k in convs]
    held = kernel_prices.leave_one_out(_table(rows))
    assert len(held) == 5 and held.error_pct.abs().max() < 1e-6
    # one kernel twice as slow as its neighbourhood is priced as they are: -50%
    rows[2] = (*rows[2][:3], 2 * rows[2][3])
    held = kernel_prices.leave_one_out(_table(rows))
    (odd,) = held.error_pct[held["shape"].map(lambda s: s == convs[2].shape)]
    assert odd == pytest.approx(-50.0)


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_kernel_is_timed_alone_with_the_empty_call_taken_off(framework):
    rule = StopRule(min_iters=3, min_seconds=0.01)
    empty = kernel_bench.empty_call_seconds(framework, rule)
    assert 0 < empty < 0.01
    # a jitted model pays a call's cost once, an eager one per op
    assert kernel_bench.call_cost(framework, empty) == (empty if framework == "jax" else 0.0)
    small = kernel_bench.measure_kernel(framework, _conv(4, 8), rule, empty_s=empty)
    large = kernel_bench.measure_kernel(framework, _conv(28, 64), rule, empty_s=empty)
    assert 0 < small < large
    chain = Kernel(MEMORY, (2**16, 3 if framework == "jax" else 1))
    assert kernel_bench.measure_kernel(framework, chain, rule, empty_s=empty) > 0


def test_the_grid_spans_the_kinds_and_torch_runs_one_op_per_kernel():
    for framework in ("torch", "jax"):
        grid = kernel_bench.grid(framework)
        assert {k.kind for k in grid} == {CONV, GROUPED_CONV, MATMUL, MEMORY}
        assert len(grid) == len(set(grid))
        outputs = {k.fields["hout"] for k in grid if k.kind == CONV}
        assert {2, 4, 112} <= outputs  # the small outputs XLA:CPU handles worst, and the stem's
    assert {k.fields["ops"] for k in kernel_bench.grid("torch") if k.kind == MEMORY} == {1}


def test_the_kernels_notebook_records_a_time_per_kernel(tmp_path):
    campaign = tmp_path / "kernels.yaml"
    campaign.write_text(
        f"campaign: kernels_test\nsteps:\n  - notebook: {REPO}/notebooks/23_kernels\n"
        "    params: {batch_sizes: [1], min_iters: 2, min_seconds: 0.01, max_kernels: 3}\n"
        "    grid:\n      framework: [torch, jax]\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out, "--no-index")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from fwbench.results.records import RECORDS_MIME

    records = [
        row
        for executed in (out / "kernels_test").glob("*/23_kernels/*.ipynb")
        for cell in json.loads(executed.read_text())["cells"]
        for output in cell.get("outputs", [])
        for row in output.get("data", {}).get(RECORDS_MIME, [])
    ]
    for framework in ("torch", "jax"):
        mine = [r for r in records if r["framework"] == framework]
        timed = [r for r in mine if r["metric"] == "kernel_s"]
        assert len(timed) == 3 and all(r["value"] > 0 for r in timed)
        assert all(r["family"] == "prediction" and r["extra"]["kind"] for r in timed)
        assert [r["metric"] for r in mine].count("empty_call_s") == 1


def test_the_predictor_fits_a_scale_per_setting_and_predicts_from_kernels():
    import duckdb

    from fwbench.families.prediction.kernel_model import KernelPredictor, micro_benchmarks

    con = duckdb.connect()
    con.execute(
        "create table measurements (family varchar, status varchar, metric varchar, "
        "value double, extra json, framework varchar, device_name varchar, threads integer)"
    )
    cpu = "AMD EPYC (family 26, model 2)"
    shapes = {"small": _conv(7), "large": _conv(28)}
    for framework, scale in (("torch", 1.0), ("jax", 3.0)):
        for kernel in shapes.values():
            seconds = scale * kernel_prices.reference_seconds(kernel)
            extra = json.dumps({"kind": kernel.kind, "shape": list(kernel.shape)})
            con.execute(
                "insert into measurements values ('prediction', 'ok', 'kernel_s', ?, ?, ?, ?, 2)",
                [seconds, extra, framework, cpu],
            )
        con.execute(
            "insert into measurements values ('prediction', 'ok', 'empty_call_s', ?, '{}', ?, ?, 2)",
            [1e-5 if framework == "jax" else 2e-6, framework, cpu],
        )
    table, empty = micro_benchmarks(con, cpu, 2)
    assert len(table) == 4 and empty == {"jax": 1e-5, "torch": 2e-6}
    assert micro_benchmarks(con, cpu, 1)[0].empty

    # a model is one large convolution per batch image; measured: call cost + 2x its kernels
    def kernels_of(model, framework, mode, batch, size):
        return [shapes["large"]] * batch

    predictor = KernelPredictor(table, empty, kernels_of)
    large = 3.0 * kernel_prices.reference_seconds(shapes["large"])
    training = pd.DataFrame(
        {
            "model": ["a", "a", "b"],
            "framework": ["jax"] * 3,
            "mode": ["jit"] * 3,
            "batch_size": [1, 2, 4],
            "image_size": [224] * 3,
            "seconds": [1e-5 + 2 * large * b for b in (1, 2, 4)],
        }
    )
    # a compiled PyTorch mode is not priced from kernels: it is left out of the fit
    compiled = training.iloc[:1].assign(framework="torch", mode="compile")
    predictor.fit(pd.concat([training, compiled]))
    assert set(predictor.settings) == {("jax", "jit")}
    got = predictor.predict(training.drop(columns="seconds").iloc[[2]].assign(batch_size=8))
    assert got.predicted_s.iloc[0] == pytest.approx(1e-5 + 2 * large * 8)
    assert got["share:conv"].iloc[0] == 1.0 and got["share:memory"].iloc[0] == 0.0
    with pytest.raises(KeyError, match="torch eager"):
        predictor.predict(training.iloc[:1].assign(framework="torch", mode="eager"))


def test_a_lineage_is_predicted_with_a_scale_fitted_on_the_other_lineages_only():
    from fwbench.families.prediction.kernel_model import KernelPredictor, lineage_holdout

    kernel = _conv(14)
    table = _table([("jax", CONV, kernel.shape, 1e-3), ("torch", CONV, kernel.shape, 1e-3)])
    predictor = KernelPredictor(table, {"jax": 0.0}, lambda model, fw, mode, b, s: [kernel] * b)
    # ResNets run at 5x their kernels, the other lineages at 2x; torch eager only in one lineage
    scale = {"resnet18": 5.0, "resnet50": 5.0, "vit_b_16": 2.0, "mobilenet_v3_small": 2.0}
    rows = [
        {"model": m, "framework": "jax", "mode": "jit", "batch_size": b, "image_size": 224,
         "seconds": s * 1e-3 * b}
        for m, s in scale.items() for b in (1, 8)
    ] + [{"model": "vit_b_16", "framework": "torch", "mode": "eager", "batch_size": 1,
          "image_size": 224, "seconds": 1e-3}]  # fmt: skip
    held = lineage_holdout(predictor, pd.DataFrame(rows))
    resnet = held[(held.model == "resnet50") & (held.batch_size == 8)].iloc[0]
    assert resnet.fold == "resnet" and resnet.predicted == pytest.approx(2.0 * 8e-3)
    vit = held[(held.model == "vit_b_16") & (held.framework == "jax")]
    assert vit.predicted.to_numpy() == pytest.approx(
        np.array([1, 8]) * 1e-3 * np.median([5, 5, 2] * 2)
    )
    eager = held[held.framework == "torch"].iloc[0]
    assert not eager.setting_seen and np.isnan(eager.predicted)
    assert (held["share:conv"] == 1.0).all() and list(held.index) == list(range(len(rows)))
