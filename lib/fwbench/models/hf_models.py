"""Transformers models built from their configs (random weights; nothing is downloaded), for the
PyTorch side and for PyTorch's own graph on JAX's compiler (torchax). None has a Flax twin.

Each is the encoder alone and returns its last hidden state, the tensor the float64 proof compares
and the timing returns: BERT-base over token ids, ViT-base over images, wav2vec2-base (the speech
family's ``base`` configuration) over raw 16 kHz audio, and two MetaFormers over images. Attention is PyTorch's
``scaled_dot_product_attention`` ("sdpa"): transformers' "eager" attention computes its softmax in
float32 whatever the model's dtype, which would cap a float64 proof near 1e-8. wav2vec2's
weight-normalised positional convolution is folded into a plain weight, as for inference:
torchax has no lowering for the parametrisation's ``aten::set_``, and the function is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class _Entry:
    builder: str  # "module:function", called with num_classes (which an encoder ignores)
    inputs: str  # "tokens", "image" or "audio"
    native_size: int  # tokens, pixels per side, or audio samples
    kind: str
    label: str


MODELS = {
    "hf_bert_base": _Entry(f"{__name__}:bert_base", "tokens", 128, "transformer", "BERT-base (HF)"),
    "hf_vit_base": _Entry(f"{__name__}:vit_base", "image", 224, "transformer", "ViT-base (HF)"),
    "hf_wav2vec2_base": _Entry(
        f"{__name__}:wav2vec2_base", "audio", 16_000, "transformer", "wav2vec2-base (HF)"
    ),
    # MetaFormers without attention: a block's token mixer is average pooling (PoolFormer) or
    # focal modulation, depthwise convolutions gating the tokens (FocalNet); no torchvision model
    # is built from these blocks
    "hf_poolformer_s12": _Entry(
        f"{__name__}:poolformer_s12", "image", 224, "cnn", "PoolFormer-S12 (HF)"
    ),
    "hf_focalnet_tiny": _Entry(
        f"{__name__}:focalnet_tiny", "image", 224, "transformer", "FocalNet-T (HF)"
    ),
    # blocks no torchvision model is built from, each the default (smallest published) config:
    # MobileViT (inverted residuals, then attention over unfolded patches of the feature map),
    # LeViT (attention with BatchNorm and a shrinking, subsampling stack), SwiftFormer (additive
    # attention: no token-by-token matrix) and CvT (convolutional token embeddings and
    # projections inside attention)
    "hf_mobilevit_small": _Entry(
        f"{__name__}:mobilevit_small", "image", 256, "cnn", "MobileViT-S (HF)"
    ),
    "hf_levit_128s": _Entry(
        f"{__name__}:levit_128s", "image", 224, "transformer", "LeViT-128S (HF)"
    ),
    "hf_swiftformer_xs": _Entry(
        f"{__name__}:swiftformer_xs", "image", 224, "cnn", "SwiftFormer-XS (HF)"
    ),
    "hf_cvt_13": _Entry(f"{__name__}:cvt_13", "image", 224, "transformer", "CvT-13 (HF)"),
}


class LastHidden(nn.Module):
    """A transformers encoder returning its last hidden state as one tensor."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, x):
        return self.encoder(x).last_hidden_state


def bert_base(num_classes: int = 1000) -> LastHidden:
    from transformers import BertConfig, BertModel

    del num_classes
    config = BertConfig(attn_implementation="sdpa")
    return LastHidden(BertModel(config, add_pooling_layer=False))


def vit_base(num_classes: int = 1000) -> LastHidden:
    from transformers import ViTConfig, ViTModel

    del num_classes
    config = ViTConfig(attn_implementation="sdpa")
    return LastHidden(ViTModel(config, add_pooling_layer=False))


def wav2vec2_base(num_classes: int = 1000) -> LastHidden:
    from torch.nn.utils import parametrize
    from transformers import Wav2Vec2Model

    from fwbench.models.speech import hf_config

    del num_classes
    config = hf_config("base")
    config._attn_implementation = "sdpa"
    model = Wav2Vec2Model(config)
    conv = model.encoder.pos_conv_embed.conv
    if parametrize.is_parametrized(conv):
        parametrize.remove_parametrizations(conv, "weight", leave_parametrized=True)
    return LastHidden(model)


def poolformer_s12(num_classes: int = 1000) -> LastHidden:
    from transformers import PoolFormerConfig, PoolFormerModel

    del num_classes
    return LastHidden(PoolFormerModel(PoolFormerConfig()))  # the default is the S12


def focalnet_tiny(num_classes: int = 1000) -> LastHidden:
    from transformers import FocalNetConfig, FocalNetModel

    del num_classes
    return LastHidden(
        FocalNetModel(FocalNetConfig(), add_pooling_layer=False)
    )  # the default: T (SRF)


def mobilevit_small(num_classes: int = 1000) -> LastHidden:
    from transformers import MobileViTConfig, MobileViTModel

    del num_classes
    return LastHidden(MobileViTModel(MobileViTConfig(), expand_output=True))  # the default: S


def levit_128s(num_classes: int = 1000) -> LastHidden:
    from transformers import LevitConfig, LevitModel

    del num_classes
    return LastHidden(LevitModel(LevitConfig()))  # the default: 128S


def swiftformer_xs(num_classes: int = 1000) -> LastHidden:
    from transformers import SwiftFormerConfig, SwiftFormerModel

    del num_classes
    return LastHidden(SwiftFormerModel(SwiftFormerConfig()))  # the default: XS


def cvt_13(num_classes: int = 1000) -> LastHidden:
    from transformers import CvtConfig, CvtModel

    del num_classes
    return LastHidden(CvtModel(CvtConfig(), add_pooling_layer=False))  # the default: CvT-13
