# %% [markdown]
# # 11 · Training: step time, FLOPs, compile time, memory, energy, parity and convergence
#
# **Purpose.** For one model, measure how fast ONE framework trains (each campaign cell is one
# framework, mode, precision and batch size): per-step time with every step synced (p50/p95 and a
# 95% interval of the median), images/s, the FLOPs of one whole step and the FLOP/s achieved
# (the analysis divides them by the measured peak for training MFU), compile time (JAX lowering
# and XLA compile timed apart; torch.compile's first step minus a steady step), peak memory and
# energy per step, and with `timed_epochs` the wall time of whole epochs. Then, with `check_parity` and `check_convergence`, run BOTH frameworks in this
# kernel to show they train the same function:
#
# - **Training parity, proven in float64**: from the same ported weights, on the same batches,
#   with one optimizer description, `parity_steps` steps of each side in float64 (torch
#   `.double()`, JAX under `jax.enable_x64`). The gate: every step's loss agrees to 1e-9
#   relative, and every parameter and BatchNorm statistic after the last step to 1e-8
#   (max|Δ|/max|torch|). Parameters whose exact gradient is zero are left out by a stated rule and
#   listed (see the parity section). Dropout and stochastic depth are off (the frameworks draw
#   different masks; also in the convergence run unless `stochastic_layers`); BatchNorm trains and
#   its running statistics are compared too. A failure is recorded with status `failed` and
#   fails the cell.
# - **fp32 parity, measured**: the same run in fp32 (TF32 off), its loss curves and per-tensor
#   differences recorded with no pass/fail, and the first step at which the losses differ by
#   more than 1e-3: how fast this CPU's or GPU's rounding grows in this model.
# - **Convergence**: `epochs` epochs on a labelled dataset (digits, or ImageNet-100 from
#   `dataset_path`), train loss and validation top-1 of both frameworks on one chart. After the
#   last epoch both sides recompute their BatchNorm statistics at the final weights (one pass,
#   plain average, as `torch.optim.swa_utils.update_bn`) and validate again; that is the reported
#   `val_top1`, beside `val_top1_as_trained`. MobileNetV3's momentum-0.01 running statistics lag
#   fast-moving weights so far that, as trained, both frameworks predict one class.
#
# Both sides: same weights (`fwbench.models.build_pair`), one seeded sampler, augmentation off,
# mean cross-entropy in fp32, the same optimizer built twice (`fwbench.families.training.optim`: SGD with
# momentum 0.9 and coupled weight decay, or AdamW with decoupled decay) and the same learning-rate
# schedule (`schedule`: constant, or cosine from `lr` to 0 over the run, evaluated by one function
# of the step on both sides). Precision: fp32 = TF32 off on both sides; tf32 = on for both;
# bf16-mixed = fp32 master weights with bf16 compute (torch.autocast / bf16-cast parameters in the
# JAX step), BatchNorm statistics and the loss in fp32.
#
# **Run it:** `fwbench run params/cpu.yaml --only '11_training/*'` (parity and convergence on
# CPU), or the training steps of `params/smoke.yaml` / `params/h100.yaml`.
#
# **Runtime:** the defaults (ResNet-50, digits at 32×32, batch 16, parity over 20 steps at 96 px)
# take about 10 min on a 2-core CPU, most of it the float64 and fp32 parity runs and XLA compiling
# their steps; convergence on digits adds 2 to 15 min per model (ViT-B/16 the longest). On an
# H100 a speed cell takes under a minute.

