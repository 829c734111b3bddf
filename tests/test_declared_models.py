"""Models from outside the library: declared by import path in a campaign or shipped through an
entry point, counted on the model itself, carried to the kernels, and the worked example in
``examples/my_model`` run through validation, inference and training."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pandas as pd
import pytest

from fwbench.models import declared, registry
from fwbench.results import db
from tests.conftest import REPO, run_cli

EXAMPLE = REPO / "examples" / "my_model"
TINY = {"torch": "my_model.torch_side:build", "flax": "my_model.flax_twin", "image_size": 32}

LINEAR = """from torch import nn


def build(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))
"""


def test_a_declared_models_size_is_counted_on_the_model(tmp_path):
    (tmp_path / "linear_probe.py").write_text(LINEAR)
    found = declared.parse(
        "linear_probe", {"torch": "linear_probe:build", "path": ".", "image_size": 8}, base=tmp_path
    )
    spec = registry.declare(found)
    # 192 inputs to 1000 classes plus their biases; one image is 192 x 1000 multiply-adds
    assert spec.param_count == 193_000
    assert spec.gmacs == pytest.approx(192_000 / 1e9)
    assert not spec.published and not spec.has_twin
    with pytest.raises(declared.DeclarationError, match="counted on the model"):
        declared.parse("linear_probe", {"torch": "linear_probe:build", "param_count": 5})


def test_a_declared_name_may_not_shadow_the_registry():
    with pytest.raises(declared.DeclarationError, match="already has a model"):
        registry.declare(declared.parse("resnet50", {"torch": "torchvision.models:resnet50"}))


@pytest.mark.parametrize(
    "change, says",
    [
        ({"torch": "my_model.torch_sid:build"}, "cannot import 'my_model.torch_sid'"),
        ({"torch": "my_model.torch_side:buld"}, "has no function 'buld'"),
        ({"flax": "my_model.torch_side"}, "lacks ['build_flax', 'links']"),
        ({"imagesize": 32}, "unknown keys ['imagesize']"),
        ({"path": "nowhere"}, "is not a folder"),
    ],
)
def test_a_typo_in_a_declaration_is_one_line_and_exit_2(tmp_path, change, says):
    models = {"tinycnn": {**TINY, "path": str(EXAMPLE), **change}}
    campaign = tmp_path / "mine.yaml"
    campaign.write_text(
        json.dumps(
            {
                "campaign": "mine",
                "models": models,
                "steps": [{"notebook": "10_inference", "params": {"model": "tinycnn"}}],
            }
        )
    )
    out = tmp_path / "out"
    done = run_cli("run", campaign, "--dry-run", "--out", out)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=REPO,
        timeout=300,
    )


def test_declarations_reach_a_kernel_through_the_environment():
    found = declared.parse("tinycnn", {**TINY, "path": str(EXAMPLE)})
    env = declared.to_environment({"tinycnn": found})
    code = (
        "from fwbench.models import registry; s = registry.get_spec('tinycnn'); "
        "print(s.param_count, s.has_twin, registry.build_torch('tinycnn').training)"
    )
    assert _python(code).returncode != 0  # without the environment nothing knows the name
    done = _python(code, **env)
    assert done.returncode == 0, done.stderr
    torch_model = declared.build(found)
    count = sum(p.numel() for p in torch_model.parameters())
    assert done.stdout.split() == [str(count), "True", "False"]


def test_a_package_ships_models_through_an_entry_point(tmp_path):
    # what `pip install examples/my_model` leaves on the path: the package and its metadata
    info = tmp_path / "fwbench_my_model-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fwbench-my-model\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text("[fwbench.models]\ntinycnn = my_model:TINYCNN\n")
    path = os.pathsep.join([str(tmp_path), str(EXAMPLE)])
    code = "from fwbench.models import registry; print(registry.get_spec('tinycnn').label)"
    done = _python(code, PYTHONPATH=path)
    assert done.returncode == 0 and done.stdout.strip() == "TinyCNN", done.stderr
    campaign = tmp_path / "shipped.yaml"
    campaign.write_text(
        "campaign: shipped\nsteps:\n  - notebook: 01_validation\n    params: {model: tinycnn}\n"
    )
    ran = run_cli("run", campaign, "--dry-run", env={**os.environ, "PYTHONPATH": path})
    assert ran.returncode == 0, ran.stderr


def _run(tmp_path, campaign_text: str) -> pd.DataFrame:
    """Run a campaign of the example's model (its folder as ``{path}``); every record it left."""
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(campaign_text.format(path=EXAMPLE))
    out = tmp_path / "out"
    done = run_cli("run", campaign, "--out", out, "--no-index")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = []
    for nb in sorted(out.glob("*/*/*/*.ipynb")):
        rows += db._records_in(nbformat.read(nb, as_version=4))
    return pd.DataFrame(rows)


