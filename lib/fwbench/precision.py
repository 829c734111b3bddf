"""Precision is explicit, never a default (DESIGN.md section 5).

fp32 means TF32 off on both sides; tf32 turns it on for both; bf16/fp16 store weights and activations
in that type on both sides. ``configure`` returns the settings it applied so notebooks can record them.
"""

from __future__ import annotations

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
_JAX_MATMUL = {"fp32": "highest", "tf32": "tensorfloat32", "bf16": "default", "fp16": "default"}


def check(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def configure_torch(precision: str) -> dict:
    import torch

    tf32 = check(precision) == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def configure_jax(precision: str) -> dict:
    import jax

    jax.config.update("jax_default_matmul_precision", _JAX_MATMUL[check(precision)])
    return {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}


def configure(framework: str, precision: str) -> dict:
    return configure_torch(precision) if framework == "torch" else configure_jax(precision)


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
