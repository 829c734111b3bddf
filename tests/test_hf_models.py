"""Transformers models from their configs: known to the registry by name, counted on the model,
fed their own kind of input, and run through 10_inference's torchax mode with a float64 proof."""

from __future__ import annotations

import nbformat
import numpy as np
import pandas as pd
import pytest

from fwbench.data import synthetic_input
from fwbench.models import registry
from fwbench.results import db
from tests.conftest import run_cli


def test_the_registry_counts_a_transformers_model_on_the_model():
    spec = registry.get_spec("hf_bert_base")
    # BERT-base's encoder without its pooler: 109,482,240 - 768 x 768 - 768
    assert spec.param_count == 108_891_648 and not spec.published
    assert spec.inputs == "tokens" and spec.input_shape(4, 16) == (4, 16)
    assert not spec.has_twin
    with pytest.raises(ValueError, match="no Flax twin"):
        registry.require_twin("hf_bert_base")


def test_wav2vec2s_weight_norm_is_folded_for_torchax():
    from torch.nn.utils import parametrize

    model = registry.build_torch("hf_wav2vec2_base")
    conv = model.encoder.encoder.pos_conv_embed.conv
    assert not parametrize.is_parametrized(conv)
    assert registry.get_spec("hf_wav2vec2_base").inputs == "audio"


def test_each_input_kind_has_its_shape_and_type():
    assert synthetic_input("image", 2, 8, 0).shape == (2, 3, 8, 8)
    tokens = synthetic_input("tokens", 2, 16, 0)
    assert tokens.dtype == np.int64 and tokens.shape == (2, 16) and tokens.max() < 1000
    audio = synthetic_input("audio", 2, 400, 0)
    assert audio.dtype == np.float32 and audio.shape == (2, 400)
    with pytest.raises(ValueError, match="inputs must be one of"):
        synthetic_input("video", 1, 8, 0)


CAMPAIGN = """campaign: hf_tokens
steps:
  - notebook: 10_inference
    params: {framework: jax, mode: torchax, device: cpu, model: hf_bert_base, seq_len: 16,
             batch_sizes: [1], min_iters: 2, min_seconds: 0.05, warmup: 1, block_size: 2}
"""


def test_a_text_model_runs_through_torchax_on_token_ids(tmp_path):
    campaign = tmp_path / "hf.yaml"
    campaign.write_text(CAMPAIGN)
    out = tmp_path / "out"
    done = run_cli("run", campaign, "--out", out, "--no-index")
    assert done.returncode == 0, done.stderr[-3000:]
    (nb,) = out.glob("hf_tokens/*/10_inference/*.ipynb")
    records = pd.DataFrame(db._records_in(nbformat.read(nb, as_version=4)))
    proof = records[records.metric == "float64_max_rel_err"].iloc[0]
    assert proof.status == "ok" and proof.value <= 1e-10
    speed = records[records.metric == "throughput_img_s"].iloc[0]
    assert speed.status == "ok" and speed["extra"]["inputs"] == "tokens"
    assert speed["extra"]["seq_len"] == 16
