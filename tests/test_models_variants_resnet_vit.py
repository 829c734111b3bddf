"""ResNet-18/34/101/152, ResNeXt, Wide ResNet and ViT-B/32: the depth, group, width and patch
variants of the ResNet-50 and ViT-B/16 twins compute what torchvision computes.

The shared code is proven in depth by test_models_resnet_vit.py (gradients, train mode, fp32); here
each variant only has to be built as torchvision builds it, so three checks suffice: parameter
counts at 224, a link for every Flax variable and every torch key, and float64 eval logits to
1e-10 on randomised weights. ResNet-18/34 use BasicBlock, which no other test runs.

Inputs are 64 px at batch 2: small, yet large enough that ResNet's layer4 still sees 2x2 maps (so
its 3x3 convs use more than their centre tap); ViT-B/32 is rebuilt for 64 px, i.e. 2x2 patches.
Everything runs eagerly: the deep ResNets repeat a few layer shapes many times, so compiling each
operation once beats compiling the unrolled network (ResNet-152: 4 s against 7 s on a busy 2-core
CPU), and for ResNet-18/34 the two cost about the same.
"""

import copy
import functools

import jax
import numpy as np
import pytest
import torch
from flax import nnx

from fwbench.models import build_pair, equivalence, get_spec, porting

jax.config.update("jax_default_matmul_precision", "highest")

SMALL_SIZE = {"resnet18": 64, "resnet34": 64, "resnet101": 64, "resnet152": 64, "vit_b_32": 64}
# grouped and widened Bottlenecks: one ResNeXt and the Wide ResNet (ResNeXt-101 shares every
# line of code with ResNeXt-50; its counts and links are checked, not its float64 logits again)
SMALL_SIZE |= {"resnext50_32x4d": 64, "wide_resnet50_2": 64}
COUNTED = [*SMALL_SIZE, "resnext101_32x8d"]
MODELS = list(SMALL_SIZE)
FP64_LOGIT_TOL = 1e-10
BATCH = 2


def _links(name, flax_model):
    return get_spec(name).flax_impl().links(flax_model)


@functools.cache
def _native_abstract(name: str):
    """The Flax twin at its native size, shapes only: enough for counts and links."""
    spec = get_spec(name)
    return nnx.eval_shape(lambda: spec.build_flax(1000, rngs=nnx.Rngs(0)))


@functools.cache
def _torch_state_keys(name: str) -> frozenset[str]:
    with torch.device("meta"):
        state = get_spec(name).torch_model(1000).state_dict()
    return frozenset(k for k in state if not k.endswith("num_batches_tracked"))


@pytest.mark.parametrize("name", COUNTED)
def test_parameter_count_matches_torchvision(name):
    spec = get_spec(name)
    flax_params = jax.tree.leaves(nnx.state(_native_abstract(name), nnx.Param))
    assert sum(x.size for x in flax_params) == spec.param_count
    with torch.device("meta"):
        torch_model = spec.torch_model(1000)
    assert sum(p.numel() for p in torch_model.parameters()) == spec.param_count


@pytest.mark.parametrize("name", COUNTED)
def test_links_cover_every_variable_and_every_torch_key(name):
    flax_model = _native_abstract(name)
    links = _links(name, flax_model)
    assert equivalence.unlinked_variables(flax_model, links) == []
    keys = [link.key for link in links]
    assert len(keys) == len(set(keys))  # no torch tensor fills two Flax variables
    assert set(keys) == _torch_state_keys(name)


@pytest.mark.parametrize("name", MODELS)
def test_float64_eval_logits_match(name):
    torch_model, flax_model = build_pair(name, seed=0, image_size=SMALL_SIZE[name])
    # torchvision leaves BN at mean 0 / var 1 and zeroes the ViT head: randomised, a swapped
    # mean/var or a transposed head cannot match by accident
    equivalence.randomize_torch_(torch_model, seed=0)
    porting.port_state_dict(_links(name, flax_model), copy.deepcopy(torch_model.state_dict()))

    size = SMALL_SIZE[name]
    x = np.random.default_rng(0).standard_normal((BATCH, 3, size, size), dtype=np.float32)
    with equivalence.float64_on_cpu():
        got = equivalence.flax_logits(equivalence.flax_float64(flax_model), x, jit=False)
    expected = equivalence.torch_logits(equivalence.torch_float64(torch_model), x)
    assert got.dtype == expected.dtype == np.float64
    assert np.abs(expected).std() > 0.1  # a constant reference would make any output "match"
    err = equivalence.max_rel_err(got, expected)
    assert err <= FP64_LOGIT_TOL, err
