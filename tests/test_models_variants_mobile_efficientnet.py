"""MobileNetV3-Large and EfficientNet-B1 to B7: the variants compute what torchvision computes.

Each variant is built through its registry entry, so these tests also prove that the entry's
``flax_kwargs`` select the variant. Small and B0, the defaults of the same modules, are proven in
depth (train mode, gradients) by ``test_models_mobilenet_efficientnet``; what differs here is only
the tables (block settings, width and depth scaling, classifier widths and rates), so the checks are
the ones a wrong table cannot pass: torchvision's parameter count, a torchvision key for every
variable, the same BatchNorm, dropout and stochastic-depth settings layer by layer, and float64
eval-mode logits to 1e-10 on randomised weights. B4 to B7 run every line of B1 to B3's code on
wider and deeper tables, which the first three checks prove for each; of them only B5, the first
with BatchNorm's eps 1e-3 and momentum 0.01, also runs the float64 logits (B4, B6 and B7 would add
about two minutes to the suite and could only fail where those checks fail too).

Inputs are 32x32 at batch 2: every layer still runs (the deepest map is 1x1, fine in eval mode) and
float64 convolutions, which neither framework runs with optimised kernels, stay cheap. Flax models
are built abstractly (``nnx.eval_shape``); where weights are needed the port fills every variable.
"""

import functools

import jax
import numpy as np
import pytest
import torch
from flax import nnx
from torchvision.ops import StochasticDepth as StochasticDepthTorch

from fwbench.models import build_pair, equivalence, get_spec, porting
from fwbench.models.flax_efficientnet import StochasticDepth
from fwbench.models.layers import TorchBatchNorm

jax.config.update("jax_default_matmul_precision", "highest")

NAMES = ["mobilenet_v3_large"] + [f"efficientnet_b{b}" for b in range(1, 8)]
LOGITS_BY_STRUCTURE = {"efficientnet_b4", "efficientnet_b6", "efficientnet_b7"}
FP64_LOGIT_TOL = 1e-10
SIZE, BATCH = 32, 2


# shared by the tests that only read shapes, names and settings; none of them writes to either
@functools.cache
def _abstract_twin(name):
    spec = get_spec(name)
    return nnx.eval_shape(lambda: spec.build_flax(1000, rngs=nnx.Rngs(0)))


@functools.cache
def _meta_torch(name):
    # shapes, names and hyperparameters only: no memory, no initialisation
    with torch.device("meta"):
        return get_spec(name).torch_model(1000)


def _links(name, flax_model):
    return get_spec(name).flax_impl().links(flax_model)


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_equals_torchvision(name):
    flax_count = sum(x.size for x in jax.tree.leaves(nnx.state(_abstract_twin(name), nnx.Param)))
    torch_count = sum(p.numel() for p in _meta_torch(name).parameters())
    assert flax_count == torch_count == get_spec(name).param_count


@pytest.mark.parametrize("name", NAMES)
def test_every_variable_is_linked_to_a_torchvision_key(name):
    model = _abstract_twin(name)
    links = _links(name, model)
    assert equivalence.unlinked_variables(model, links) == []
    expected = {
        k for k in _meta_torch(name).state_dict() if not k.endswith(porting.IGNORED_SUFFIXES)
    }
    keys = [link.key for link in links]
    assert len(keys) == len(set(keys))  # no key feeds two variables
    assert set(keys) == expected


@pytest.mark.parametrize("name", NAMES)
def test_batchnorm_dropout_and_stochastic_depth_are_torchvisions(name):
    # eval-mode logits see BatchNorm's eps but neither its momentum nor any dropout rate
    model, torch_model = _abstract_twin(name), _meta_torch(name)
    ours = [(m.eps, m.momentum) for _, m in nnx.iter_graph(model) if isinstance(m, TorchBatchNorm)]
    theirs = [
        (m.eps, m.momentum) for m in torch_model.modules() if isinstance(m, torch.nn.BatchNorm2d)
    ]
    assert ours == theirs
    flax_dropout = [m.rate for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Dropout)]
    torch_dropout = [m.p for m in torch_model.modules() if isinstance(m, torch.nn.Dropout)]
    assert flax_dropout == torch_dropout
    # per block, by name: the rate grows with the block index, so each rate has one right place
    flax_depth = {
        ".".join(map(str, path)): m.rate
        for path, m in nnx.iter_graph(model)
        if isinstance(m, StochasticDepth)
    }
    torch_depth = {
        n: m.p for n, m in torch_model.named_modules() if isinstance(m, StochasticDepthTorch)
    }
    assert flax_depth == pytest.approx(torch_depth, rel=1e-15)
    assert (len(torch_depth) > 0) == name.startswith("efficientnet")


@pytest.mark.parametrize("name", [n for n in NAMES if n not in LOGITS_BY_STRUCTURE])
def test_float64_eval_logits_match(name):
    torch_model, flax_model = build_pair(name, seed=0)
    # torchvision leaves BatchNorm at mean 0 / var 1 / weight 1 / bias 0: randomised, a swapped
    # mean and var or a misplaced BatchNorm cannot match by accident
    equivalence.randomize_torch_(torch_model, seed=0)
    porting.port_state_dict(_links(name, flax_model), torch_model.state_dict())
    x = np.random.default_rng(0).standard_normal((BATCH, 3, SIZE, SIZE), dtype=np.float32)
    with equivalence.float64_on_cpu():
        flax64 = equivalence.flax_float64(flax_model)
        got = equivalence.flax_logits(flax64, x)
    expected = equivalence.torch_logits(equivalence.torch_float64(torch_model), x)
    # float64 on both sides, or the bound below would not be reachable (fp32 gives ~1e-7)
    assert got.dtype == expected.dtype == np.float64
    # logits spread over the classes: a constant reference would make any output "match"
    assert expected.std() > 0.05
    assert equivalence.max_rel_err(got, expected) <= FP64_LOGIT_TOL