# %% tags=["parameters"]
model = "resnet50"
framework = "torch"  # one of: torch, jax
device = "auto"  # one of: auto, cpu, cuda
precision = "fp32"  # one of: fp32, tf32, bf16-mixed
mode = "default"  # one of: default, eager, compile, jit, jit-expert
optimizer = "sgd"  # one of: sgd, adamw
lr = None
schedule = "cosine"  # one of: constant, cosine
batch_size = 16
image_size = 32
dataset = "digits"  # one of: synthetic, digits, imagenet100
dataset_path = ""
seed = 0
measure_speed = True
min_iters = 5
min_seconds = 1.0
warmup = 3
include_data = False
timed_epochs = 0  # passes over the training split timed after the step (0: none)
channels_last = False
cudnn_benchmark = False
check_parity = True
parity_steps = 20
parity_lr = None
parity_optimizer = "same"  # one of: same, sgd, adamw
check_convergence = False
stochastic_layers = False
epochs = 3
steps = 0
aa_copy = 0  # 1: an A/A duplicate arm (the runner sets it for a step with aa_copy); one of: 0, 1

# %% [markdown]
# `lr = None` takes the optimizer's default (SGD 0.005, AdamW 1e-3); `parity_lr = None` and
# `parity_optimizer = "same"` run the parity check with the training's own optimizer and rate,
# which the float64 gate holds for at every registry model, batch size and seed tried; they stay
# as switches for a model whose training is chaotic at its campaign's rate (two float64 runs of
# one framework, 1e-14 apart at the start, drifting apart step after step), where a smaller rate
# keeps the proof meaningful.
# `mode = "default"` is each framework's default: torch eager, JAX jit; `jit-expert` trains the
# Flax twin's expert form (convolutions written for the device, `fwbench.models.conv`: the same
# function and gradients, proven in float64). `channels_last` and
# `cudnn_benchmark` are torch's best-practice switches for CNNs on a GPU (off by default).
# `steps` caps the steps per epoch of the convergence run (0 = a full pass over the training
# split). `timed_epochs` times that many whole epochs of the speed cell's trainer after its steps
# (`epoch_seconds`: fetching, placing and stepping every full batch of `dataset`'s training split),
# the stopwatch 21_prediction holds its training-time forecast against. `stochastic_layers = True` keeps dropout and stochastic depth on in the convergence run;
# off, both sides train the same deterministic function (each framework would draw its own
# masks; see `fwbench.families.training.convergence`). ViT image sizes must be multiples of 16.

# %%
import pandas as pd

from fwbench import vocab
from fwbench.data import batches
from fwbench.families.training import recording, training_report
from fwbench.families.training import steps as train_steps
from fwbench.families.training.optim import OptimConfig
from fwbench.measure import device as fw_device
from fwbench.measure.timing import StopRule
from fwbench.models import get_spec
from fwbench.report import charts
from fwbench.results.records import Recorder

charts.use_theme()
spec = get_spec(model)
if spec.kind == "transformer" and image_size % 16:
    raise ValueError(f"{model} needs image_size a multiple of 16, got {image_size}")
mode = train_steps.resolve_training_mode(framework, mode)  # "default": torch eager, JAX jit
kind = fw_device.resolve_device(framework, device)
name = fw_device.device_name(framework, kind)
# both frameworks' devices only where both run (parity, convergence): a speed-only PyTorch cell
# then never imports JAX
both = check_parity or check_convergence
kinds = {fw: fw_device.resolve_device(fw, device) for fw in (vocab.FRAMEWORKS if both else ())}
data = batches.load(dataset, image_size, path=dataset_path)
settings = train_steps.configure_precision(framework, precision)
if framework == "torch":
    import torch

    torch.backends.cudnn.benchmark = cudnn_benchmark
    settings["torch.backends.cudnn.benchmark"] = cudnn_benchmark
run_info = {
    "dataset": dataset,
    "image_size": image_size,
    "optimizer": optimizer,
    "lr": lr,
    "schedule": schedule,
    "seed": seed,
    # only on copies, so the records of every cell made before A/A copies are unchanged
    **({"aa_copy": 1} if aa_copy else {}),
}
rec = Recorder(
    "training",
    extra=run_info,
    model=model,
    framework=framework,
    mode=mode,
    device=kind,
    device_name=name,
    precision=precision,
)
print(f"{model} · {framework} {mode} · {precision} · {name} · {dataset} {image_size}px")
settings

