"""The training family: matched optimizers, BatchNorm statistics, convergence, the notebook."""

import json

import duckdb
import numpy as np
import pytest
import torch
from flax import nnx

from fwbench.data import batches
from fwbench.families.training import convergence, optim, speed, steps
from fwbench.models.layers import TorchBatchNorm
from fwbench.results.records import RECORDS_MIME
from tests.conftest import REPO, run_cli

steps.configure_precision("torch", "fp32")
steps.configure_precision("jax", "fp32")


class TorchNet(torch.nn.Module):
    """Conv, BatchNorm, ReLU, pooling, linear: every kind of state a CNN trains."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, classes)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


class FlaxNet(nnx.Module):
    def __init__(self, classes: int = 10):
        rngs = nnx.Rngs(0)
        self.conv = nnx.Conv(3, 8, (3, 3), padding=((1, 1), (1, 1)), use_bias=False, rngs=rngs)
        self.bn = TorchBatchNorm(8)
        self.fc = nnx.Linear(8, classes, rngs=rngs)

    def __call__(self, x):
        return self.fc(nnx.relu(self.bn(self.conv(x))).mean(axis=(1, 2)))


def _twins(seed: int = 0):
    torch.manual_seed(seed)
    reference, twin = TorchNet(), FlaxNet()
    with torch.no_grad():  # non-default affine values, so a swapped scale and bias would show
        reference.bn.weight.uniform_(0.5, 1.5)
        reference.bn.bias.uniform_(-0.5, 0.5)
    twin.conv.kernel[...] = reference.conv.weight.detach().numpy().transpose(2, 3, 1, 0)
    twin.bn.scale[...] = reference.bn.weight.detach().numpy()
    twin.bn.bias[...] = reference.bn.bias.detach().numpy()
    twin.fc.kernel[...] = reference.fc.weight.detach().numpy().T
    twin.fc.bias[...] = reference.fc.bias.detach().numpy()
    return reference, twin


def _batches(n: int, batch: int = 4, size: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((batch, 3, size, size), dtype=np.float32), rng.integers(0, 10, batch))
        for _ in range(n)
    ]


def _train_both(config, data):
    reference, twin = _twins()
    torch_side = steps.TorchTrainer(reference, config)
    jax_side = steps.JaxTrainer(twin, config)
    losses = {"torch": [], "jax": []}
    for trainer in (torch_side, jax_side):
        for x, y in data:
            losses[trainer.framework].append(trainer.loss_value(trainer.step(trainer.put(x, y))))
    jax_side.sync_model()
    return reference, twin, losses


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("name", ["sgd", "adamw"])
@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_optimizer_steps_match_across_frameworks(name, schedule):
    # a large learning rate makes any mismatch in momentum, decay or bias correction visible
    config = optim.OptimConfig(name, lr=0.1, schedule=schedule, total_steps=5)
    reference, twin, losses = _train_both(config, _batches(6))
    assert np.allclose(losses["jax"], losses["torch"], rtol=1e-5, atol=0)
    assert losses["torch"][0] != losses["torch"][-1]
    # Adam divides by sqrt(v): where a gradient is nearly zero, rounding moves the step a little
    tol = 1e-4 if name == "adamw" else 1e-5
    assert _rel(twin.fc.kernel[...], reference.fc.weight.detach().numpy().T) < tol
    assert _rel(twin.bn.scale[...], reference.bn.weight.detach().numpy()) < tol
    conv = reference.conv.weight.detach().numpy().transpose(2, 3, 1, 0)
    assert _rel(twin.conv.kernel[...], conv) < tol


def test_a_different_update_rule_is_not_mistaken_for_a_match():
    """The comparison above is sharp enough to tell Nesterov from heavy-ball momentum."""
    data = _batches(4)
    config = optim.OptimConfig("sgd", lr=0.1, schedule="constant")
    reference, twin = _twins()
    torch_side = steps.TorchTrainer(reference, config)
    torch_side.optimizer.param_groups[0]["nesterov"] = True
    jax_side = steps.JaxTrainer(twin, config)
    for x, y in data:
        torch_side.step(torch_side.put(x, y))
        jax_side.step(jax_side.put(x, y))
    jax_side.sync_model()
    assert _rel(twin.fc.kernel[...], reference.fc.weight.detach().numpy().T) > 1e-4


def test_schedules_give_the_same_learning_rate_on_both_sides():
    for schedule in ("constant", "cosine"):
        config = optim.OptimConfig("adamw", lr=0.01, schedule=schedule, total_steps=7)
        opt, scheduler = optim.torch_optimizer([torch.nn.Parameter(torch.zeros(1))], config)
        jax_schedule = optim.optax_schedule(config)
        seen = []
        for count in range(9):  # past the end of the cosine too
            torch_lr = opt.param_groups[0]["lr"]
            assert abs(float(jax_schedule(count)) - torch_lr) <= 1e-6 * config.lr
            seen.append(torch_lr)
            opt.step()
            scheduler.step()
        assert (len(set(seen)) == 1) == (schedule == "constant")


def test_batchnorm_statistics_update_in_training_on_both_sides_and_match():
    config = optim.OptimConfig("sgd", lr=0.05)
    reference, twin, _ = _train_both(config, _batches(3))
    torch_mean = reference.bn.running_mean.numpy()
    torch_var = reference.bn.running_var.numpy()
    assert np.abs(torch_mean).max() > 1e-3 and np.abs(torch_var - 1).max() > 1e-3
    assert _rel(twin.bn.mean[...], torch_mean) < 1e-5
    assert _rel(twin.bn.var[...], torch_var) < 1e-5
    assert twin.bn.use_running_average is False  # the module is still in training mode


def test_prediction_uses_running_statistics_and_leaves_training_mode_on():
    config = optim.OptimConfig("sgd", lr=0.05)
    reference, twin = _twins()
    torch_side, jax_side = steps.TorchTrainer(reference, config), steps.JaxTrainer(twin, config)
    (x, y), (probe, _) = _batches(2, batch=8)
    for trainer in (torch_side, jax_side):
        trainer.step(trainer.put(x, y))
    assert (torch_side.predict(probe) == jax_side.predict(probe)).all()
    assert reference.training
    jax_side.sync_model()
    assert _rel(twin.bn.mean[...], reference.bn.running_mean.numpy()) < 1e-5


def test_stochastic_layers_are_switched_off_on_both_sides_for_parity():
    from fwbench.models import build_pair

    torch_model, flax_model = build_pair("mobilenet_v3_small", num_classes=10)
    assert steps.disable_stochastic_layers(torch_model, flax_model) == 2  # one dropout each
    assert steps.disable_stochastic_layers(torch_model, flax_model) == 0


def test_zero_init_reaches_every_residual_branch_and_nothing_else():
    import torchvision

    from fwbench.families.training.parity import zero_init_residual_

    for name, branches in (("resnet50", 16), ("efficientnet_b0", 9), ("mobilenet_v3_small", 6)):
        model = getattr(torchvision.models, name)(num_classes=10)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        assert zero_init_residual_(model) == branches, name
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
        assert len(changed) == branches and all(k.endswith(".weight") for k in changed), name
        assert all(float(model.state_dict()[k].abs().max()) == 0.0 for k in changed)


def test_parity_verdict_flags_a_drifting_loss_and_a_moved_tensor():
    from fwbench.families.training.parity import ParityResult

    def result(jax_losses, param_err, precision="fp64"):
        torch_losses = [2.0, 1.9, 1.8]
        rel = [abs(a - b) / b for a, b in zip(jax_losses, torch_losses, strict=True)]
        return ParityResult(
            "resnet50",
            precision,
            {},
            torch_losses,
            jax_losses,
            rel,
            {"fc.weight": param_err},
            {"bn1.running_var": 0.0},
            0,
            16,
        )

    assert result([2.0, 1.9, 1.8], 1e-9).passed
    drift = result([2.0, 1.9, 1.8 + 1e-8], 1e-9).failures()  # 5.6e-9 relative at step 2
    assert len(drift) == 1 and "step 2" in drift[0]
    assert "fc.weight" in result([2.0, 1.9, 1.8], 1e-7).failures()[0]
    assert not result([2.0, float("nan"), 1.8], 1e-9).passed
    # fp32 is a measurement: far apart, and still no verdict against it
    assert result([2.0, 1.9, 1.9], 0.5, precision="fp32").passed


def test_convergence_loop_learns_digits_on_both_frameworks():
    """Nearest-class-mean separable digits: a tiny net must beat chance by far, on both sides."""
    data = batches.load("digits", 8)
    config = optim.OptimConfig("adamw", lr=0.02, total_steps=3 * 35)
    curves = {}
    reference, twin = _twins()
    for trainer in (steps.TorchTrainer(reference, config), steps.JaxTrainer(twin, config)):
        curves[trainer.framework] = convergence.train_curve(
            trainer, data, epochs=3, batch_size=32, seed=0, max_steps=35
        )
    for curve in curves.values():
        assert len(curve.train_loss) == 3 * 35 and len(curve.val_top1) == 4
        assert curve.final_train_loss < curve.train_loss[0]
    assert convergence.verdict(curves, 10) == [], {k: c.val_top1 for k, c in curves.items()}


def test_every_epoch_sees_the_same_batches_on_both_sides_and_a_new_order_each_epoch():
    data = batches.load("digits", 8)
    first = [y for _, y in data.train_batches(16, seed=3, epoch=0)]
    again = [y for _, y in data.train_batches(16, seed=3, epoch=0)]
    other = [y for _, y in data.train_batches(16, seed=3, epoch=1)]
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    assert not all((a == b).all() for a, b in zip(first, other, strict=True))
    assert all(len(y) == 16 for y in first)  # the incomplete last batch is dropped
    with pytest.raises(FileNotFoundError, match="dataset_path"):
        batches.load("imagenet100", 32)


def test_an_epoch_is_timed_over_every_full_batch_of_the_training_split():
    data = batches.load("digits", 8)
    reference, _ = _twins()
    trainer = steps.TorchTrainer(reference, optim.OptimConfig("sgd", lr=0.01))
    stepped = []
    step = trainer.step

    def counted(batch):
        stepped.append(len(batch[1]))
        return step(batch)

    trainer.step = counted
    timing = speed.measure_epochs(trainer, data, 32, seed=0, passes=2)
    full = convergence.steps_per_epoch(data, 32)
    assert (timing.steps, timing.images) == (full, full * 32) and full > 10
    assert len(timing.seconds) == 2 and min(timing.seconds) > 0
    assert stepped == [32] * (2 * full)  # every full batch of both passes, none left over
    # synthetic noise has no split: its epoch is the sampler's fixed count of batches
    noise = batches.load("synthetic", 8)
    assert convergence.steps_per_epoch(noise, 4) == batches.SYNTHETIC_BATCHES_PER_EPOCH


@pytest.mark.slow
def test_training_notebook_through_the_runner(tmp_path):
    # ResNet-18, not the notebook's default ResNet-50: a residual network with batch norm at a
    # fraction of the float64 parity's cost (campaigns record ResNet-50's parity when they run it).
    # Noise, not the digits: its timed epoch is 50 steps where the digits' is 359 (48 s of this
    # test); the digits' epoch of full batches has its own test above
    campaign = tmp_path / "train.yaml"
    campaign.write_text(
        f"""
