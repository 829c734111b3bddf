"""A GPU run beside the published figures: which comparisons are placed, and the ratios."""

from __future__ import annotations

import pandas as pd
import pytest

from fwbench.report.family_reports import inference_report as inference


def matrix_row(**overrides) -> dict:
    row = {
        "model": "resnet50",
        "device_name": "NVIDIA H200",
        "precision": "fp32",
        "threads": 0,
        "batch_size": 128,
        "comparison": "best",
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
