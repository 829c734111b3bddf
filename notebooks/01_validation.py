# %% [markdown]
# # 01 · Validation: both frameworks compute the same function from the same weights
#
# **Purpose.** No timing in this study means anything unless JAX and PyTorch run the same model.
# The study this project grew from failed here (MobileNetV3 expansion ratios rounded, sigmoid for
# hard-sigmoid, EfficientNet squeeze-excitation sized from the wrong channels, inputs scaled by 255
# before 0–1 normalisation, BatchNorm frozen in training). For one model this notebook builds the
# torchvision reference and its native Flax NNX twin with the same ported weights, feeds both the
# same inputs and checks (the gates):
#
# - **float64 logits** agree: max|Δ| / max|ref| ≤ 1e-10 (JAX with x64 enabled, torch `.double()`);
# - **float64 gradients** of a cross-entropy loss agree for every parameter tensor, ≤ 1e-8
#   relative per tensor;
# - **fp32 logits** agree to ≤ 1e-5 (a sanity bound; fp32 only), with TF32 off on both sides;
# - **parameter counts** are identical on both sides and equal torchvision's (a ViT's only at its
#   native size: its position embedding has one row per patch);
# - **FLOPs** counted by each framework's own counter agree within 3% and are ≈ 2 × torchvision's
#   published GMACs.
#
# Float64 is the proof because there each framework's rounding is ~1e-16: a port bug cannot hide
# under it. In fp32 the agreement of an ill-conditioned network (ResNet-50 at random init) depends
# on how the CPU's kernels round: the same gradient agreed to 3e-7 on an Intel Xeon and 7e-3 on
# an AMD EPYC. fp32 gradients are therefore measured per tensor against the float64 result, not
# gated. The float64 checks run on the CPU whatever `device` is, as some accelerators lack fp64.
#
# For tf32/bf16/fp16 the notebook also reports the error against an fp32 reference (computed
# with TF32 off, whatever the requested precision) and the top-1 agreement. Weights are
# torchvision's random initialisation with the constant tensors perturbed (BatchNorm statistics at
# 0/1 would hide a swapped mean and variance).
#
# **Run it:** `fwbench run params/smoke.yaml --only '01_validation/*'`
#
# **Runtime:** 1–4 min per model on a 2-core CPU at 224×224 (ViT-B/16 and EfficientNet-B0 the
# slowest). About half of it is the float64 pass: XLA:CPU and torch have no optimised float64
# convolution kernels. On a GPU the float64 pass still runs on the CPU.

# %% tags=["parameters"]
model = "resnet50"
batch_size = 2
image_size = 224
seed = 0
device = "cpu"  # one of: auto, cpu, cuda, mps, tpu
precision = "fp32"  # one of: fp32, tf32, bf16, fp16
check_grads = True
logit_tolerance = 1e-5
fp64_logit_tolerance = 1e-10
fp64_grad_tolerance = 1e-8
flops_tolerance = 0.03

# %%
import pandas as pd

from fwbench.data import synthetic_batch
from fwbench.families.validation import pair_checks as validation
from fwbench.measure import device as fw_device
from fwbench.measure import precision as fw_precision
from fwbench.models import get_spec
from fwbench.results.records import Recorder

spec = get_spec(model)
links_fn = spec.flax_impl().links
kind = fw_device.resolve_device("torch", device)
settings = {
    **fw_precision.configure("torch", precision),
    **fw_precision.configure("jax", precision),
}
torch_model, flax_model = validation.prepare_pair(model, seed, image_size)
images, labels = synthetic_batch(batch_size, image_size, seed)
print(f"{model} on {fw_device.device_name('torch', kind)} in {precision}; settings: {settings}")

# %% [markdown]
# ## Logits at the requested precision
# Both sides run in eval mode (BatchNorm on running statistics, dropout off) on the same batch.
# For tf32/bf16/fp16 the reference is each side's fp32 output, computed by
# `validation.fp32_reference_logits` with TF32 off (the flags in force are shown and recorded),
# so the error shown is what the reduced precision costs on each side.