# %% [markdown]
# ## Speed of one training step
# A fresh model (torchvision's initialisation, ported), trained on batches from `dataset`; the
# first steps compile (JAX: AOT lower + compile; torch.compile: first step), then warm-up runs
# until step times stop drifting, then every step is synced and timed alone.

# %%
speed = None
if measure_speed:
    from fwbench.families.training.speed import measure_training_speed
    from fwbench.models import build_pair, build_torch

    config = OptimConfig(optimizer, lr=lr, schedule=schedule)
    if framework == "torch":
        torch_model = build_torch(
            model, seed=seed, num_classes=data.num_classes, image_size=image_size
        )
        cnn_layout = channels_last and spec.kind == "cnn"
        trainer = train_steps.TorchTrainer(
            torch_model,
            config,
            device=kind,
            precision=precision,
            mode=mode,
            channels_last=cnn_layout,
        )
        settings["channels_last"] = cnn_layout
    else:
        # the JAX side takes its weights from the same seeded torchvision model, ported
        torch_model, flax_model = build_pair(
            model, seed=seed, num_classes=data.num_classes, image_size=image_size
        )
        trainer = train_steps.JaxTrainer(
            flax_model, config, device=kind, precision=precision, mode=mode
        )
        # what the trainer's convolutions run, read off them: jit-expert's records say so
        settings["layers"] = trainer.layers
        del torch_model
    speed = measure_training_speed(
        trainer,
        data.stream(batch_size, seed),
        batch_size,
        StopRule(min_iters=min_iters, min_seconds=min_seconds),
        warmup=warmup,
        include_data=include_data,
    )
    with rec.extras(
        settings=settings,
        config=config.describe(),
        include_data=include_data,
        channels_last=settings.get("channels_last", False),
    ):
        recording.add_speed(rec, speed)
    if timed_epochs and speed.status == "ok":
        from fwbench.families.training.speed import measure_epochs

        epochs_timed = measure_epochs(trainer, data, batch_size, seed, timed_epochs)
        with rec.extras(settings=settings, config=config.describe()):
            recording.add_epochs(rec, epochs_timed, batch_size)
        print(
            f"{epochs_timed.steps} steps ({epochs_timed.images} images) an epoch: "
            + ", ".join(f"{s:.2f}" for s in epochs_timed.seconds)
            + " s"
        )
    del trainer
    display(rec.frame()[["metric", "value", "unit", "n", "ci_low", "ci_high", "status"]])

# %% [markdown]
# ## Training parity (both frameworks): the fp64 proof, and fp32 as a measurement
# `parity_steps` seeded noise batches (labels drawn from the dataset's classes), torch eager
# against JAX jit, every residual branch starting at zero, the schedule spanning exactly those
# steps; first in float64 on both sides (the gate), then the same run in fp32 (curves only).
# Each choice keeps training itself from being chaotic, measured by two float64 torch runs whose
# weights start 1e-14 apart (where they drift apart, no two implementations can agree):
#
# - CNNs train at no less than 96 px, so their last feature map is 3×3: at 32 px it is 1×1 and
#   training-mode BatchNorm normalises each channel over the batch alone, which at batch 2 makes
#   the two runs differ by 1e-6 after one step even at SGD 1e-6 (EfficientNet-B0);
# - residual branches start at zero: from torchvision's initialisation ResNet-50's runs reach
#   1e-1 apart within 20 steps, at 96 px too;
# - noise, not the digits: on the flat upsampled digits ResNet-50's runs drift 1e10-fold.
#
# A parameter whose exact gradient is zero (a BatchNorm bias whose output reaches the loss only
# through a 1x1 convolution and another training-mode BatchNorm: EfficientNet-B0's and
# MobileNetV3's projection layers) gets rounding noise as its gradient, which Adam-type optimizers
# normalise into steps of random sign, in float64 too. The parameter gate skips it by a stated
# rule, its fp64 gradient norm below 1e-12 of the step's largest at every step on both sides,
# and skips the running means its drift shifts (the BatchNorms right after it); both lists are
# printed and recorded. The loss gate covers everything.

