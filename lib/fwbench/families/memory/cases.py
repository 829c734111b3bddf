"""Models of the memory family, each with a batch maker, a loss and its list of blocks.

Vision models are torchvision's (``weights=None``: nothing is downloaded). ``bert_encoder`` is a
BERT-style masked-language-model encoder built from plain ``nn.TransformerEncoder`` layers and a
local config. It never passes an attention mask: the mask handling and the inference fast path
take data-dependent branches that a trace cannot follow, and neither changes the memory profile
of a training step. The blocks are what ``torch.utils.checkpoint`` wraps in the
checkpoint-every-block baseline: the residual stages' bottlenecks, the encoder layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

MODELS = ("resnet50", "resnet152", "vit_b_16", "bert_encoder")

# name -> (layers, hidden size, heads, feed-forward size, vocabulary)
ENCODER_CONFIGS = {
    "tiny": (2, 64, 2, 128, 512),
    "small": (4, 256, 4, 1024, 8192),
    "base": (12, 768, 12, 3072, 30522),  # BERT-base
}


class BertStyleEncoder(nn.Module):
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


def _token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


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
) -> ModelCase:
    """The model in training mode, one random batch on ``device`` and the loss to train it with."""
    import torchvision

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if name == "bert_encoder":
        layers, hidden, heads, ff, vocab = ENCODER_CONFIGS[encoder_size]
        model = BertStyleEncoder(layers, hidden, heads, ff, vocab, max_len=max(seq_len, 512))
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
        raise KeyError(f"unknown model {name!r}; the memory family knows {', '.join(MODELS)}")
    model.to(device).train()
    return ModelCase(name, model, batch.to(device), targets.to(device), loss_fn, blocks)
