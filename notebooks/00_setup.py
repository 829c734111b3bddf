# %% [markdown]
# # 00 · Setup verification
#
# **Purpose.** Before any number is measured, prove this machine can run the study: the dependencies
# import at the expected versions, both frameworks see the devices we think they see, XLA and
# torch.compile both compile, and a matmul on every framework/device pair gives the right answer
# with TF32 off. Each check becomes a record (family `setup`), so a failed setup is visible in the
# results index, not only in a terminal.
#
# **Run it:** `fwbench run params/smoke.yaml --only '00_setup/*'` (or Run-All in JupyterLab).
#
# **Runtime:** about 30 s on a 2-core CPU (torch.compile's first C++ build dominates); about 1 min
# on a GPU node.

# %% tags=["parameters"]
device = "auto"  # one of: auto, cpu, cuda, mps, tpu
matmul_size = 256
check_compile = True

# %%
import pandas as pd

from fwbench.families.setup import setup_checks as setup
from fwbench.measure import device as fw_device
from fwbench.pipeline import environment
from fwbench.results.records import Recorder

env = environment.capture()
checks = setup.check_imports()
pd.DataFrame([{"package": k, "version": v} for k, v in env["packages"].items()])

# %% [markdown]
# ## What each framework sees
# `device="auto"` picks the accelerator each framework would use by default (CUDA, TPU, MPS) and
# falls back to the CPU; the CPU is always checked too, since the CPU campaigns run there.

# %%
seen = fw_device.torch_devices() + fw_device.jax_devices()
pd.DataFrame([d.__dict__ for d in seen])

# %%
targets = {}
for framework in ("torch", "jax"):
    kind = fw_device.resolve_device(framework, device)
    targets[framework] = sorted({"cpu", kind})
targets

# %% [markdown]
# ## Compilers and a correctness check on every framework/device pair

# %%
for kind in targets["torch"]:
    checks.append(setup.check_torch_matmul(kind, matmul_size))
    if check_compile:
        checks.append(setup.check_torch_compile(kind))
for kind in targets["jax"]:
    jdev = fw_device.jax_device(kind)
    checks.append(setup.check_jax_matmul(jdev, kind, matmul_size))
    if check_compile:
        checks.append(setup.check_xla_compile(jdev, kind))

# %%
rec = Recorder("setup", mode="-", precision="fp32")
for c in checks:
    kind = None if c.device == "-" else c.device
    rec.add(
        "check_passed",
        float(c.passed),
        "bool",
        status="ok" if c.passed else "failed",
        error=None if c.passed else c.detail,
        framework=None if c.framework == "-" else c.framework,
        device=kind,
        device_name=fw_device.device_name(c.framework, kind) if kind else None,
        extra={"check": c.name, "detail": c.detail, "seconds": round(c.seconds, 3)},
    )
rec.add(
    "torch_matmul_allow_tf32", float(env["torch"]["matmul_allow_tf32"]), "bool", framework="torch"
)
rec.add(
    "torch_cudnn_allow_tf32", float(env["torch"]["cudnn_allow_tf32"]), "bool", framework="torch"
)
table = rec.frame()[["framework", "device", "status", "extra"]]
rec.emit()

# %% [markdown]
# ## Result

# %%
summary = pd.DataFrame(
    [
        {
            "check": c.name,
            "framework": c.framework,
            "device": c.device,
            "result": "PASS" if c.passed else "FAIL",
            "detail": c.detail,
            "seconds": round(c.seconds, 2),
        }
        for c in checks
    ]
)
failed = summary[summary.result == "FAIL"]
print(f"{len(summary) - len(failed)}/{len(summary)} checks passed")
summary.style.map(lambda v: "color: #b00020" if v == "FAIL" else "", subset=["result"])

# %%
# A failed check fails the cell, so the campaign's exit status and the manifest show it too.
assert failed.empty, f"setup checks failed: {failed.check.tolist()}"
