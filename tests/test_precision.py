"""precision.configure: the one place precision is set, and the settings each record carries."""

from __future__ import annotations

import pytest

from fwbench.measure import precision


@pytest.fixture(autouse=True)
def back_to_fp32():
    yield
    precision.configure("torch", "fp32")
    precision.configure("jax", "fp32")


def test_tf32_turns_tf32_on_for_both_frameworks_and_says_so():
    import jax
    import torch

    torch_settings = precision.configure("torch", "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert torch_settings["torch.float32_matmul_precision"] == "high"
    jax_settings = precision.configure("jax", "tf32")
    assert jax.config.jax_default_matmul_precision == "tensorfloat32"
    assert jax_settings["jax_default_matmul_precision"] == "tensorfloat32"
    assert torch_settings["compute_dtype"] == jax_settings["compute_dtype"] == "float32"


@pytest.mark.parametrize("name", ["fp32", "bf16-mixed", "fp64"])
def test_every_other_precision_keeps_tf32_off(name):
    import jax
    import torch

    precision.configure("torch", "tf32")
    precision.configure("jax", "tf32")
    settings = precision.configure("torch", name, precision.TRAINING_PRECISIONS)
    assert settings["torch.backends.cuda.matmul.allow_tf32"] is False
    assert torch.get_float32_matmul_precision() == "highest"
    precision.configure("jax", name, precision.TRAINING_PRECISIONS)
    assert jax.config.jax_default_matmul_precision == "highest"


def test_training_precisions_record_compute_and_master_weight_types():
    mixed = precision.configure("torch", "bf16-mixed", precision.TRAINING_PRECISIONS)
    assert (mixed["compute_dtype"], mixed["master_weights"]) == ("bfloat16", "float32")
    fp64 = precision.configure("jax", "fp64", precision.TRAINING_PRECISIONS)
    assert (fp64["compute_dtype"], fp64["master_weights"]) == ("float64", "float64")
    assert "jax.enable_x64" in fp64["jax_enable_x64"]
    assert "master_weights" not in precision.configure("torch", "fp32")


def test_a_precision_outside_the_notebooks_set_is_refused():
    with pytest.raises(ValueError, match="precision must be one of"):
        precision.configure("torch", "bf16-mixed")  # an inference notebook's set
    with pytest.raises(ValueError, match="precision must be one of"):
        precision.configure("jax", "fp8", precision.TRAINING_PRECISIONS)
    with pytest.raises(ValueError, match="precision must be one of"):
        precision.check("int8")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_default_leaves_each_librarys_settings_as_found_and_records_them(framework):
    """The reference study's setting: nothing set, what was in force read back."""
    import jax
    import jax.numpy as jnp
    import torch

    precision.configure(framework, "tf32")  # whatever the process holds, default keeps
    before = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        jax.config.jax_default_matmul_precision,
    )
    settings = precision.configure(framework, precision.DEFAULT)
    after = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        jax.config.jax_default_matmul_precision,
    )
    assert after == before
    assert settings["compute_dtype"] == "float32"
    if framework == "torch":
        assert settings["torch.backends.cudnn.allow_tf32"] is True
        assert settings["torch.float32_matmul_precision"] == "high"
    else:
        assert settings["jax_default_matmul_precision"] == "tensorfloat32"
    assert precision.torch_dtype("default") == torch.float32
    assert precision.jax_dtype("default") == jnp.float32
