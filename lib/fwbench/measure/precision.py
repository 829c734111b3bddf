"""Precision is explicit, never a default (DESIGN.md section 5), and set up by ``configure`` alone.

fp32 means TF32 off on both sides; tf32 turns it on for both; bf16/fp16 store weights and activations
in that type on both sides. Training adds two: bf16-mixed (fp32 master weights, bf16 compute, TF32
off for whatever still runs in fp32) and fp64 (the parity proof). Every notebook calls
``configure(framework, precision)`` and records the settings it returns, so each record says which
matmul flags and compute type were in force.

``default`` is the one exception, named as such: fp32 storage with each library's matmul and
convolution settings left as the process found them (PyTorch: cuDNN convolutions may use TF32,
matmuls not; JAX: its default matmul precision, TF32 on a recent NVIDIA GPU). It is the setting of
the study fwbench started from (params/gpu_reference.yaml), never a comparison of fwbench's own;
its records carry the settings read back, so they say what the defaults were.
"""

from __future__ import annotations

# What the inference, calibration and validation notebooks accept.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "default")
# The precision that sets nothing: each library as it comes.
DEFAULT = "default"
# What the training notebook accepts.
TRAINING_PRECISIONS = ("fp32", "tf32", "bf16-mixed", "fp64")
# The matmul setting behind each precision: only tf32 lets fp32 matmuls round to TF32.
_MATMUL = {
    "fp32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16",
    "fp16": "fp16",
    "bf16-mixed": "fp32",
    "fp64": "fp32",
}
_JAX_MATMUL = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "default", "fp16": "default"}
_COMPUTE_DTYPE = {
    "fp32": "float32",
    "tf32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "bf16-mixed": "bfloat16",
    "fp64": "float64",
}
_MASTER_WEIGHTS = {"bf16-mixed": "float32", "fp64": "float64"}


def check(precision: str, allowed: tuple = PRECISIONS) -> str:
    if precision not in allowed:
        raise ValueError(f"precision must be one of {allowed}, got {precision!r}")
    return precision


def configure(framework: str, precision: str, allowed: tuple = PRECISIONS) -> dict:
    """Apply ``precision``'s matmul settings for ``framework``; returns what is in force, to record.

    ``compute_dtype`` is the type the model computes in; training precisions whose weights are
    kept in another type add ``master_weights``.
    """
    check(precision, allowed)
    if precision == DEFAULT:
        settings = _torch_settings() if framework == "torch" else _jax_settings()
        return settings | {"compute_dtype": "float32", "precision_settings": "library defaults"}
    matmul = _MATMUL[precision]
    settings = _configure_torch(matmul) if framework == "torch" else _configure_jax(matmul)
    settings["compute_dtype"] = _COMPUTE_DTYPE[precision]
    if precision in _MASTER_WEIGHTS:
        settings["master_weights"] = _MASTER_WEIGHTS[precision]
    if precision == "fp64" and framework == "jax":
        settings["jax_enable_x64"] = "scoped to the computation (jax.enable_x64)"
    return settings


def _configure_torch(matmul: str) -> dict:
    import torch

    tf32 = matmul == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return _torch_settings()


def _torch_settings() -> dict:
    import torch

    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def _configure_jax(matmul: str) -> dict:
    import jax

    jax.config.update("jax_default_matmul_precision", _JAX_MATMUL[matmul])
    return _jax_settings()


def _jax_settings() -> dict:
    import jax

    # None: no precision asked for, so XLA's own default for the backend applies
    return {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}


def torch_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(check(precision), torch.float32)


def jax_dtype(precision: str):
    import jax.numpy as jnp

    return {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(check(precision), jnp.float32)


def cast_floating(tree, dtype):
    """Cast the floating-point leaves of a JAX pytree; integers and PRNG keys stay as they are."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree
    )