# %%
parity = {}
if check_parity:
    from fwbench.data import rotating_batches
    from fwbench.families.training.parity import parity_image_size, run_parity

    parity_size = parity_image_size(model, image_size)
    parity_data = rotating_batches(parity_steps, batch_size, parity_size, seed, data.num_classes)
    parity_config = OptimConfig(
        optimizer if parity_optimizer == "same" else parity_optimizer,
        lr=lr if parity_lr is None else parity_lr,
        schedule=schedule,
        total_steps=parity_steps,
    )
    for parity_precision in ("fp64", "fp32"):
        parity[parity_precision] = run_parity(
            model,
            parity_data,
            parity_config,
            precision=parity_precision,
            seed=seed,
            num_classes=data.num_classes,
            image_size=parity_size,
            devices=kinds,
        )
        recording.add_parity(
            rec,
            parity[parity_precision],
            batch_size,
            device=kinds["jax"],
            device_name=fw_device.device_name("jax", kinds["jax"]),
        )
    proof, measured = parity["fp64"], parity["fp32"]
    print(
        f"fp64 ({'passed' if proof.passed else 'FAILED'}), {parity_size} px: loss max rel "
        f"{proof.loss_max_rel:.2e} over {proof.steps} steps; worst parameter {proof.worst_param[0]} "
        f"{proof.worst_param[1]:.2e}; worst BN statistic {proof.worst_buffer[0]} "
        f"{proof.worst_buffer[1]:.2e}"
    )
    print(f"skipped (exact zero gradient): {sorted(proof.skipped_params) or 'none'}")
    print(f"skipped statistics (shifted by them): {proof.skipped_statistics or 'none'}")
    diverged = measured.divergence_step()
    print(
        f"fp32 (measured): loss max rel {measured.loss_max_rel:.2e}; losses first differ by "
        "more than 1e-3 at "
        + (f"step {diverged}" if diverged is not None else f"no step of {measured.steps}")
    )
    display(charts.parity_chart(training_report.parity_curves(rec.frame())))

# %% [markdown]
# ## Convergence (both frameworks)

# %%
curves, convergence_problems = None, []
if check_convergence:
    from fwbench.families.training.convergence import run_convergence, steps_per_epoch, verdict

    per_epoch = steps_per_epoch(data, batch_size, steps)
    conv_config = OptimConfig(optimizer, lr=lr, schedule=schedule, total_steps=epochs * per_epoch)
    curves = run_convergence(
        model,
        data,
        conv_config,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        max_steps_per_epoch=steps,
        precision=precision,
        devices=kinds,
        stochastic_layers=stochastic_layers,
    )
    convergence_problems = verdict(curves, data.num_classes)
    recording.add_convergence(
        rec,
        curves,
        batch_size,
        convergence_problems,
        device=kinds["jax"],
        device_name=fw_device.device_name("jax", kinds["jax"]),
    )
    display(
        pd.DataFrame(
            [
                {
                    "framework": fw,
                    "val_top1_%": c.final_val_top1,
                    "train_loss_last_epoch": c.final_train_loss,
                    "seconds": round(c.seconds, 1),
                }
                for fw, c in curves.items()
            ]
        )
    )
    display(charts.convergence_chart(training_report.convergence_curves(rec.frame())))

# %%
rec.emit()

# %%
# A parity or convergence failure fails the cell, so the campaign's exit status shows it.
if parity:
    assert parity["fp64"].passed, f"fp64 training parity failed: {parity['fp64'].failures()}"
assert not convergence_problems, f"convergence failed: {convergence_problems}"
