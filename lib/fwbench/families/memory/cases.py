"""Models of the memory family, each with a batch maker, a loss and its list of blocks.

Vision models are torchvision's (``weights=None``: nothing is downloaded). ``bert_encoder`` is a
BERT-style masked-language-model encoder built from plain ``nn.TransformerEncoder`` layers and a
local config, without an attention mask; it stays so that the committed runs made with it can be
repeated. ``bert`` is the real thing: transformers' ``BertForMaskedLM`` built from a
``BertConfig`` with random weights (nothing is downloaded), fed token ids *and* an attention
mask over padded sequences, trained on the masked-language-model loss over the masked positions
only (``ignore_index``). Its whole step traces without a data-dependent branch: no op in it
reads a tensor's value back into Python (``aten._local_scalar_dense``).

The blocks are what ``torch.utils.checkpoint`` wraps in the checkpointing baselines: the
residual stages' bottlenecks, the encoder layers. Each block takes the previous block's output
as its first argument, so any run of consecutive blocks can be checkpointed as one segment.

Any other image model the registry knows (another torchvision classifier, or a model declared
from outside the library) is built through the registry; its blocks are the items of its
largest top-level ``nn.Sequential`` (or ``nn.ModuleList``), the chain such models are made of.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

MODELS = ("resnet50", "resnet152", "vit_b_16", "bert", "bert_encoder")

# name -> (layers, hidden size, heads, feed-forward size, vocabulary)
ENCODER_CONFIGS = {
    "tiny": (2, 64, 2, 128, 512),
    "small": (4, 256, 4, 1024, 8192),
    "base": (12, 768, 12, 3072, 30522),  # BERT-base
}


class _BertStyleEncoder(nn.Module):
    def __init__(self, layers, hidden, heads, ff, vocab, max_len=512, dropout=0.1):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, hidden)
        self.position_embedding = nn.Embedding(max_len, hidden)
        self.embedding_norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            hidden, heads, ff, dropout=dropout, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        x = self.encoder(self.dropout(self.embedding_norm(x)))
        return self.head(x)


class MaskedLM(nn.Module):
    """transformers' BERT for masked language modelling, fed one tensor: ``batch[:, 0]`` holds
    the token ids and ``batch[:, 1]`` the attention mask (1 for a token, 0 for padding)."""

    def __init__(self, layers, hidden, heads, ff, vocab, max_len=512, dropout=0.1):
        super().__init__()
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=ff,
            max_position_embeddings=max_len,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
        )
        self.mlm = BertForMaskedLM(config)

    @property
    def layers(self) -> list[nn.Module]:
        return list(self.mlm.bert.encoder.layer)

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.mlm(input_ids=batch[:, 0], attention_mask=batch[:, 1]).logits


_MASK_SHARE = 0.15  # BERT's share of masked positions
IGNORE = -100  # cross_entropy's ignore_index: no loss at this position


def masked_lm_batch(batch_size: int, seq_len: int, vocab: int, gen: torch.Generator):
    """Padded sequences (lengths between half and all of ``seq_len``) with 15% of their tokens
    masked; the targets are the masked tokens' ids and ``IGNORE`` everywhere else. Id 0 pads,
    the last id of the vocabulary masks."""
    ids = torch.randint(1, vocab - 1, (batch_size, seq_len), generator=gen)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=gen)
    attention = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    masked = (torch.rand(batch_size, seq_len, generator=gen) < _MASK_SHARE) & attention.bool()
    masked[:, 0] = True  # every sequence has a target, so the mean loss is never 0/0
    targets = torch.where(masked, ids, torch.full_like(ids, IGNORE))
    ids = torch.where(masked, torch.full_like(ids, vocab - 1), ids) * attention
    return torch.stack([ids, attention], dim=1), targets


def _token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # no loss where the target is IGNORE: the masked-LM loss over the masked positions only
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


@dataclass
class ModelCase:
    name: str
    model: nn.Module
    batch: torch.Tensor
    targets: torch.Tensor
    loss_fn: object
    blocks: list[nn.Module]


def build_case(
    name: str,
    batch_size: int,
    *,
    image_size: int = 224,
    seq_len: int = 128,
    encoder_size: str = "small",
    num_classes: int = 1000,
    device: str = "cpu",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> ModelCase:
    """The model in training mode, one random batch on ``device`` and the loss to train it with.

    ``dtype`` is the floating-point type of the parameters and of an image batch (token ids stay
    integers); the same seed gives the same values in every dtype."""
    import torchvision

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if name == "bert":
        layers, hidden, heads, ff, vocab = ENCODER_CONFIGS[encoder_size]
        model = MaskedLM(layers, hidden, heads, ff, vocab, max_len=max(seq_len, 512))
        batch, targets = masked_lm_batch(batch_size, seq_len, vocab, gen)
        loss_fn, blocks = _token_loss, model.layers
    elif name == "bert_encoder":
        layers, hidden, heads, ff, vocab = ENCODER_CONFIGS[encoder_size]
        model = _BertStyleEncoder(layers, hidden, heads, ff, vocab, max_len=max(seq_len, 512))
        batch = torch.randint(0, vocab, (batch_size, seq_len), generator=gen)
        targets = torch.randint(0, vocab, (batch_size, seq_len), generator=gen)
        loss_fn, blocks = _token_loss, list(model.encoder.layers)
    elif name in MODELS:
        kwargs = {"image_size": image_size} if name.startswith("vit") else {}
        model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes, **kwargs)
        batch = torch.randn(batch_size, 3, image_size, image_size, generator=gen)
        targets = torch.randint(0, num_classes, (batch_size,), generator=gen)
        loss_fn = nn.functional.cross_entropy
        if name.startswith("vit"):
            blocks = list(model.encoder.layers)
        else:
            blocks = [
                b
                for stage in (model.layer1, model.layer2, model.layer3, model.layer4)
                for b in stage
            ]
    else:
        model = _registry_image_model(name, num_classes)
        batch = torch.randn(batch_size, 3, image_size, image_size, generator=gen)
        targets = torch.randint(0, num_classes, (batch_size,), generator=gen)
        loss_fn, blocks = nn.functional.cross_entropy, chain_blocks(model, name)
    if batch.is_floating_point():
        batch = batch.to(dtype)
    model.to(device=device, dtype=dtype).train()
    return ModelCase(name, model, batch.to(device), targets.to(device), loss_fn, blocks)


def _registry_image_model(name: str, num_classes: int) -> nn.Module:
    from fwbench.models.registry import get_spec

    try:
        spec = get_spec(name)
    except KeyError:
        raise KeyError(
            f"unknown model {name!r}; the memory family knows {', '.join(MODELS)} and any image "
            "model of the registry, declared ones included"
        ) from None
    if spec.inputs != "image":
        raise KeyError(f"{name} takes {spec.inputs}, and the memory family trains image models")
    return spec.torch_model(num_classes)


def chain_blocks(model: nn.Module, name: str = "model") -> list[nn.Module]:
    """The items of the model's largest (by parameters) top-level Sequential or ModuleList."""
    chains = [
        child
        for child in model.children()
        if isinstance(child, (nn.Sequential, nn.ModuleList)) and len(child) > 1
    ]
    if not chains:
        raise ValueError(
            f"{name} has no top-level nn.Sequential or nn.ModuleList of blocks to checkpoint"
        )
    largest = max(chains, key=lambda c: sum(p.numel() for p in c.parameters()))
    return list(largest)
