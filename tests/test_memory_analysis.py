"""Liveness of a tiny MLP's training step, checked against what can be worked out by hand.

Graph (make_fx names): mm = x @ w1.t(); relu = relu(mm); mm_1 = relu @ w2.t() (the logits);
cross-entropy = _log_softmax + nll_loss_forward (getitem: loss, getitem_1: total weight).
Backward: nll_loss_backward reads getitem_1; _log_softmax_backward_data reads _log_softmax;
mm_2 (grad of w2) reads relu; threshold_backward reads relu; mm_4 (grad of w1) reads x.
"""

import pytest
import torch
from torch import nn

from fwbench.families.memory import liveness, tracer
from fwbench.families.memory.functional_adam import AdamConfig, adam_step_, init_adam_state


@pytest.fixture(scope="module")
def mlp_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8, bias=False), nn.ReLU(), nn.Linear(8, 3, bias=False))
    x, y = torch.randn(2, 4), torch.tensor([0, 2])
    traced = tracer.trace_training_step(model, x, y, nn.functional.cross_entropy)
    return traced, liveness.analyze(traced)


def rank(found, name):
    return found.info[name].rank


def test_activations_and_their_uses(mlp_step):
    _, found = mlp_step
    r = lambda name: rank(found, name)  # noqa: E731
    expected = {
        # name: (created, last forward use, first backward use, last backward use, bytes)
        "relu": (r("relu"), r("mm_1"), r("mm_2"), r("threshold_backward"), 2 * 8 * 4),
        "_log_softmax": (
            r("_log_softmax"),
            r("nll_loss_forward"),
            r("nll_loss_backward"),
            r("_log_softmax_backward_data"),
            2 * 3 * 4,
        ),
        "getitem_1": (
            r("nll_loss_forward"),  # allocated by the op that returns it
            r("nll_loss_forward"),
            r("nll_loss_backward"),
            r("nll_loss_backward"),
            4,
        ),
    }
    got = {
        name: (a.created, a.last_forward_use, a.first_backward_use, a.last_backward_use, a.nbytes)
        for name, a in found.activations.items()
    }
    assert got == expected
    assert all(a.recomputable and not a.from_random_op for a in found.activations.values())


def test_regions_kinds_and_storages(mlp_step):
    traced, found = mlp_step
    assert found.info["relu"].region == liveness.FORWARD
    assert found.info["_log_softmax"].region == liveness.LOSS
    assert found.info["threshold_backward"].region == liveness.BACKWARD
    assert found.info["addcdiv_"].region == liveness.OPTIMIZER
    kinds = [found.info[n.name].kind for n in found.nodes if n.op == "placeholder"]
    assert kinds == traced.input_kinds
    assert found.storages["mm_2"].kind == liveness.GRAD_KIND
    assert found.storages["mm_4"].kind == liveness.GRAD_KIND
    # views and in-place ops own nothing: their bytes belong to the storage they alias. The
    # view autograd keeps of the ReLU's output is traced as "alias" (torch 2.14) or "detach"
    # (torch 2.11), so it is found by what it is, not by its name.
    views = [n.name for n in found.nodes if n.name in ("alias", "detach")]
    assert views, [n.name for n in found.nodes]
    assert found.info[views[0]].owner == "relu"
    assert found.info["t"].owner == found.nodes[0].name  # w1.t() is a view of parameter w1
    assert found.info["addcdiv_"].owner == found.nodes[0].name
    assert views[0] not in found.storages and "addcdiv_" not in found.storages
    # the pre-activation dies at the ReLU; the loss is returned, so it is no activation
    assert found.storages["mm"].last_use == rank(found, "relu")
    assert "mm" not in found.activations and "getitem" not in found.activations
    assert found.storages["getitem"].last_use == len(found.nodes) - 1


def test_functional_adam_matches_torch_adam():
    torch.manual_seed(0)
    params = [torch.randn(5, 3), torch.randn(7)]
    ours = [p.clone() for p in params]
    reference = [p.clone().requires_grad_() for p in params]
    optimizer = torch.optim.Adam(reference, lr=1e-2, foreach=False)
    state = init_adam_state(ours)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in params]
        adam_step_(ours, grads, state, AdamConfig(lr=1e-2))
        for p, g in zip(reference, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-7)
