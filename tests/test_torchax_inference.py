"""10_inference's torchax mode: PyTorch's own graph on XLA for a model with no Flax twin, proven
in float64 before it is timed, and never JAX's side of a JAX-vs-PyTorch comparison."""

from __future__ import annotations

import json

import nbformat
import pandas as pd

from fwbench.report import arms
from fwbench.results import db
from tests.conftest import run_cli

# squeezenet1_1 has no Flax twin: a JAX cell of it exists only through torchax
STEP = """campaign: {name}
report: false
steps:
  - notebook: 10_inference
    params: {{framework: jax, mode: {mode}, device: cpu, model: squeezenet1_1, image_size: 64,
             batch_sizes: [1], min_iters: 2, min_seconds: 0.05, warmup: 1, block_size: 2}}
"""


def write(tmp_path, mode: str):
    path = tmp_path / f"{mode}.yaml"
    path.write_text(STEP.format(name=f"torchax_{mode}", mode=mode))
    return path


def test_a_model_without_a_twin_is_refused_under_jit_and_taken_under_torchax(tmp_path):
    refused = run_cli("run", write(tmp_path, "jit"), "--dry-run", "--out", tmp_path / "out")
    assert refused.returncode == 2 and "squeezenet1_1" in refused.stderr
    taken = run_cli("run", write(tmp_path, "torchax"), "--dry-run", "--out", tmp_path / "out")
    assert taken.returncode == 0, taken.stderr


def records_of(nb_path) -> pd.DataFrame:
    return pd.DataFrame(db._records_in(nbformat.read(nb_path, as_version=4)))


def test_a_torchax_cell_proves_float64_then_times(tmp_path):
    out = tmp_path / "out"
    done = run_cli("run", write(tmp_path, "torchax"), "--out", out, "--no-index")
    assert done.returncode == 0, done.stderr[-3000:]
    (nb_path,) = out.glob("torchax_torchax/*/10_inference/*.ipynb")
    records = records_of(nb_path)
    proof = records[records.metric == "float64_max_rel_err"].iloc[0]
    assert proof.status == "ok" and proof.value <= 1e-10
    throughput = records[records.metric == "throughput_img_s"].iloc[0]
    assert throughput.status == "ok" and throughput.value > 0 and throughput["mode"] == "torchax"
    settings = json.dumps(throughput["extra"]["settings"])
    assert "NCHW" in settings and "torchax" in settings


def test_torchax_never_stands_for_jax_in_a_comparison():
    # torchax is the fastest JAX arm here; the best JAX arm is still JAX's own
    group = pd.DataFrame(
        {
            "framework": ["jax", "jax", "torch"],
            "variant": ["torchax", "jit", "compile"],
            "median": [300.0, 100.0, 200.0],
        }
    )
    assert arms.pick_arm(group, "jax", "best").variant == "jit"
    assert arms.pick_arm(group.iloc[[0, 2]], "jax", "best") is None


def test_the_report_lists_each_torchax_model_with_its_proof_or_why_not():
    from fwbench.families.inference import inference_report

    def row(model, metric, value, status="ok", error=None, batch_size=None):
        return {
            "family": "inference",
            "mode": "torchax",
            "model": model,
            "device_name": "CPU",
            "precision": "fp32",
            "metric": metric,
            "value": value,
            "status": status,
            "error": error,
            "batch_size": batch_size,
        }

    meas = pd.DataFrame(
        [
            row("squeezenet1_1", "float64_max_rel_err", 3e-15),
            row("squeezenet1_1", "throughput_img_s", 120.0, batch_size=1),
            row("odd_net", "float64_max_rel_err", None, "skipped", "NotImplementedError: aten.x"),
            {**row("resnet50", "throughput_img_s", 50.0, batch_size=1), "mode": "jit"},
        ]
    )
    table = inference_report.torchax_table(meas).set_index("model")
    assert list(table.index) == ["odd_net", "squeezenet1_1"]
    assert table.loc["squeezenet1_1", "throughput_img_s"] == 120.0
    assert table.loc["odd_net", "proof"] == "skipped"
    assert table.loc["odd_net", "why_not"].startswith("NotImplementedError")
    assert inference_report.torchax_table(meas[meas["mode"] == "jit"]).empty