def test_the_examples_campaign_is_valid_as_shipped():
    done = run_cli("run", EXAMPLE / "campaign.yaml", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 6 and "campaign file is valid" in done.stderr


# the example's model, declared as its campaign declares it
DECLARED = """models:
  tinycnn: {{torch: my_model.torch_side:build, flax: my_model.flax_twin, path: {path},
            image_size: 32}}
"""

# the example's model and declaration, in fewer cells than its campaign: the twin's float64 gate,
# its JAX inference, and training with the float64 parity of both frameworks' steps (torchax has
# tests of its own, tests/test_torchax_inference.py)
TRIMMED = (
    "campaign: my_model\n"
    + DECLARED
    + """steps:
  - notebook: 01_validation
    params: {{model: tinycnn, device: cpu, batch_size: 2, image_size: 32}}
  - notebook: 10_inference
    params: {{model: tinycnn, framework: jax, device: cpu, image_size: 32, batch_sizes: [1],
             min_iters: 3, min_seconds: 0.1, warmup: 1, block_size: 2}}
  - notebook: 11_training
    params: {{model: tinycnn, framework: torch, device: cpu, dataset: digits, image_size: 32,
             batch_size: 16, min_iters: 3, min_seconds: 0.2, warmup: 1, check_parity: true,
             parity_steps: 3}}
"""
)


def test_the_example_runs_through_validation_inference_and_training(tmp_path):
    records = _run(tmp_path, TRIMMED)
    assert set(records.family) >= {"validation", "inference", "training"}
    assert (records.status == "ok").all(), records[records.status != "ok"]
    fp64 = records[records.metric == "fp64_logits_max_rel_err"].value.iloc[0]
    assert fp64 <= 1e-10
    checks = records[records.family == "validation"].extra.iloc[0]["checks"]
    assert all(checks.values()) and "param_count_is_torchvisions" not in checks
    throughput = records[records.metric == "throughput_img_s"]
    assert set(zip(throughput.family, throughput["mode"], strict=True)) >= {
        ("inference", "jit"),
        ("training", "eager"),
    }
    assert records[records.metric == "fp64_param_parity_max_rel"].value.max() <= 1e-10


MEMORY = (
    "campaign: mine_memory\n"
    + DECLARED
    + """steps:
  - notebook: 12_memory
    params: {{model: tinycnn, image_size: 32, num_classes: 10, batch_sizes: [4],
             budget_fractions: [0.5], checkpoint_every: [1], sqrt_n: false, profile_iters: 1,
             timing_iters: 1}}
"""
)


def test_a_declared_model_goes_through_the_memory_study(tmp_path):
    records = _run(tmp_path, MEMORY)
    peaks = records[(records.metric == "peak_mem_bytes") & (records.status == "ok")]
    assert {"graph", "checkpoint_every_1"} <= set(peaks["mode"]), sorted(set(peaks["mode"]))


def test_a_chain_of_blocks_is_what_checkpointing_wraps():
    from torch import nn

    from fwbench.families.memory.cases import chain_blocks

    small, large = (
        nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
        nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)]),
    )
    model = nn.Module()
    model.head, model.body = small, large
    assert chain_blocks(model) == list(large)
    with pytest.raises(ValueError, match="no top-level"):
        chain_blocks(nn.Linear(2, 2))
