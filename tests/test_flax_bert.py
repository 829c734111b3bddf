"""The memory family's BERT in Flax (models/flax_bert.py) computes torch's masked-LM function in
float64, logits and gradients, from ported weights; its JAX planners keep the gradients exact
with dropout active."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fwbench.families.memory import cases, jax_remat
from fwbench.measure.timing import StopRule
from fwbench.models import equivalence, flax_bert

INPUTS = jax_remat.Inputs(seq_len=16, encoder_size="tiny")
TOLERANCE = 1e-10


@pytest.fixture
def torch_case():
    case = cases.build_case("bert", 3, seq_len=INPUTS.seq_len, encoder_size="tiny")
    equivalence.randomize_torch_(case.model)  # LayerNorm's 1 and 0 and the zero biases
    return case


def _twin64(case):
    """The twin ported from the float32 model, then both in float64 (as every twin's proof:
    a port into float32 rounds what a float64 model holds)."""
    twin = equivalence.flax_float64(flax_bert.from_torch(case.model))
    case.model.double()
    return twin


def _torch_logits_and_grads(case):
    case.model.eval()  # no dropout: the two sides draw different masks
    case.model.zero_grad(set_to_none=True)
    logits = case.model(case.batch)
    case.loss_fn(logits, case.targets).backward()
    grads = {
        name: p.grad.numpy().copy()
        for name, p in case.model.named_parameters(remove_duplicate=False)
    }
    return logits.detach().numpy(), grads


def test_the_twin_computes_torchs_logits_and_gradients_in_float64(torch_case):
    with equivalence.float64_on_cpu():
        model = _twin64(torch_case)
        model.eval()
        torch_logits, torch_grads = _torch_logits_and_grads(torch_case)
        assert equivalence.unlinked_variables(model, flax_bert.links(model, "mlm.")) == []
        x = jnp.asarray(torch_case.batch.numpy())
        y = jnp.asarray(torch_case.targets.numpy())
        logits = np.asarray(model(x))
        grads = equivalence.flax_param_grads(
            lambda m: jax_remat.loss_fn(m, x, y), model, flax_bert.links(model, "mlm."), jit=False
        )
    assert equivalence.max_rel_err(logits, torch_logits) <= TOLERANCE
    # against the largest gradient of all: the key projection's bias has a gradient of exactly
    # 0 in exact arithmetic (softmax ignores a shift common to all keys), so either side's
    # rounding, 1e-18, would be an infinite error relative to itself
    scale = max(float(np.abs(g).max()) for g in torch_grads.values())
    worst = {k: float(np.abs(grads[k] - torch_grads[k]).max()) / scale for k in grads}
    assert max(worst.values()) <= TOLERANCE, max(worst.items(), key=lambda kv: kv[1])
    # the word embedding's gradient holds the decoder's use too, as torch's tied weight's does
    assert np.allclose(
        torch_grads["mlm.cls.predictions.decoder.weight"],
        torch_grads["mlm.bert.embeddings.word_embeddings.weight"],
    )


def test_a_decoder_that_is_not_tied_is_refused(torch_case):
    state = dict(torch_case.model.state_dict())
    state["mlm.cls.predictions.decoder.weight"] = state["mlm.cls.predictions.decoder.weight"] + 1
    model = flax_bert.from_torch(torch_case.model)
    with pytest.raises(ValueError, match="not tied"):
        flax_bert.port(model, state, prefix="mlm.")


def test_the_jax_planners_train_bert_with_dropout_and_keep_its_gradients():
    found = jax_remat.run_batch(
        "bert", 2, inputs=INPUTS, rule=StopRule(min_iters=1, min_seconds=0.0),
        checkpoint_every=[1], sqrt_n=False, policies=["dots_saveable"], budgets=[0.5],
    )  # fmt: skip
    assert found.method.tolist() == [
        "jax_none", "jax_remat_every_1", "jax_policy_dots_saveable", "jax_budget@0.5",
    ]  # fmt: skip
    assert (found.peak_bytes > 0).all()
    planned = found[found.method != "jax_none"]
    assert (planned.exact_max_abs_diff <= TOLERANCE).all(), planned
    assert planned.exact_worst.isna().all()
    budget = found.set_index("method").loc["jax_budget@0.5"]
    assert budget.kind == "jax_budget" and budget.budget == 0.5
    # the knapsack kept some of the layer's named values, and not all of them
    assert 0 < len(budget.saved_names) < len(NAMES)
    assert set(budget.saved_names) <= set(NAMES)


NAMES = (
    "query", "key", "value", "attention_logits", "attention_probs", "attention_weights",
    "context", "attention_dense", "attention_output", "intermediate", "intermediate_act",
    "output_dense",
)  # fmt: skip
