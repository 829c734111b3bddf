"""The float64 gradient gate on the memory baselines passes a plan that computes the unplanned
step's gradients, fails one that recomputes dropout with fresh randomness, and says which."""

from __future__ import annotations

import functools
from contextlib import contextmanager

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from fwbench.families.memory import gate
from fwbench.families.memory.cases import build_case

# transformers' BERT at the tiny size: dropout after the embeddings, in attention and after
# every layer, all active in training mode
SHAPE = {"seq_len": 16, "encoder_size": "tiny"}


@pytest.fixture(scope="module")
def bert():
    return build_case("bert", 2, dtype=torch.float64, **SHAPE)


@contextmanager
def wrong_recompute(case):
    """Checkpointing every block without keeping the generator state: the backward pass replays
    each block with new dropout masks."""
    bound = [type(b).forward.__get__(b) for b in case.blocks]
    for block, forward in zip(case.blocks, bound, strict=True):
        block.forward = functools.partial(
            checkpoint, forward, use_reentrant=False, preserve_rng_state=False
        )
    try:
        yield case.model
    finally:
        for block in case.blocks:
            del block.forward


def test_checkpointing_passes_and_a_recompute_with_fresh_masks_fails(bert):
    reference = gate.step_gradients(bert)
    assert gate.compare("again", gate.step_gradients(bert), reference).max_abs_diff == 0.0
    gates = gate.gate_baselines(bert, checkpoint_every=[1, 2], sqrt_n=True)
    assert set(gates) == {"checkpoint_every_1", "checkpoint_every_2", "checkpoint_sqrt_n"}
    assert all(g.passed and g.reason() is None for g in gates.values()), gates
    wrong = gate.check(bert, "fresh_masks", lambda: wrong_recompute(bert), reference)
    # the forward is the same step; only the backward's replay drew other masks
    assert wrong.loss_diff <= gate.TOLERANCE and not wrong.passed
    assert wrong.max_abs_diff > 1e6 * gate.TOLERANCE
    assert wrong.worst in dict(bert.model.named_parameters())
    assert wrong.worst in wrong.reason() and "fresh_masks" in wrong.reason()


def test_without_dropout_the_wrong_recompute_passes_so_the_gate_needs_a_random_model():
    """The gate's power comes from dropout: in eval mode the same wrong recompute is exact."""
    case = build_case("bert", 2, dtype=torch.float64, **SHAPE)
    case.model.eval()
    reference = gate.step_gradients(case)
    assert gate.check(case, "fresh_masks", lambda: wrong_recompute(case), reference).passed


def test_a_compiled_step_is_gated_with_eagers_masks_and_catches_the_budgets_fresh_masks(bert):
    """Without a budget the compiled step matches eager in float64 (random numbers from torch's
    generator in both). Below 1.0, torch 2.14's partitioner recomputes dropout in the backward
    pass with fresh masks (pytorch#190758, open): the gate must catch it. The partitioner runs
    without Inductor's C++ compile under aot_eager_decomp_partition, which keeps this fast."""
    gates = gate.gate_baselines(
        bert,
        checkpoint_every=[],
        compile_budgets=[1.0, 0.0],
        compile_backend="aot_eager_decomp_partition",
    )
    assert gates["compile_budget_1.0"].passed, gates
    low = gates["compile_budget_0.0"]
    assert not low.passed, (
        f"torch {torch.__version__} recomputes dropout correctly under a budget: pytorch#190758 "
        "may be fixed, and the memory report's sentence about it must say so"
    )
    assert low.loss_diff <= gate.TOLERANCE and low.worst in low.reason()


def test_the_gate_refuses_a_float32_case():
    case = build_case("resnet50", 1, image_size=32, num_classes=4)
    with pytest.raises(ValueError, match="float64"):
        gate.gate_baselines(case)


def _record(mode, kind, value, trial, worst=None):
    extra = {"method": kind, **({"worst_tensor": worst} if worst else {})}
    return {
        "family": "memory",
        "metric": "exact_max_abs_diff",
        "model": "bert",
        "batch_size": 8,
        "mode": mode,
        "value": value,
        "trial": trial,
        "extra": extra,
    }


def test_the_report_names_what_passed_and_the_tensor_of_what_failed():
    import pandas as pd

    from fwbench.families.memory import memory_gate

    meas = pd.DataFrame(
        [
            *(_record("checkpoint_every_1", "checkpoint", 0.0, t) for t in (1, 2)),
            _record("compile_budget_1.0", "compile_budget", 3e-16, 1),
            _record("compile_budget_0.5", "compile_budget", 2e-16, 1),
            _record("compile_budget_0.5", "compile_budget", 0.42, 2, worst="layers.0.ff.weight"),
            # the μ-TWO proof shares the metric; it is not a baseline's gate
            _record("mu_two@0.5", "mu_two", 5.0, 1),
        ]
    )
    table = memory_gate.gate_table(meas).set_index("method")
    assert list(table.index) == ["checkpoint_every_1", "compile_budget_0.5", "compile_budget_1.0"]
    assert list(table.passed) == [True, False, True]
    # the worst trial decides: one failing trial fails the method
    assert table.loc["compile_budget_0.5", "worst_tensor"] == "layers.0.ff.weight"
    assert table.loc["checkpoint_every_1", "trials"] == 2
    (sentence,) = memory_gate.gate_sentences(table.reset_index())
    assert sentence.startswith("BERT (masked LM): the float64 gradient gate")
    assert "passed by checkpoint_every_1 and compile_budget_1.0 (largest difference 3.0e-16)" in (
        sentence
    )
    assert "failed by compile_budget_0.5: the gradient of layers.0.ff.weight is off by 0.42" in (
        sentence
    )
    assert memory_gate.UPSTREAM in sentence
    # the report's tolerance is the gate's and the μ-TWO proof's (it does not import torch)
    from fwbench.families.memory import study

    assert memory_gate.TOLERANCE == gate.TOLERANCE == study.EXACT_TOLERANCE
    fixed = meas[meas["mode"] != "compile_budget_0.5"]
    (clean,) = memory_gate.gate_sentences(memory_gate.gate_table(fixed))
    assert "failed" not in clean and memory_gate.UPSTREAM not in clean
