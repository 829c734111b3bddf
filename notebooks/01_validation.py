# %% [markdown]
# # 01 · Validation: both frameworks compute the same function from the same weights
#
# **Purpose.** No timing in this study means anything unless JAX and PyTorch run the same model.
# The study this project grew from failed here (MobileNetV3 expansion ratios rounded, sigmoid for
# hard-sigmoid, EfficientNet squeeze-excitation sized from the wrong channels, inputs scaled by 255
# before 0–1 normalisation, BatchNorm frozen in training). For one model this notebook builds the
# torchvision reference and its native Flax NNX twin with the same ported weights, feeds both the
# same inputs and checks:
#
# - **logits** agree: fp32 max|Δ| / max|ref| ≤ 1e-5, with TF32 off on both sides (settings recorded);
# - **gradients** of a cross-entropy loss agree for every parameter (≤ 1e-4 relative per tensor);
# - **parameter counts** are identical on both sides and equal torchvision's;
# - **FLOPs** counted by each framework's own counter agree within 3% and are ≈ 2 × torchvision's
#   published GMACs.
#
# For bf16/fp16 it reports the error against the fp32 reference and the top-1 agreement, without
# asserting fp32 tolerances. Weights are torchvision's random initialisation with the constant
# tensors perturbed (BatchNorm statistics at 0/1 would hide a swapped mean and variance).
#
# **Run it:** `fwbench run params/smoke.yaml --only '01_validation/*'`
#
# **Runtime:** 10–60 s per model on a 2-core CPU at 224×224 (ViT-B/16 is the slowest); seconds on GPU.

# %% tags=["parameters"]
model = "resnet50"
batch_size = 2
image_size = 224
seed = 0
device = "cpu"  # one of: auto, cpu, cuda, mps, tpu
precision = "fp32"  # one of: fp32, tf32, bf16, fp16
check_grads = True
logit_tolerance = 1e-5
grad_tolerance = 1e-4
flops_tolerance = 0.03

# %%
import pandas as pd

from fwbench import device as fw_device
from fwbench import precision as fw_precision
from fwbench import validation
from fwbench.data import synthetic_batch
from fwbench.models import get_spec, parity
from fwbench.records import Recorder

spec = get_spec(model)
kind = fw_device.resolve_device("torch", device)
settings = {**fw_precision.configure_torch(precision), **fw_precision.configure_jax(precision)}
torch_model, flax_model = validation.prepare_pair(model, seed, image_size)
images, labels = synthetic_batch(batch_size, image_size, seed)
print(f"{model} on {fw_device.device_name('torch', kind)} in {precision}; settings: {settings}")

# %% [markdown]
# ## Logits
# Both sides run in eval mode (BatchNorm on running statistics, dropout off) on the same batch.
# For bf16/fp16 the reference is the fp32 torch output, so the error shown is what the reduced
# precision costs on each side.

# %%
ref_fp32, _ = validation.logits_on_device(torch_model, flax_model, images, kind, "fp32")
torch_logits, jax_logits = validation.logits_on_device(
    torch_model, flax_model, images, kind, precision
)
fw_precision.configure_torch(precision), fw_precision.configure_jax(precision)
between = validation.logit_errors(jax_logits, torch_logits)
rows = [{"comparison": "jax vs torch", **between}]
if precision != "fp32":
    rows += [
        {
            "comparison": "torch vs fp32 reference",
            **validation.logit_errors(torch_logits, ref_fp32),
        },
        {"comparison": "jax vs fp32 reference", **validation.logit_errors(jax_logits, ref_fp32)},
    ]
pd.DataFrame(rows)

# %% [markdown]
# ## Gradients (fp32)
# The gradient of the mean cross-entropy with respect to every parameter, mapped to torch's layout
# through the same transforms that port the weights, so a transposed kernel cannot hide. Computed
# in fp32 on the CPU, whatever the device above, because it checks the model definition, not the
# device's kernels. A few tensors of deep CNNs (e.g. the bias of a BatchNorm feeding another
# normalisation) have nearly cancelling gradients, where fp32 rounding alone moves torch's own
# result by more than 1e-4 relative. For those the float64 torch gradient is the referee: a tensor
# passes when JAX agrees with torch within the tolerance, or when JAX is no further from float64
# than 3× torch's own fp32 error. The table shows the worst tensors with all three errors.

# %%
grad_err = grad_table = None
if check_grads:
    fw_precision.configure_jax("fp32")
    g_torch = parity.torch_grads(torch_model, images, labels)
    g_jax = parity.flax_grads(
        flax_model, spec.flax_impl().links, images.transpose(0, 2, 3, 1), labels
    )
    g_fp64 = validation.torch_grads_fp64(torch_model, images, labels)
    grad_table = validation.grad_verdict(g_jax, g_torch, g_fp64, grad_tolerance)
    grad_err = float(grad_table.jax_vs_torch.max())
    fw_precision.configure_jax(precision)
    display(grad_table.head(8))

