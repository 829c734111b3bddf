"""Training parity in float64, the zero-gradient skip rule, and training-step FLOPs per side.

A tiny twin pair holds every structure the rule is about: a BatchNorm whose output reaches the
loss only through a 1x1 convolution and another training-mode BatchNorm (so its bias has an
exact gradient of zero), as EfficientNet-B0's and MobileNetV3's projection layers do.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from fwbench.families.training import optim, parity, recording, steps
from fwbench.models import porting
from fwbench.models.layers import TorchBatchNorm
from fwbench.results.records import Recorder


class TorchProjNet(torch.nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.project = torch.nn.Conv2d(8, 6, 1, bias=False)
        self.project_bn = torch.nn.BatchNorm2d(6)  # no activation: its bias is a pure shift
        self.expand = torch.nn.Conv2d(6, 8, 1, bias=False)
        self.expand_bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, classes)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = self.project_bn(self.project(x))
        x = torch.relu(self.expand_bn(self.expand(x)))
        return self.fc(x.mean(dim=(2, 3)))


class FlaxProjNet(nnx.Module):
    def __init__(self, classes: int = 10):
        rngs = nnx.Rngs(0)
        self.conv = nnx.Conv(3, 8, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn = TorchBatchNorm(8)
        self.project = nnx.Conv(8, 6, (1, 1), use_bias=False, rngs=rngs)
        self.project_bn = TorchBatchNorm(6)
        self.expand = nnx.Conv(6, 8, (1, 1), use_bias=False, rngs=rngs)
        self.expand_bn = TorchBatchNorm(8)
        self.fc = nnx.Linear(8, classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv(x)))
        x = self.project_bn(self.project(x))
        x = nnx.relu(self.expand_bn(self.expand(x)))
        return self.fc(x.mean(axis=(1, 2)))


def links(model) -> list[porting.Link]:
    return [
        *porting.conv_links(model.conv, "conv"),
        *porting.batchnorm_links(model.bn, "bn"),
        *porting.conv_links(model.project, "project"),
        *porting.batchnorm_links(model.project_bn, "project_bn"),
        *porting.conv_links(model.expand, "expand"),
        *porting.batchnorm_links(model.expand_bn, "expand_bn"),
        *porting.linear_links(model.fc, "fc"),
    ]


def twins(seed: int = 0):
    torch.manual_seed(seed)
    reference, twin = TorchProjNet(), FlaxProjNet()
    with torch.no_grad():  # non-default affine values, so a swapped scale and bias would show
        for bn in (reference.bn, reference.project_bn, reference.expand_bn):
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
        reference.project_bn.bias.zero_()  # as initialised in real nets: its drift is all there is
    porting.port_state_dict(links(twin), reference.state_dict())
    return reference, twin


def noise_batches(n: int, batch: int = 4, size: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((batch, 3, size, size), dtype=np.float32), rng.integers(0, 10, batch))
        for _ in range(n)
    ]


def compare(name: str, precision: str = "fp64", n: int = 5, lr: float = 0.05):
    reference, twin = twins()
    config = optim.OptimConfig(name, lr=lr, schedule="cosine", total_steps=n)
    return parity.compare_training(
        reference, twin, links, noise_batches(n), config, precision=precision, name="proj"
    )


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_fp64_training_parity_passes_its_gate(name):
    result = compare(name)
    assert result.gated and result.passed, result.failures()
    assert result.loss_max_rel <= parity.LOSS_TOLERANCE
    assert result.worst_param[1] <= parity.PARAM_TOLERANCE
    assert result.worst_buffer[1] <= parity.PARAM_TOLERANCE
    assert result.torch_losses[0] != result.torch_losses[-1]  # it trained
    # the gate compares everything else: every parameter but the one zero-gradient bias
    assert set(result.gated_param_errors) == set(result.param_errors) - {"project_bn.bias"}


def test_skip_rule_lists_the_exact_zero_gradient_bias_under_adamw_and_is_needed():
    result = compare("adamw")
    assert list(result.skipped_params) == ["project_bn.bias"]
    ratios = result.skipped_params["project_bn.bias"]
    assert (
        ratios["torch"] < parity.ZERO_GRADIENT_RATIO and ratios["jax"] < parity.ZERO_GRADIENT_RATIO
    )
    # the running mean right after it is shifted by its drift; nothing else is skipped
    assert result.skipped_statistics == ["expand_bn.running_mean"]
    # Adam normalised rounding noise into steps of random sign: without the rule the gate would
    # fail on the bias, while the losses still agree
    assert result.param_errors["project_bn.bias"] > parity.PARAM_TOLERANCE
    assert result.loss_max_rel <= parity.LOSS_TOLERANCE
    unskipped = parity.ParityResult(
        **{**result.__dict__, "skipped_params": {}, "skipped_statistics": []}
    )
    assert not unskipped.passed


def test_only_the_batchnorm_right_after_a_moved_zero_gradient_bias_sees_the_shift():
    reference, _ = twins()
    config = optim.OptimConfig("sgd")
    torch_side = steps.TorchTrainer(reference, config, precision="fp64")
    (x, _), *_ = noise_batches(1)
    names = ["project_bn.bias"]
    assert parity.statistics_shifted_by(torch_side, names, x) == ["expand_bn.running_mean"]
    # a tensor the loss depends on moves the BatchNorms after it, up to the next pure shift
    shifted = parity.statistics_shifted_by(torch_side, ["conv.weight"], x)
    assert shifted == ["bn.running_mean", "project_bn.running_mean"]
    assert parity.statistics_shifted_by(torch_side, [], x) == []


def test_zero_gradient_rule_needs_every_step_and_both_sides():
    small, big = {"a": 1e-17, "b": 1.0}, {"a": 1e-3, "b": 1.0}
    assert list(parity.zero_gradient_params([small, small], [small, small])) == ["a"]
    # exactly zero on the first step only (a head that starts at zero) is not skipped
    assert parity.zero_gradient_params([small, big], [small, big]) == {}
    # one side with a real gradient means the ports differ: never skipped
    assert parity.zero_gradient_params([small], [big]) == {}


def test_fp64_path_computes_in_float64_and_leaves_jax_at_32_bits():
    reference, twin = twins()
    config = optim.OptimConfig("adamw", lr=0.05, schedule="constant")
    (x, y), *_ = noise_batches(1)
    torch_side = steps.TorchTrainer(reference, config, precision="fp64")
    jax_side = steps.JaxTrainer(twin, config, precision="fp64")
    torch_loss = torch_side.step(torch_side.put(x, y))
    jax_loss = jax_side.step(jax_side.put(x, y))
    assert torch_loss.dtype == torch.float64 and jax_loss.dtype == jnp.float64
    leaves = jax.tree.leaves((jax_side.params, jax_side.rest, jax_side.opt_state))
    floating = [a for a in leaves if jnp.issubdtype(a.dtype, jnp.floating)]
    assert floating and all(a.dtype == jnp.float64 for a in floating)
    assert all(v.dtype == np.float64 for v in jax_side.state_dict(links).values())
    # an fp32 twin differs from the fp64 reference by fp32 rounding; the fp64 one by fp64's
    _, twin32 = twins()
    jax32 = steps.JaxTrainer(twin32, config, precision="fp32")
    loss32 = jax32.step(jax32.put(x, y))
    rel64 = abs(float(jax_loss) - float(torch_loss)) / float(torch_loss)
    rel32 = abs(float(loss32) - float(torch_loss)) / float(torch_loss)
    assert rel64 < 1e-13 < 1e-9 < rel32
    assert jnp.ones(1).dtype == jnp.float32  # x64 stayed inside the trainer


def test_optax_learning_rate_is_float64_under_x64():
    for schedule in ("constant", "cosine"):
        config = optim.OptimConfig("adamw", lr=1e-3, schedule=schedule, total_steps=7)
        jax_schedule = optim.optax_schedule(config)
        with jax.enable_x64(True):
            rate = jax.jit(jax_schedule)(3)
        assert rate.dtype == jnp.float64
        assert abs(float(rate) - config.lr * config.lr_factor(3)) <= 1e-15 * config.lr
        assert jax_schedule(3).dtype == jnp.float32


def test_fp32_divergence_step_and_the_gate_leaving_out_skipped_tensors():
    drifting = parity.ParityResult(
        "proj", "fp32", {}, [2.0, 1.9, 1.8], [2.0, 1.9001, 1.81], [0.0, 5e-5, 5.6e-3], {}, {}, 0, 0
    )
    assert drifting.divergence_step() == 2
    steady = parity.ParityResult("proj", "fp32", {}, [2.0], [2.0], [1e-7], {}, {}, 0, 0)
    assert steady.divergence_step() is None
    gated = parity.ParityResult(
        "proj",
        "fp64",
        {},
        [2.0],
        [2.0],
        [1e-15],
        {"fc.weight": 1e-7},
        {"bn.running_mean": 1.0},
        0,
        0,
    )
    assert len(gated.failures()) == 2
    gated.skipped_params = {"fc.weight": {"torch": 0.0, "jax": 0.0}}
    gated.skipped_statistics = ["bn.running_mean"]
    assert gated.passed and gated.worst_param == (None, 0.0)


def test_parity_records_keep_fp32_curves_and_add_fp64_gate_rows():
    fp64 = compare("adamw", n=3)
    fp32 = parity.ParityResult(
        "proj", "fp32", {}, [2.0, 1.9], [2.0, 1.91], [0.0, 5.3e-3], {"w": 0.1}, {}, 0, 0
    )
    rec = Recorder("training", model="proj")
    recording.add_parity(rec, fp64, batch_size=4)
    recording.add_parity(rec, fp32, batch_size=4)
    rows = {r["metric"]: r for r in rec.rows}
    assert rows["fp64_loss_parity_max_rel"]["precision"] == "fp64"
    assert rows["fp64_loss_parity_max_rel"]["status"] == "ok"
    assert rows["fp64_loss_parity_max_rel"]["extra"]["losses"]["torch"] == fp64.torch_losses
    skipped = rows["fp64_param_parity_max_rel"]["extra"]["skipped"]
    assert list(skipped) == ["project_bn.bias"] and skipped["project_bn.bias"]["error"] > 1e-8
    assert rows["fp64_bn_stats_parity_max_rel"]["extra"]["skipped"].keys() == {
        "expand_bn.running_mean"
    }
    # fp32: the curves the analysis draws, no gate whatever the values, and the divergence step
    assert rows["loss_parity_max_rel"]["precision"] == "fp32"
    assert rows["loss_parity_max_rel"]["status"] == "ok"
    assert rows["loss_parity_max_rel"]["extra"]["losses"]["jax"] == [2.0, 1.91]
    assert rows["fp32_loss_divergence_step"]["value"] == 1
    assert rows["fp32_loss_divergence_step"]["extra"]["diverged"] is True
    failed = parity.ParityResult("proj", "fp64", {}, [2.0], [2.1], [0.05], {}, {}, 0, 0)
    rec = Recorder("training", model="proj")
    recording.add_parity(rec, failed, batch_size=4)
    assert {r["status"] for r in rec.rows} == {"failed"}


def test_parity_rejects_a_batch_batchnorm_cannot_train_on():
    reference, twin = twins()
    config = optim.OptimConfig("sgd")
    with pytest.raises(ValueError, match="at least 2"):
        parity.compare_training(reference, twin, links, noise_batches(1, batch=1), config)
    with pytest.raises(ValueError, match="precision"):
        parity.compare_training(reference, twin, links, noise_batches(1), config, precision="bf16")


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_training_step_flops_agree_between_the_frameworks(name):
    reference, twin = twins()
    config = optim.OptimConfig(name, lr=0.05)
    (x, y), *_ = noise_batches(1, batch=4, size=8)
    torch_side = steps.TorchTrainer(reference, config)
    jax_side = steps.JaxTrainer(twin, config)
    before = {k: v.clone() for k, v in reference.state_dict().items()}
    torch_flops = torch_side.step_flops(torch_side.put(x, y))
    # counting ran on a copy: weights and statistics are untouched
    assert all(torch.equal(v, before[k]) for k, v in reference.state_dict().items())
    jax_flops = jax_side.step_flops(jax_side.put(x, y))
    # by hand: forward 2*MACs; backward twice that, less the first conv's input gradient
    n, hw = 4, 8 * 8
    conv_macs = [n * hw * 8 * 3 * 9, n * hw * 6 * 8, n * hw * 8 * 6]
    fc_macs = n * 8 * 10
    forward = 2 * (sum(conv_macs) + fc_macs)
    backward = 2 * (2 * sum(conv_macs) - conv_macs[0] + 2 * fc_macs)
    assert torch_flops == jax_flops == forward + backward
