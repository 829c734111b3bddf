"""Speech encoders for the web-audio family, built from ``transformers``' configs with seeded
random weights (nothing is downloaded):

- **wav2vec2** (``Wav2Vec2Model``) hears raw 16 kHz audio of any length; its Flax twin
  (``flax_wav2vec2``) holds the same weights. ``tiny`` is a test size (wav2vec2's shape at a width
  of 256 and four layers, for tests and the browser's software WebGPU); ``base`` is
  wav2vec2-base's encoder.
- **whisper** (``WhisperEncoder``) hears an 80-band log-mel spectrogram of a fixed window,
  ``transformers``' own feature extractor's (10 ms frames); shorter audio is padded with silence,
  so the encoder's cost does not depend on the audio's length. ``tiny`` and ``base`` are
  whisper-tiny's and whisper-base's encoders at Whisper's 30 s window. Its JAX side is PyTorch's
  own module through torchax (``torchax_bridge``), proven in float64 the same way.

Dropout and layer drop are set to 0 and the models run in eval mode (no time masking): every
runtime computes the same deterministic encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fwbench.models.flax_wav2vec2 import SIZES

SAMPLE_RATE = 16_000
_SPEECH_MODELS = ("wav2vec2", "whisper")
# what each encoder's one input is called, in PyTorch and in the ONNX file
INPUT_NAMES = {"wav2vec2": "input_values", "whisper": "input_features"}


@dataclass(frozen=True)
class _WhisperSize:
    d_model: int
    layers: int
    heads: int
    ffn: int


_WHISPER_SIZES = {"tiny": _WhisperSize(384, 4, 6, 1536), "base": _WhisperSize(512, 6, 8, 2048)}
_WHISPER_MELS = 80
WHISPER_WINDOW_S = 30  # Whisper's own: every input is this long, padded with silence
_ENCODER_FRAMES_PER_S = 50  # the second convolution halves the frame rate


def check_size(size: str, model: str = "wav2vec2"):
    """The size's config; a ValueError names the choices for an unknown model or size."""
    if model not in _SPEECH_MODELS:
        raise ValueError(f"speech model must be one of {_SPEECH_MODELS}, got {model!r}")
    sizes = SIZES if model == "wav2vec2" else _WHISPER_SIZES
    if size not in sizes:
        raise ValueError(f"{model} size must be one of {tuple(sizes)}, got {size!r}")
    return sizes[size]


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


def _build_speech_torch(size: str, *, seed: int = 0):
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

    torch_model = _build_speech_torch(size, seed=seed)
    config = check_size(size)
    # shapes only: Flax's own initialisation would compile once per weight shape, and the port
    # overwrites every weight anyway
    flax_model = nnx.eval_shape(lambda: flax_wav2vec2.Wav2Vec2(config, rngs=nnx.Rngs(seed)))
    porting.port_state_dict(flax_wav2vec2.links(flax_model), torch_model.state_dict())
    return torch_model, flax_model


def whisper_config(size: str, window_s: int = WHISPER_WINDOW_S):
    """``transformers``' ``WhisperConfig`` of the size's encoder for a ``window_s`` window (a
    window other than 30 s is not Whisper: tests use a short one), stochastic parts off."""
    from transformers import WhisperConfig

    c = check_size(size, "whisper")
    if int(window_s) != window_s or window_s < 1:
        raise ValueError(f"Whisper's window is whole seconds, got {window_s}")
    return WhisperConfig(
        num_mel_bins=_WHISPER_MELS,
        d_model=c.d_model,
        encoder_layers=c.layers,
        encoder_attention_heads=c.heads,
        encoder_ffn_dim=c.ffn,
        max_source_positions=int(window_s) * _ENCODER_FRAMES_PER_S,
        activation_function="gelu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
    )


def build_whisper_torch(size: str, *, seed: int = 0, window_s: int = WHISPER_WINDOW_S):
    """``WhisperEncoder`` of ``size`` with ``transformers``' own initialisation (sinusoidal
    positions included) under ``torch.manual_seed(seed)``, in eval mode, eager attention."""
    import torch
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    config = whisper_config(size, window_s)
    config._attn_implementation = "eager"
    return WhisperEncoder(config).eval()


def build_speech(model: str, size: str, *, seed: int = 0, window_s: int = WHISPER_WINDOW_S):
    """(the torch model, its Flax twin or None): wav2vec2 has a twin, Whisper runs on JAX through
    torchax."""
    if model == "wav2vec2":
        return build_speech_pair(size, seed=seed)
    check_size(size, model)
    return build_whisper_torch(size, seed=seed, window_s=window_s), None


def log_mel(audio, window_s: int = WHISPER_WINDOW_S):
    """Whisper's input for ``audio``: (80, 100 · window_s) float32 log-mel features from
    ``transformers``' ``WhisperFeatureExtractor``, the audio padded with silence to the window."""
    from transformers import WhisperFeatureExtractor

    if len(audio) > window_s * SAMPLE_RATE:
        raise ValueError(
            f"{len(audio) / SAMPLE_RATE:g} s of audio is longer than Whisper's {window_s} s window"
        )
    extractor = WhisperFeatureExtractor(
        feature_size=_WHISPER_MELS, sampling_rate=SAMPLE_RATE, chunk_length=int(window_s)
    )
    found = extractor(np.asarray(audio, np.float32), sampling_rate=SAMPLE_RATE, return_tensors="np")
    return np.asarray(found.input_features[0], np.float32)


def model_input(model: str, audio, window_s: int = WHISPER_WINDOW_S):
    """What the encoder hears for ``audio``, without the batch axis: the audio itself (wav2vec2)
    or its log-mel window (Whisper)."""
    return audio if model == "wav2vec2" else log_mel(audio, window_s)
