"""The checks 01_validation relies on: the float64 proof is really float64, the fp32 reference is
really fp32 with TF32 off, and the per-tensor gradient table says what it claims.

Unit tests run on a tiny convolution + BatchNorm + hardsigmoid + linear pair ported through the
same links as the real models; the notebook itself runs once through the runner (``slow``).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import torch
from flax import nnx

from fwbench.families.validation import pair_checks as validation
from fwbench.measure import precision
from fwbench.models import equivalence, porting
from fwbench.models.layers import TorchBatchNorm, stats_dtype
from tests.conftest import REPO, run_cli

RECORDS_MIME = "application/vnd.fwbench.records+json"
FP32_FLAGS = {
    "torch.backends.cuda.matmul.allow_tf32": False,
    "torch.backends.cudnn.allow_tf32": False,
    "torch.float32_matmul_precision": "highest",
    "jax_default_matmul_precision": "highest",
}


@pytest.fixture(autouse=True)
def fp32_afterwards():
    yield
    precision.configure("torch", "fp32")
    precision.configure("jax", "fp32")


class TinyTorch(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)
        self.gate = torch.nn.Hardsigmoid()
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(self.gate(self.bn(self.conv(x))).mean(dim=(2, 3)))


class TinyFlax(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), padding="VALID", use_bias=False, rngs=rngs)
        self.bn = TorchBatchNorm(4)
        self.fc = nnx.Linear(4, 5, rngs=rngs)

    def __call__(self, x):
        return self.fc(jnp.mean(jax.nn.hard_sigmoid(self.bn(self.conv(x))), axis=(1, 2)))


def tiny_links(model: TinyFlax) -> list[porting.Link]:
    return (
        porting.conv_links(model.conv, "conv")
        + porting.batchnorm_links(model.bn, "bn")
        + porting.linear_links(model.fc, "fc")
    )


@pytest.fixture
def tiny():
    """(torch model, Flax twin, NCHW batch, labels), eval mode, randomised weights."""
    torch.manual_seed(0)
    torch_model = TinyTorch()
    equivalence.randomize_torch_(torch_model, seed=0)
    flax_model = nnx.eval_shape(lambda: TinyFlax(nnx.Rngs(0)))  # the port fills every weight
    porting.port_state_dict(tiny_links(flax_model), torch_model.state_dict())
    torch_model.eval()
    flax_model.eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 3, 6, 6)).astype(np.float32)
    return torch_model, flax_model, x, rng.integers(0, 5, size=3)


def test_float64_logits_and_grads_agree_in_float64(tiny):
    torch_model, flax_model, x, labels = tiny
    fp64 = validation.float64_logits_and_grads(torch_model, flax_model, tiny_links, x, labels)
    assert fp64["jax_dtypes"] == ["float64"]
    assert fp64["torch_logits"].dtype == np.float64
    assert validation.max_rel_err(fp64["jax_logits"], fp64["torch_logits"]) <= 1e-13
    table = validation.grad_table(fp64["jax_grads"], fp64["torch_grads"])
    assert set(table.tensor) == {"conv.weight", "bn.weight", "bn.bias", "fc.weight", "fc.bias"}
    assert table.fp64_jax_vs_torch.max() <= 1e-12
    # the originals are untouched: the notebook goes on to use them in fp32
    assert next(torch_model.parameters()).dtype == torch.float32
    assert equivalence.flax_float_dtype(flax_model) == jnp.float32
    # and the fp32 pair is measurably further from float64 than the gate allows
    g_torch32, g_jax32 = validation.fp32_grads(
        torch_model, flax_model, tiny_links, x, labels, "fp32"
    )
    table = validation.grad_table(fp64["jax_grads"], fp64["torch_grads"], g_jax32, g_torch32)
    assert table.jax_fp32_vs_fp64.max() > 1e-9


def test_float64_logits_alone_when_no_labels(tiny):
    torch_model, flax_model, x, _ = tiny
    fp64 = validation.float64_logits_and_grads(torch_model, flax_model, tiny_links, x, None)
    assert "jax_grads" not in fp64 and "torch_grads" not in fp64
    assert fp64["jax_dtypes"] == ["float64"]


def test_a_flax_copy_left_in_float32_is_reported_and_fails_the_gate(tiny, monkeypatch):
    torch_model, flax_model, x, labels = tiny
    monkeypatch.setattr(validation, "flax_float64", lambda model: model)
    fp64 = validation.float64_logits_and_grads(torch_model, flax_model, tiny_links, x, labels)
    assert fp64["jax_dtypes"] == ["float32"]
    table = validation.grad_table(fp64["jax_grads"], fp64["torch_grads"])
    logit_err = validation.max_rel_err(fp64["jax_logits"], fp64["torch_logits"])
    assert logit_err > 1e-10 or table.fp64_jax_vs_torch.max() > 1e-8


def test_the_flax_float64_copy_refuses_to_run_without_x64(tiny):
    _, flax_model, _, _ = tiny
    with pytest.raises(RuntimeError, match="x64"):
        equivalence.flax_float64(flax_model)


def test_the_torch_float64_copy_has_an_exact_hardsigmoid_backward():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Hardsigmoid())
    model64 = equivalence.torch_float64(model)
    assert isinstance(model[1], torch.nn.Hardsigmoid)  # the original keeps torch's module
    assert model[0].weight.dtype == torch.float32
    assert all(p.dtype == torch.float64 for p in model64.parameters())
    x = torch.tensor([-2.5, 0.0, 1.0, 2.9, -4.0, 3.5], dtype=torch.float64, requires_grad=True)
    y = model64[1](x)
    np.testing.assert_array_equal(y.detach().numpy(), np.clip((x.detach().numpy() + 3) / 6, 0, 1))
    y.sum().backward()
    # torch's own float64 kernel returns float32(1/6) = 0.16666667163...
    np.testing.assert_array_equal(x.grad.numpy(), [1 / 6] * 4 + [0.0, 0.0])


def test_batchnorm_statistics_keep_float64_and_promote_bf16_to_float32():
    assert stats_dtype(jnp.bfloat16) == jnp.float32
    assert stats_dtype(jnp.float32) == jnp.float32
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 3, 2)) * 1e-3 + 1.0  # a large mean: fp32 statistics round
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    expected = (x - mean) / np.sqrt(var + 1e-5)
    with equivalence.float64_on_cpu():
        assert stats_dtype(jnp.float64) == jnp.float64
        bn = equivalence.flax_float64(TorchBatchNorm(2))
        y = np.asarray(bn(jnp.asarray(x)))
        assert bn.mean[...].dtype == jnp.float64
    assert y.dtype == np.float64
    assert np.abs(y - expected).max() <= 1e-10


def test_logits_at_reduced_precision_leave_the_models_weights_as_they_were(tiny):
    torch_model, flax_model, x, _ = tiny
    before = {k: v.clone() for k, v in torch_model.state_dict().items()}
    torch_logits, jax_logits = validation.logits_on_device(
        torch_model, flax_model, x, "cpu", "bf16"
    )
    assert validation.max_rel_err(jax_logits, torch_logits) < 0.1  # bf16, but the same function
    for key, value in torch_model.state_dict().items():
        assert value.dtype == before[key].dtype and torch.equal(value, before[key]), key
    assert equivalence.flax_float_dtype(flax_model) == jnp.float32


def test_fp32_reference_runs_with_tf32_off_and_restores_the_requested_precision(monkeypatch):
    precision.configure("torch", "tf32")
    precision.configure("jax", "tf32")
    seen = []

    def spy(torch_model, flax_model, x_nchw, kind, prec):
        seen.append((prec, validation.precision_flags()))
        return np.zeros(2), np.ones(2)

    monkeypatch.setattr(validation, "logits_on_device", spy)
    torch_ref, jax_ref, flags = validation.fp32_reference_logits(None, None, None, "cpu", "tf32")
    assert seen == [("fp32", FP32_FLAGS)]
    assert flags == FP32_FLAGS
    assert list(torch_ref) == [0, 0] and list(jax_ref) == [1, 1]
    after = validation.precision_flags()
    assert after["torch.backends.cuda.matmul.allow_tf32"] is True
    assert after["torch.backends.cudnn.allow_tf32"] is True
    assert after["torch.float32_matmul_precision"] == "high"
    assert after["jax_default_matmul_precision"] == "tensorfloat32"


def test_fp32_reference_restores_the_requested_precision_when_it_fails(monkeypatch):
    precision.configure("torch", "tf32")
    precision.configure("jax", "tf32")

    def broken(*args):
        raise MemoryError("out of memory")

    monkeypatch.setattr(validation, "logits_on_device", broken)
    with pytest.raises(MemoryError):
        validation.fp32_reference_logits(None, None, None, "cpu", "tf32")
    assert validation.precision_flags()["jax_default_matmul_precision"] == "tensorfloat32"
    assert validation.precision_flags()["torch.backends.cudnn.allow_tf32"] is True


def test_grad_table_orders_by_the_fp64_gate_and_measures_fp32_against_fp64():
    torch64 = {"a": np.array([1.0, -2.0]), "b": np.array([1e-3, 0.0])}
    jax64 = {"a": np.array([1.0, -2.0 + 2e-12]), "b": np.array([1e-3 + 1e-12, 0.0])}
    torch32 = {"a": np.array([1.0 + 2e-7, -2.0]), "b": np.array([1e-3, 0.0])}
    jax32 = {"a": np.array([1.0, -2.0]), "b": np.array([1e-3, 3e-9])}
    table = validation.grad_table(jax64, torch64, jax32, torch32)
    assert list(table.tensor) == ["b", "a"]  # b: 1e-12 / 1e-3 = 1e-9 relative, a: 1e-12
    row = table.set_index("tensor").loc["b"]
    assert row.fp64_jax_vs_torch == pytest.approx(1e-9)
    assert row.scale == pytest.approx(5e-4)
    assert row.jax_fp32_vs_fp64 == pytest.approx(3e-6)
    assert row.torch_fp32_vs_fp64 == 0.0
    assert table.set_index("tensor").loc["a"].fp32_jax_vs_torch == pytest.approx(1e-7)
    assert validation.worst(table, "jax_fp32_vs_fp64") == (pytest.approx(3e-6), "b")


def test_grad_table_refuses_gradients_for_different_parameters():
    with pytest.raises(KeyError, match="missing"):
        validation.grad_table({"a": np.ones(2)}, {"a": np.ones(2), "b": np.ones(2)})


def test_per_tensor_is_json_ready_with_non_finite_values_as_none():
    table = pd.DataFrame([{"tensor": "w", "scale": 1.0, "fp64_jax_vs_torch": float("inf")}])
    per_tensor = validation.per_tensor(table)
    assert per_tensor == {"w": {"scale": 1.0, "fp64_jax_vs_torch": None}}
    json.dumps(per_tensor, allow_nan=False)


@pytest.mark.slow
def test_validation_notebook_runs_through_the_runner(tmp_path):
    campaign = tmp_path / "validation.yaml"
    campaign.write_text(
        f"campaign: validation_test\nsteps:\n  - notebook: {REPO}/notebooks/01_validation\n"
        "    params: {model: mobilenet_v3_small, image_size: 32, batch_size: 2, seed: 3}\n"
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (out / "validation_test").iterdir()
    (executed,) = (run_dir / "01_validation").glob("*.ipynb")
    notebook = json.loads(executed.read_text())
    records = {
        (row["metric"], row["framework"]): row
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        for row in output.get("data", {}).get(RECORDS_MIME, [])
    }
    logits = records["fp64_logits_max_rel_err", "jax-vs-torch"]
    grads = records["fp64_grad_max_rel_err", "jax-vs-torch"]
    assert logits["status"] == grads["status"] == "ok"
    assert logits["value"] <= 1e-10 and grads["value"] <= 1e-8
    assert grads["extra"]["jax_dtypes"] == ["float64"]
    assert (
        grads["extra"]["worst_tensor"]
        in records["grad_max_rel_err", "jax-vs-torch"]["extra"]["per_tensor"]
    )
    for side in ("jax", "torch"):
        assert 0 < records["grad_max_rel_err_vs_fp64", side]["value"] < 1e-3
