"""transformers' ``BertForMaskedLM`` in Flax NNX: the memory family's BERT, trained in JAX.

The memory family trains BERT on the masked-language-model loss (``families/memory/cases.py``:
token ids and an attention mask over padded sequences, one tensor ``batch[:, 0]`` / ``batch[:,
1]``). This twin computes the same function from the same weights, ported key by key from the
torch model's ``state_dict``: embeddings (word + token type 0 + position, LayerNorm, dropout),
``layers`` post-LayerNorm encoder layers whose attention adds a large negative number where the
key is padding (the mask transformers builds), and the prediction head, whose decoder is the word
embedding itself (tied, as in transformers: the gradient sums both uses).

For JAX's planners (``families/memory/jax_remat.py``) it has the three parts a planner works
with: ``stem`` (ids and mask to the first hidden state and the attention bias), ``blocks()`` (the
encoder layers, each taking and giving ``(hidden, bias)``, so any run of them is one remat
segment) and ``head``. Each layer names the values it makes (``checkpoint_name``: the
projections, the attention's logits, probabilities and weights, the feed-forward's two
activations, ...), so that a checkpoint policy can save some of them by name. Dropout is active in
training mode, as in the torch step; ``eval()`` turns it off for the float64 proof against torch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from fwbench.models import porting
from fwbench.models.layers import named

_LN_EPS = 1e-12  # BertConfig's layer_norm_eps
_TOKEN_TYPES = 2  # BertConfig's type_vocab_size


def _layer_norm(dim: int, rngs: nnx.Rngs) -> nnx.LayerNorm:
    # two-pass variance like torch; the fast E[x^2] - E[x]^2 form loses digits
    return nnx.LayerNorm(dim, epsilon=_LN_EPS, use_fast_variance=False, rngs=rngs)


def _gelu(x):
    return jax.nn.gelu(x, approximate=False)  # BertConfig's hidden_act "gelu" is the erf form


class _Embeddings(nnx.Module):
    def __init__(self, vocab: int, hidden: int, max_len: int, dropout: float, *, rngs):
        self.word = nnx.Embed(vocab, hidden, rngs=rngs)
        self.position = nnx.Embed(max_len, hidden, rngs=rngs)
        self.token_type = nnx.Embed(_TOKEN_TYPES, hidden, rngs=rngs)
        self.norm = _layer_norm(hidden, rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, ids):
        # transformers adds the token type (all 0 here) to the words, then the positions. The
        # lookup is jnp.take on the table, not nnx.Embed's call, which casts the table to float32
        # and so computes a float64 model's gradient in float32
        x = jnp.take(self.word.embedding[...], ids, axis=0) + self.token_type.embedding[0]
        x = x + self.position.embedding[: ids.shape[1]][None]
        return self.dropout(self.norm(x))


class _EncoderLayer(nnx.Module):
    def __init__(self, hidden: int, heads: int, ff: int, dropout: float, *, rngs: nnx.Rngs):
        self.heads = heads
        self.query = nnx.Linear(hidden, hidden, rngs=rngs)
        self.key = nnx.Linear(hidden, hidden, rngs=rngs)
        self.value = nnx.Linear(hidden, hidden, rngs=rngs)
        self.attention_dropout = nnx.Dropout(dropout, rngs=rngs)
        self.attention_out = nnx.Linear(hidden, hidden, rngs=rngs)
        self.attention_out_dropout = nnx.Dropout(dropout, rngs=rngs)
        self.attention_norm = _layer_norm(hidden, rngs)
        self.intermediate = nnx.Linear(hidden, ff, rngs=rngs)
        self.output = nnx.Linear(ff, hidden, rngs=rngs)
        self.output_dropout = nnx.Dropout(dropout, rngs=rngs)
        self.output_norm = _layer_norm(hidden, rngs)

    def __call__(self, carry):
        x, bias = carry
        n, s, hidden = x.shape
        head_dim = hidden // self.heads

        def heads(t):
            return t.reshape(n, s, self.heads, head_dim).transpose(0, 2, 1, 3)

        q = heads(named(self.query(x), "query"))
        k = heads(named(self.key(x), "key"))
        v = heads(named(self.value(x), "value"))
        with jax.named_scope("attention"):
            logits = jnp.einsum("nhqd,nhkd->nhqk", q, k) / math.sqrt(head_dim) + bias
            probs = named(jax.nn.softmax(named(logits, "attention_logits"), axis=-1),
                           "attention_probs")  # fmt: skip
            weights = named(self.attention_dropout(probs), "attention_weights")
            context = jnp.einsum("nhqk,nhkd->nqhd", weights, v).reshape(n, s, hidden)
        out = named(self.attention_out(named(context, "context")), "attention_dense")
        x = named(self.attention_norm(x + self.attention_out_dropout(out)), "attention_output")
        h = named(_gelu(named(self.intermediate(x), "intermediate")), "intermediate_act")
        y = named(self.output(h), "output_dense")
        return self.output_norm(x + self.output_dropout(y)), bias


class MaskedLM(nnx.Module):
    """BERT for masked language modelling; ``model(batch)`` takes the memory family's batch
    (``batch[:, 0]`` token ids, ``batch[:, 1]`` the attention mask) and gives the logits over
    the vocabulary at every position."""

    def __init__(
        self, layers: int, hidden: int, heads: int, ff: int, vocab: int, *,
        max_len: int = 512, dropout: float = 0.1, rngs: nnx.Rngs,
    ):  # fmt: skip
        self.embeddings = _Embeddings(vocab, hidden, max_len, dropout, rngs=rngs)
        self.layers = nnx.List(
            [_EncoderLayer(hidden, heads, ff, dropout, rngs=rngs) for _ in range(layers)]
        )
        self.transform = nnx.Linear(hidden, hidden, rngs=rngs)
        self.transform_norm = _layer_norm(hidden, rngs)
        self.decoder_bias = nnx.Param(jnp.zeros((vocab,), jnp.float32))

    def __call__(self, batch):
        carry = self.stem(batch)
        for layer in self.blocks():
            carry = layer(carry)
        return self.head(carry)

    # the three parts a planner of activation memory works with (families/memory/jax_remat.py)
    def stem(self, batch):
        x = self.embeddings(batch[:, 0])
        # where the key is padding, the attention logit gets the dtype's lowest value, as the
        # mask transformers builds: its softmax weight is exactly 0
        keep = batch[:, 1][:, None, None, :] > 0
        bias = jnp.where(keep, 0.0, jnp.finfo(x.dtype).min).astype(x.dtype)
        return x, bias

    def blocks(self) -> list:
        return list(self.layers)

    def head(self, carry):
        x = self.transform_norm(_gelu(self.transform(carry[0])))
        return x @ self.embeddings.word.embedding[...].T + self.decoder_bias[...]


def links(model: MaskedLM, prefix: str = "") -> list[porting.Link]:
    """Every torch ``BertForMaskedLM`` key but the decoder's, which is tied to others (see
    ``port``), linked to its Flax variable; ``prefix`` is what the torch module's keys start
    with (``mlm.`` for the memory family's wrapper)."""
    emb, bert = model.embeddings, f"{prefix}bert."
    out = [
        porting.Link(f"{bert}embeddings.word_embeddings.weight", emb.word.embedding),
        porting.Link(f"{bert}embeddings.position_embeddings.weight", emb.position.embedding),
        porting.Link(f"{bert}embeddings.token_type_embeddings.weight", emb.token_type.embedding),
        *porting.layernorm_links(emb.norm, f"{bert}embeddings.LayerNorm"),
    ]
    for i, layer in enumerate(model.layers):
        p = f"{bert}encoder.layer.{i}."
        out += porting.linear_links(layer.query, f"{p}attention.self.query")
        out += porting.linear_links(layer.key, f"{p}attention.self.key")
        out += porting.linear_links(layer.value, f"{p}attention.self.value")
        out += porting.linear_links(layer.attention_out, f"{p}attention.output.dense")
        out += porting.layernorm_links(layer.attention_norm, f"{p}attention.output.LayerNorm")
        out += porting.linear_links(layer.intermediate, f"{p}intermediate.dense")
        out += porting.linear_links(layer.output, f"{p}output.dense")
        out += porting.layernorm_links(layer.output_norm, f"{p}output.LayerNorm")
    head = f"{prefix}cls.predictions."
    out += porting.linear_links(model.transform, f"{head}transform.dense")
    out += porting.layernorm_links(model.transform_norm, f"{head}transform.LayerNorm")
    return out + [porting.Link(f"{head}bias", model.decoder_bias)]


def port(model: MaskedLM, state_dict, prefix: str = "") -> None:
    """Fill ``model`` from a torch ``BertForMaskedLM`` state dict. The decoder's weight and bias
    are the word embedding and the head's bias under other names (transformers ties them); they
    are dropped after checking that they hold the same values, so the port stays one key to one
    variable."""
    tied = {
        f"{prefix}cls.predictions.decoder.weight": f"{prefix}bert.embeddings.word_embeddings.weight",
        f"{prefix}cls.predictions.decoder.bias": f"{prefix}cls.predictions.bias",
    }
    kept = dict(state_dict)
    for alias, owner in tied.items():
        if alias in kept:
            if not np.array_equal(porting.as_numpy(kept[alias]), porting.as_numpy(kept[owner])):
                raise ValueError(f"{alias} is not tied to {owner}: the twin ties them")
            del kept[alias]
    porting.port_state_dict(links(model, prefix), kept)


def from_torch(torch_masked_lm, dropout: float = 0.1, seed: int = 0) -> MaskedLM:
    """The twin of the memory family's ``cases.MaskedLM`` (transformers' model inside), its
    weights ported."""
    config = torch_masked_lm.mlm.config
    model = MaskedLM(
        config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
        config.intermediate_size, config.vocab_size,
        max_len=config.max_position_embeddings, dropout=dropout, rngs=nnx.Rngs(seed),
    )  # fmt: skip
    port(model, torch_masked_lm.state_dict(), prefix="mlm.")
    return model
