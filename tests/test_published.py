"""A GPU run beside the published figures: which comparisons are placed, and the ratios."""

from __future__ import annotations

import pandas as pd
import pytest

from fwbench.families.inference import inference_report as inference


def matrix_row(**overrides) -> dict:
    row = {
        "model": "resnet50",
        "device_name": "NVIDIA H200",
        "precision": "default",
        "threads": 0,
        "batch_size": 128,
        "comparison": "best",
        "jax_variant": "jit",
        "torch_variant": "eager",
        "jax_img_s": 3000.0,
        "torch_img_s": 4000.0,
        "ratio": 0.75,
    }
    return {**row, **overrides}


def test_only_best_modes_at_the_published_batch_on_a_gpu_are_placed():
    matrix = pd.DataFrame(
        [
            matrix_row(),
            matrix_row(comparison="default"),
            matrix_row(batch_size=1),
            matrix_row(device_name="AMD EPYC 9R14 (family 25, model 17)"),
            matrix_row(model="convnext_tiny"),
        ]
    )
    table = inference.published_table(matrix)
    assert len(table) == 1
    (row,) = table.itertuples()
    published = inference.PUBLISHED["img_s"]["resnet50"]
    assert row.published_torch_img_s == published["torch"]
    assert row.published_ratio == pytest.approx(published["jax"] / published["torch"])
    assert row.torch_vs_published == pytest.approx(4000 / published["torch"])
    assert row.jax_vs_published == pytest.approx(3000 / published["jax"])


def test_a_cpu_run_has_no_published_section():
    matrix = pd.DataFrame([matrix_row(device_name="Intel(R) Xeon(R) Processor (family 6)")])
    assert inference.published_table(matrix).empty
    assert inference.published_table(pd.DataFrame()).empty


def test_the_study_is_labelled_by_what_it_measured():
    (row,) = inference.published_table(pd.DataFrame([matrix_row()])).itertuples()
    assert row.published_measured == "inference"
    assert row.published_device == "NVIDIA H100 NVL"
    assert row.published_precision == "fp32 at each library's defaults"


@pytest.mark.parametrize(
    "other",
    [
        {"precision": "bf16", "torch_variant": "compile+channels_last"},  # the first lease's
        {"precision": "fp32"},  # TF32 off on both sides: not the study's defaults
        {"precision": "tf32"},
        {"torch_variant": "compile"},  # the study's precision, not its PyTorch mode
    ],
)
def test_no_ratio_of_ours_to_theirs_across_settings(other):
    (row,) = inference.published_table(pd.DataFrame([matrix_row(**other)])).itertuples()
    assert pd.isna(row.torch_vs_published) and pd.isna(row.jax_vs_published)
    # both JAX ÷ PyTorch ratios stay, each within its own setting
    assert row.ratio == 0.75
    published = inference.PUBLISHED["img_s"]["resnet50"]
    assert row.published_ratio == pytest.approx(published["jax"] / published["torch"])
