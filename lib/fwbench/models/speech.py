"""Speech encoders for the web-audio family: ``transformers``' ``Wav2Vec2Model`` built from a
config with seeded random weights (nothing is downloaded), and its Flax twin holding the same
weights (``flax_wav2vec2``).

``tiny`` is for tests and the browser's software WebGPU; ``base`` is wav2vec2-base's encoder, the
study's size. Dropout and layer drop are set to 0 and the models run in eval mode (no time masking): both
sides compute the same deterministic encoder.
"""

from __future__ import annotations

from fwbench.models.flax_wav2vec2 import SIZES, SpeechConfig

SAMPLE_RATE = 16_000


def check_size(size: str) -> SpeechConfig:
    if size not in SIZES:
        raise ValueError(f"speech model size must be one of {tuple(SIZES)}, got {size!r}")
    return SIZES[size]


def hf_config(size: str):
    """The ``transformers`` config of a size, with everything random or stochastic off."""
    from transformers import Wav2Vec2Config

    c = check_size(size)
    return Wav2Vec2Config(
        conv_dim=list(c.conv_dim),
        conv_kernel=list(c.conv_kernel),
        conv_stride=list(c.conv_stride),
        conv_bias=False,
        feat_extract_norm="group",
        feat_extract_activation="gelu",
        hidden_act="gelu",
        do_stable_layer_norm=False,
        hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size,
        num_conv_pos_embeddings=c.num_conv_pos_embeddings,
        num_conv_pos_embedding_groups=c.num_conv_pos_embedding_groups,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        final_dropout=0.0,
        layerdrop=0.0,
        # time masking stays at its default: it only acts in training, and its learned vector
        # (masked_spec_embed) exists only where it is on, which the port expects
    )


def build_speech_torch(size: str, *, seed: int = 0):
    """``Wav2Vec2Model`` of ``size`` with ``transformers``' own initialisation under
    ``torch.manual_seed(seed)``, in eval mode, eager attention."""
    import torch
    from transformers import Wav2Vec2Model

    torch.manual_seed(seed)
    model = Wav2Vec2Model(hf_config(size))
    model.config._attn_implementation = "eager"
    return model.eval()


def build_speech_pair(size: str, *, seed: int = 0):
    """The torch model and its Flax twin holding the same weights, ported from torch."""
    from flax import nnx

    from fwbench.models import flax_wav2vec2, porting

    torch_model = build_speech_torch(size, seed=seed)
    config = check_size(size)
    # shapes only: Flax's own initialisation would compile once per weight shape, and the port
    # overwrites every weight anyway
    flax_model = nnx.eval_shape(lambda: flax_wav2vec2.Wav2Vec2(config, rngs=nnx.Rngs(seed)))
    porting.port_state_dict(flax_wav2vec2.links(flax_model), torch_model.state_dict())
    return torch_model, flax_model