campaign: train_test
steps:
  - notebook: {REPO}/notebooks/11_training
    params: {{device: cpu, model: resnet18, framework: torch, image_size: 32, batch_size: 4,
              dataset: synthetic, min_iters: 2, min_seconds: 0.0, warmup: 1, parity_steps: 3,
              timed_epochs: 1}}
"""
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (notebook,) = (out / "train_test").glob("*/11_training/*.ipynb")
    embedded = [
        row
        for cell in json.loads(notebook.read_text())["cells"]
        for output in cell.get("outputs", [])
        for row in output.get("data", {}).get(RECORDS_MIME, [])
    ]
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute(
        "select framework, metric, value, unit, status, n, extra from measurements "
        "where family = 'training'"
    ).fetchall()
    assert len(rows) == len(embedded)
    got = {(r[0], r[1]): r for r in rows}
    for metric, unit in [
        ("step_time_p50_ms", "ms"),
        ("step_time_p95_ms", "ms"),
        ("throughput_img_s", "img/s"),
        ("compile_s", "s"),
        ("peak_mem_bytes", "bytes"),
        ("energy_j_per_step", "J"),
        ("flops_per_step", "FLOP/step"),
        ("achieved_tflops", "TFLOP/s"),
        ("epoch_seconds", "s"),
    ]:
        assert got[("torch", metric)][3] == unit
    flops = got[("torch", "flops_per_step")]
    assert flops[2] > 0 and "FlopCounterMode" in json.loads(flops[6])["counter"]
    assert got[("torch", "achieved_tflops")][2] > 0
    assert got[("torch", "step_time_p50_ms")][2] > 0
    timed = json.loads(got[("torch", "epoch_seconds")][6])
    assert got[("torch", "epoch_seconds")][2] > 0 and len(timed["passes"]) == 1
    assert (timed["steps"], timed["images"]) == (
        batches.SYNTHETIC_BATCHES_PER_EPOCH,
        batches.SYNTHETIC_BATCHES_PER_EPOCH * 4,
    )
    assert got[("torch", "step_time_p95_ms")][5] >= 2
    energy = json.loads(got[("torch", "energy_j_per_step")][6])
    assert got[("torch", "energy_j_per_step")][2] is not None or energy.get("reason")
    proof = got[("jax", "fp64_loss_parity_max_rel")]
    assert proof[4] == "ok" and proof[2] <= 1e-9 and proof[5] == 3
    assert json.loads(proof[6])["image_size"] == 96  # CNNs train for parity at >= 96 px
    assert got[("jax", "fp64_param_parity_max_rel")][2] <= 1e-8
    assert got[("jax", "fp64_bn_stats_parity_max_rel")][2] <= 1e-8
    # fp32: the curves the analysis draws, a measurement without a gate
    measured = got[("jax", "loss_parity_max_rel")]
    assert measured[4] == "ok" and measured[5] == 3
    curves = json.loads(measured[6])["losses"]
    assert len(curves["torch"]) == len(curves["jax"]) == 3
    divergence = json.loads(got[("jax", "fp32_loss_divergence_step")][6])
    assert divergence["steps_compared"] == 3 and divergence["threshold"] == 1e-3


def test_the_notebook_trains_the_expert_twin_in_jit_expert(tmp_path):
    """jit-expert's training records time the expert convolutions: the notebook hands the mode to
    the trainer, and the records say what its convolutions ran (a run made while it did not
    trained the stock layers under jit-expert's name)."""
    campaign = tmp_path / "expert.yaml"
    campaign.write_text(
        f"""
campaign: expert_test
steps:
  - notebook: {REPO}/notebooks/11_training
    params: {{device: cpu, model: mobilenet_v3_small, framework: jax, image_size: 32,
              batch_size: 2, dataset: synthetic, min_iters: 2, min_seconds: 0.0, warmup: 1,
              check_parity: false, mode: jit-expert}}
"""
    )
    out = tmp_path / "out"
    proc = run_cli("run", campaign, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute(
        "select mode, extra->'settings'->>'layers' from measurements "
        "where metric = 'step_time_p50_ms' order by 1"
    ).fetchall()
    con.close()
    assert rows == [("jit-expert", "expert")]


def test_batchnorm_recalibration_averages_the_same_statistics_on_both_sides():
    config = optim.OptimConfig("sgd", lr=0.05)
    reference, twin = _twins()
    torch_side, jax_side = steps.TorchTrainer(reference, config), steps.JaxTrainer(twin, config)
    data = _batches(3, batch=8)
    for trainer in (torch_side, jax_side):
        for x, y in data[:2]:
            trainer.step(trainer.put(x, y))
    before = reference.bn.running_var.clone().numpy()
    images = [x for x, _ in data]
    assert torch_side.recalibrate_bn(iter(images)) == 1
    assert jax_side.recalibrate_bn(iter(images)) == 1
    # the plain average of each batch's own statistics, computed here by hand
    with torch.no_grad():
        feats = [reference.conv(torch.from_numpy(x)) for x in images]
    expected_var = np.mean([f.var(dim=(0, 2, 3), unbiased=True).numpy() for f in feats], axis=0)
    assert _rel(reference.bn.running_var.numpy(), expected_var) < 1e-5
    assert _rel(reference.bn.running_var.numpy(), before) > 1e-3
    jax_side.sync_model()
    assert _rel(twin.bn.var[...], reference.bn.running_var.numpy()) < 1e-5
    assert _rel(twin.bn.mean[...], reference.bn.running_mean.numpy()) < 1e-5
    assert reference.bn.momentum == 0.1 and twin.bn.momentum == 0.1
    assert reference.training and twin.bn.use_running_average is False
    probe = data[0][0]
    assert (torch_side.predict(probe) == jax_side.predict(probe)).all()