# %% [markdown]
# ## Parameter counts and FLOPs
# FLOPs come from each framework's own program: torch's `FlopCounterMode` counts convolutions,
# matmuls and attention (2 per multiply-add); on the JAX side we count the same op class, the
# convolutions and dot products of the lowered XLA program (`flops_jax_matmul_conv`), and also
# report XLA's own `cost_analysis()` total (`flops_jax`). The check compares like with like. XLA's
# total differs by the elementwise work it also counts (activations, normalisation, softmax,
# pooling: a few % for the small CNNs) and by what its optimiser rewrites before counting, which is
# why it can even come out lower (ResNet-50). Published GMACs are torchvision's at 224×224 (scaled
# by area for CNNs at other sizes).

# %%
n_torch, n_jax = validation.param_counts(torch_model, flax_model)
counted = validation.count_flops(torch_model, flax_model, 1, image_size)
published = validation.published_flops(model, image_size)
flops_gap = abs(counted["flops_jax_matmul_conv"] / counted["flops_torch"] - 1)
xla_total_gap = counted["flops_jax"] / counted["flops_torch"] - 1
pd.DataFrame(
    [
        {"quantity": "parameters", "torch": n_torch, "jax": n_jax, "torchvision": spec.param_count},
        {
            "quantity": "GFLOPs / image, conv + matmul",
            "torch": counted["flops_torch"] / 1e9,
            "jax": counted["flops_jax_matmul_conv"] / 1e9,
            "torchvision": published / 1e9,
        },
        {
            "quantity": "GFLOPs / image, XLA cost_analysis total",
            "torch": None,
            "jax": counted["flops_jax"] / 1e9,
            "torchvision": None,
        },
    ]
)

# %%
checks = {
    "param_counts_equal": n_torch == n_jax == spec.param_count,
    "flops_agree": flops_gap <= flops_tolerance,
}
if image_size == spec.image_size:  # torchvision publishes GMACs at the native size only
    checks["flops_near_published"] = abs(counted["flops_torch"] / published - 1) <= 0.05
if precision == "fp32":
    checks["logits_within_tolerance"] = between["max_rel_err"] <= logit_tolerance
    if grad_table is not None:
        checks["grads_within_tolerance_or_fp64_floor"] = bool(grad_table.passed.all())
passed = all(checks.values())

rec = Recorder(
    "validation",
    model=model,
    framework="jax-vs-torch",
    mode="eval",
    device=kind,
    device_name=fw_device.device_name("torch", kind),
    precision=precision,
    batch_size=batch_size,
)
status = "ok" if passed else "failed"
failed_checks = [k for k, v in checks.items() if not v]
error = None if passed else f"failed checks: {failed_checks}"
common = {"extra": {"settings": settings, "image_size": image_size, "seed": seed, "checks": checks}}
rec.add("max_abs_err", between["max_abs_err"], "logit", status=status, error=error, **common)
rec.add("max_rel_err", between["max_rel_err"], "ratio", status=status, error=error, **common)
rec.add("top1_agreement", between["top1_agreement"], "ratio", status=status, error=error, **common)
if grad_err is not None:
    rec.add("grad_max_rel_err", grad_err, "ratio", status=status, error=error, **common)
    rec.add(
        "grad_max_rel_err_vs_fp64",
        float(grad_table.jax_fp32_vs_fp64.max()),
        "ratio",
        framework="jax",
        extra={
            **common["extra"],
            "torch_fp32_vs_fp64": float(grad_table.torch_fp32_vs_fp64.max()),
            "tensors_over_tolerance": int((grad_table.jax_vs_torch > grad_tolerance).sum()),
        },
    )
rec.add("param_count_torch", n_torch, "params", **common)
rec.add("param_count_jax", n_jax, "params", **common)
rec.add("flops_torch", counted["flops_torch"], "FLOP/img", **common)
rec.add("flops_jax", counted["flops_jax"], "FLOP/img", **common)
rec.add("flops_jax_matmul_conv", counted["flops_jax_matmul_conv"], "FLOP/img", **common)
if precision != "fp32":
    for side, logits in (("torch", torch_logits), ("jax", jax_logits)):
        err = validation.logit_errors(logits, ref_fp32)
        rec.add("max_rel_err_vs_fp32", err["max_rel_err"], "ratio", framework=side, **common)
        rec.add("top1_agreement_vs_fp32", err["top1_agreement"], "ratio", framework=side, **common)
rec.emit()

# %% [markdown]
# ## Verdict

# %%
verdict = pd.DataFrame([{"check": k, "result": "PASS" if v else "FAIL"} for k, v in checks.items()])
print(
    f"{model}: logits max rel err {between['max_rel_err']:.2e}, worst grad rel err "
    f"{grad_err if grad_err is None else f'{grad_err:.2e}'}, FLOP gap {flops_gap:.2%} "
    f"(XLA total vs torch {xla_total_gap:+.2%})"
)
verdict

# %%
assert passed, error