# %%
torch_logits, jax_logits = validation.logits_on_device(
    torch_model, flax_model, images, kind, precision
)
between = validation.logit_errors(jax_logits, torch_logits)
rows = [{"comparison": "jax vs torch", **between}]
reference_flags = None
if precision != "fp32":
    torch_ref, jax_ref, reference_flags = validation.fp32_reference_logits(
        torch_model, flax_model, images, kind, precision
    )
    print(f"fp32 reference computed with {reference_flags}")
    rows += [
        {
            "comparison": "torch vs fp32 reference",
            **validation.logit_errors(torch_logits, torch_ref),
        },
        {"comparison": "jax vs fp32 reference", **validation.logit_errors(jax_logits, jax_ref)},
    ]
pd.DataFrame(rows)

# %% [markdown]
# ## Float64: the proof of the same function
# A float64 copy of each model (JAX inside a scoped `jax.enable_x64`, torch `.double()`), on the
# CPU, with the same weights and inputs. Logits and the gradient of the mean cross-entropy with
# respect to every parameter; JAX gradients are mapped to torch's layout through the same
# transforms that port the weights, so a transposed kernel cannot hide. In the torch copy each
# `nn.Hardsigmoid` is computed as relu6(x + 3) / 6: torch's float64 hardsigmoid backward
# multiplies by 1/6 rounded to float32 (2.98e-8 off), which alone would fail the gradient gate
# on MobileNetV3's squeeze-excitation weights. `jax_dtypes` proves JAX really ran in float64.

# %%
fp64 = validation.float64_logits_and_grads(
    torch_model, flax_model, links_fn, images, labels if check_grads else None
)
fp64_logit_err = validation.max_rel_err(fp64["jax_logits"], fp64["torch_logits"])
ran_in_float64 = fp64["jax_dtypes"] == ["float64"] and fp64["torch_logits"].dtype == "float64"
print(f"float64 logits: max rel err {fp64_logit_err:.2e}; JAX computed in {fp64['jax_dtypes']}")
logits_vs_fp64 = {
    "torch": validation.logit_errors(torch_logits, fp64["torch_logits"]),
    "jax": validation.logit_errors(jax_logits, fp64["torch_logits"]),
}
pd.DataFrame(
    [
        {"side": k, f"{precision} logits vs fp64": v["max_rel_err"]}
        for k, v in logits_vs_fp64.items()
    ]
)

# %% [markdown]
# ## Gradients per tensor: the fp64 gate and the fp32 measurements
# One row per parameter tensor, worst float64 disagreement first: `fp64_jax_vs_torch` is the
# gate (≤ 1e-8). The fp32 columns are measurements, computed on the CPU with TF32 off: each
# side's fp32 gradient against torch's float64 gradient, and fp32 JAX against fp32 torch. Where
# they are large, both fp32 results are equally far from float64 or one kernel rounds worse;
# neither is a difference in the function. `scale` is the tensor's largest gradient entry over
# the network's largest.

# %%
grads = None
if check_grads:
    g_torch32, g_jax32 = validation.fp32_grads(
        torch_model, flax_model, links_fn, images, labels, precision
    )
    grads = validation.grad_table(fp64["jax_grads"], fp64["torch_grads"], g_jax32, g_torch32)
    fp64_grad_err, fp64_grad_worst = validation.worst(grads, "fp64_jax_vs_torch")
    fp32_grad_err, fp32_grad_worst = validation.worst(grads, "fp32_jax_vs_torch")
    display(grads.head(8))
    display(grads.sort_values("fp32_jax_vs_torch", ascending=False).head(8))

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
# a declared model's count and FLOPs are counted on the model, so there is nothing published to
# check it against
published = validation.published_flops(model, image_size) if spec.published else None
flops_gap = abs(counted["flops_jax_matmul_conv"] / counted["flops_torch"] - 1)
xla_total_gap = counted["flops_jax"] / counted["flops_torch"] - 1
pd.DataFrame(
    [
        {
            "quantity": "parameters",
            "torch": n_torch,
            "jax": n_jax,
            "torchvision": spec.param_count if spec.published else None,
        },
        {
            "quantity": "GFLOPs / image, conv + matmul",
            "torch": counted["flops_torch"] / 1e9,
            "jax": counted["flops_jax_matmul_conv"] / 1e9,
            "torchvision": published / 1e9 if published else None,
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
    "ran_in_float64": ran_in_float64,
    "fp64_logits_within_tolerance": fp64_logit_err <= fp64_logit_tolerance,
    "param_counts_equal": n_torch == n_jax,
    "flops_agree": flops_gap <= flops_tolerance,
}
# torchvision's published count holds for a CNN at any size, for a ViT only at its native size
# (its position embedding has one row per patch)
if spec.published and (spec.kind == "cnn" or image_size == spec.image_size):
    checks["param_count_is_torchvisions"] = n_torch == spec.param_count
if grads is not None:
    checks["fp64_grads_within_tolerance"] = fp64_grad_err <= fp64_grad_tolerance
if published and image_size == spec.image_size:  # published at the native size only
    checks["flops_near_published"] = abs(counted["flops_torch"] / published - 1) <= 0.05
if precision == "fp32":
    checks["logits_within_tolerance"] = between["max_rel_err"] <= logit_tolerance
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
if reference_flags is not None:
    common["extra"]["fp32_reference_settings"] = reference_flags
gate = {"status": status, "error": error}
fp64_extra = {**common["extra"], "fp64_device": "cpu", "jax_dtypes": fp64["jax_dtypes"]}
rec.add("max_abs_err", between["max_abs_err"], "logit", **gate, **common)
rec.add("max_rel_err", between["max_rel_err"], "ratio", **gate, **common)
rec.add("top1_agreement", between["top1_agreement"], "ratio", **gate, **common)
rec.add(
    "fp64_logits_max_rel_err",
    fp64_logit_err,
    "ratio",
    **gate,
    extra={**fp64_extra, "tolerance": fp64_logit_tolerance},
)
for side, err in logits_vs_fp64.items():
    rec.add("max_rel_err_vs_fp64", err["max_rel_err"], "ratio", framework=side, **common)
if grads is not None:
    rec.add(
        "fp64_grad_max_rel_err",
        fp64_grad_err,
        "ratio",
        **gate,
        extra={
            **fp64_extra,
            "tolerance": fp64_grad_tolerance,
            "worst_tensor": fp64_grad_worst,
            "tensors": len(grads),
        },
    )
    # fp32 gradients are measurements (see above): recorded with status ok whatever the gates say
    rec.add(
        "grad_max_rel_err",
        fp32_grad_err,
        "ratio",
        extra={
            **common["extra"],
            "worst_tensor": fp32_grad_worst,
            "per_tensor": validation.per_tensor(grads),
        },
    )
    for side in ("torch", "jax"):
        err, tensor = validation.worst(grads, f"{side}_fp32_vs_fp64")
        rec.add(
            "grad_max_rel_err_vs_fp64",
            err,
            "ratio",
            framework=side,
            extra={**common["extra"], "worst_tensor": tensor},
        )
rec.add("param_count_torch", n_torch, "params", **common)
rec.add("param_count_jax", n_jax, "params", **common)
rec.add("flops_torch", counted["flops_torch"], "FLOP/img", **common)
rec.add("flops_jax", counted["flops_jax"], "FLOP/img", **common)
rec.add("flops_jax_matmul_conv", counted["flops_jax_matmul_conv"], "FLOP/img", **common)
if precision != "fp32":
    for side, logits, ref in (("torch", torch_logits, torch_ref), ("jax", jax_logits, jax_ref)):
        err = validation.logit_errors(logits, ref)
        rec.add("max_rel_err_vs_fp32", err["max_rel_err"], "ratio", framework=side, **common)
        rec.add("top1_agreement_vs_fp32", err["top1_agreement"], "ratio", framework=side, **common)
rec.emit()

# %% [markdown]
# ## Verdict

# %%
verdict = pd.DataFrame([{"check": k, "result": "PASS" if v else "FAIL"} for k, v in checks.items()])
fp64_grad_text = f"{fp64_grad_err:.2e} ({fp64_grad_worst})" if grads is not None else "not run"
fp32_grad_text = f"{fp32_grad_err:.2e} ({fp32_grad_worst})" if grads is not None else "not run"
print(
    f"{model}: fp64 logits {fp64_logit_err:.2e}, fp64 worst grad {fp64_grad_text}; "
    f"{precision} logits {between['max_rel_err']:.2e}, fp32 worst grad {fp32_grad_text}; "
    f"FLOP gap {flops_gap:.2%} (XLA total vs torch {xla_total_gap:+.2%})"
)
verdict

# %%
assert passed, error
