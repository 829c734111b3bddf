"""ResNet-50 and ViT-B/16: the Flax twins compute what torchvision computes, weights included.

Parity runs at reduced input sizes (ResNet at 64x64, ViT rebuilt for 32x32), always at batch 2, on
one pair per model shared by the tests; parameter counts are checked at 224, where torchvision
publishes them. Compilation dominates on a CPU, so Flax models are built abstractly (the port
fills every variable) and ResNet runs jitted while ViT runs eagerly (see ``parity``).

The same function is proven in float64 (JAX with x64 enabled, torch ``.double()``): eval logits
to 1e-10, and every parameter's gradient of the whole network in train mode to 1e-8. fp32 logits
keep a 1e-5 sanity bound. Whole-network fp32 gradients are not compared: ResNet-50's backward
pass at random init amplifies rounding so much that they measure the CPU's kernels (JAX and
torch agreed to 3e-7 on one Intel Xeon, 4e-2 on an AMD EPYC), not the port. In fp32 only a
single Bottleneck's train-mode gradients are compared, where BatchNorm's backward is well
conditioned.
"""

import copy
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torchvision
from flax import nnx

from fwbench.models import build_pair, equivalence, flax_resnet, flax_vit, get_spec, porting

jax.config.update("jax_default_matmul_precision", "highest")

SMALL_SIZE = {"resnet50": 64, "vit_b_16": 32}
JIT = {"resnet50": True, "vit_b_16": False}
MODELS = sorted(SMALL_SIZE)
LOGIT_TOL, GRAD_TOL = 1e-5, 1e-4  # fp32: logits everywhere, gradients on one Bottleneck only
FP64_LOGIT_TOL, FP64_GRAD_TOL = 1e-10, 1e-8
BATCH = 2


def _links(name, flax_model):
    return get_spec(name).flax_impl().links(flax_model)


def _abstract_twin(build, links_fn, state_dict):
    """A Flax model built without running its initialisers, then filled from ``state_dict``."""
    flax_model = nnx.eval_shape(build)
    links = links_fn(flax_model)
    assert equivalence.unlinked_variables(flax_model, links) == []
    porting.port_state_dict(links, state_dict)
    return flax_model


@functools.cache
def _built(name: str):
    torch_model, flax_model = build_pair(name, seed=0, image_size=SMALL_SIZE[name])
    assert equivalence.unlinked_variables(flax_model, _links(name, flax_model)) == []
    # torchvision leaves BN at mean 0 / var 1 and zeroes the ViT head: randomised, a swapped
    # mean/var or a transposed head cannot match by accident
    equivalence.randomize_torch_(torch_model, seed=0)
    return torch_model, flax_model, copy.deepcopy(torch_model.state_dict())


def _pair(name: str):
    """The shared pair, reset to the same weights on both sides and in eval mode."""
    torch_model, flax_model, state = _built(name)
    torch_model.load_state_dict(state)
    porting.port_state_dict(_links(name, flax_model), state)
    torch_model.eval()
    flax_model.eval()
    return torch_model, flax_model


def _batch(name: str, seed: int):
    rng = np.random.default_rng(seed)
    size = SMALL_SIZE[name]
    x = rng.standard_normal((BATCH, 3, size, size), dtype=np.float32)
    return x, rng.integers(0, 1000, size=BATCH)


def _nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count_matches_torchvision_at_224(name):
    spec = get_spec(name)
    # shapes are all a count needs; a 224 ViT has its own, longer position embedding
    abstract = nnx.eval_shape(lambda: spec.flax_impl().build_flax(1000, rngs=nnx.Rngs(0)))
    assert sum(x.size for x in jax.tree.leaves(nnx.state(abstract, nnx.Param))) == spec.param_count
    with torch.device("meta"):
        torch_model = spec.torch_model(1000)
    assert sum(p.numel() for p in torch_model.parameters()) == spec.param_count


@pytest.mark.parametrize("name", MODELS)
def test_port_then_export_returns_the_state_dict_exactly(name):
    torch_model, flax_model = _pair(name)
    exported = porting.export_state_dict(_links(name, flax_model))
    expected = {
        k: v.numpy() for k, v in torch_model.state_dict().items() if "num_batches_tracked" not in k
    }
    assert exported.keys() == expected.keys()
    for key, value in expected.items():
        assert exported[key].dtype == value.dtype, key
        assert np.array_equal(exported[key], value), key


@pytest.mark.parametrize("name", MODELS)
def test_eval_logits_match(name):
    torch_model, flax_model = _pair(name)
    for seed in (0, 1):
        x = _batch(name, seed)[0]
        err, logits = equivalence.compare_logits(torch_model, flax_model, x, jit=JIT[name])
        assert np.abs(logits).std() > 0.1  # a constant reference would make any output "match"
        assert err <= LOGIT_TOL, err


@pytest.mark.parametrize("name", MODELS)
def test_float64_eval_logits_match(name):
    torch_model, flax_model = _pair(name)
    x = _batch(name, seed=0)[0]
    with equivalence.float64_on_cpu():
        flax64 = equivalence.flax_float64(flax_model)
        got = equivalence.flax_logits(flax64, x, jit=JIT[name])
    expected = equivalence.torch_logits(equivalence.torch_float64(torch_model), x)
    # float64 on both sides, or the bound below would not be reachable (fp32 gives ~1e-7)
    assert got.dtype == expected.dtype == np.float64
    assert equivalence.max_rel_err(got, expected) <= FP64_LOGIT_TOL


# Float64, whole network, in train mode: for ResNet the harder case (BatchNorm on batch
# statistics, running statistics compared after the step too; eval mode's gradients reach the
# same parameters and 01_validation gates them), for ViT with dropout 0 the same function as in
# eval mode.
@pytest.mark.parametrize("name", MODELS)
def test_float64_train_mode_gradients_match_for_every_parameter(name):
    torch_model, flax_model = _pair(name)
    x, labels = _batch(name, seed=2)
    links_fn = get_spec(name).flax_impl().links
    with equivalence.float64_on_cpu():
        flax64 = equivalence.flax_float64(flax_model)
        flax64.train()
        got = equivalence.flax_grads(flax64, links_fn, _nhwc(x), labels, jit=JIT[name])
    links = links_fn(flax64)
    torch64 = equivalence.torch_float64(torch_model).train()
    expected = equivalence.torch_grads(torch64, x, labels)
    assert {g.dtype for g in got.values()} == {np.dtype(np.float64)}
    errors = equivalence.grad_errors(got, expected)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= FP64_GRAD_TOL, (worst, errors[worst])

    exported = porting.export_state_dict(links)
    stats = [k for k in exported if k.endswith(("running_mean", "running_var"))]
    stat_errors = {k: equivalence.max_rel_err(exported[k], torch64.state_dict()[k]) for k in stats}
    assert max(stat_errors.values(), default=0.0) <= FP64_GRAD_TOL, stat_errors
    if stats:  # the step moved the statistics on both sides
        assert not np.allclose(exported[stats[0]], torch_model.state_dict()[stats[0]].numpy())


def test_resnet_train_mode_logits_and_running_stats_match():
    torch_model, flax_model = _pair("resnet50")
    exact = copy.deepcopy(torch_model).double().train()
    torch_model.train()
    flax_model.train()
    x, _ = _batch("resnet50", seed=4)
    before = np.asarray(flax_model.bn1.mean[...]).copy()
    flax_logits = equivalence.flax_logits(flax_model, x)  # exactly one forward: stats move once
    torch_logits = equivalence.torch_logits(torch_model, x)
    exact_logits = equivalence.torch_logits(exact, x)
    # train-mode fp32 logits carry ~1e-4 of rounding on both sides (batch statistics amplify it);
    # the Flax side must be about as close to the fp64 answer as torch's own fp32 result is
    err = equivalence.max_rel_err(flax_logits, torch_logits)
    flax_exact_err = equivalence.max_rel_err(flax_logits, exact_logits)
    torch_exact_err = equivalence.max_rel_err(torch_logits, exact_logits)
    assert err <= 5e-4, err
    assert flax_exact_err <= 3 * torch_exact_err + 1e-6, (flax_exact_err, torch_exact_err)

    assert not np.allclose(np.asarray(flax_model.bn1.mean[...]), before)
    exported = porting.export_state_dict(_links("resnet50", flax_model))
    for key, value in torch_model.state_dict().items():
        if key.endswith(("running_mean", "running_var")):
            # the deepest statistics inherit the logits' amplified rounding, hence not 1e-5
            assert equivalence.max_rel_err(exported[key], value.numpy()) <= 1e-4, key


def test_bottleneck_train_mode_gradients_and_running_stats_match():
    torch.manual_seed(5)
    block = torchvision.models.resnet.Bottleneck(
        256,
        128,
        stride=2,
        downsample=torch.nn.Sequential(
            torch.nn.Conv2d(256, 512, 1, stride=2, bias=False), torch.nn.BatchNorm2d(512)
        ),
    )
    equivalence.randomize_torch_(block, seed=5)
    flax_block = _abstract_twin(
        lambda: flax_resnet.Bottleneck(256, 128, 2, rngs=nnx.Rngs(0)),
        flax_resnet.block_links,
        block.state_dict(),
    )
    links = flax_resnet.block_links(flax_block)
    block.train()
    flax_block.train()

    rng = np.random.default_rng(5)
    x = rng.standard_normal((BATCH, 256, 8, 8), dtype=np.float32)
    weights = rng.standard_normal((BATCH, 512, 4, 4), dtype=np.float32)  # a loss using every output
    (block(torch.from_numpy(x)) * torch.from_numpy(weights)).sum().backward()
    expected = equivalence.torch_param_grads(block)
    got = equivalence.flax_param_grads(
        lambda m: jnp.sum(m(_nhwc(x)) * _nhwc(weights)), flax_block, links
    )
    errors = equivalence.grad_errors(got, expected)
    assert max(errors.values()) <= GRAD_TOL, errors

    exported = porting.export_state_dict(links)
    for key, value in block.state_dict().items():
        if key.endswith(("running_mean", "running_var")):
            assert equivalence.max_rel_err(exported[key], value.numpy()) <= 1e-5, key


def test_resnet_batchnorm_keeps_running_stats_in_eval_mode():
    _, flax_model = _pair("resnet50")
    before = np.asarray(flax_model.bn1.mean[...]).copy()
    equivalence.flax_logits(flax_model, _batch("resnet50", seed=6)[0])
    np.testing.assert_array_equal(np.asarray(flax_model.bn1.mean[...]), before)


def test_vit_dropout_rates_reach_every_dropout_layer():
    abstract = nnx.eval_shape(
        lambda: flax_vit.build_flax(
            1000, rngs=nnx.Rngs(0), image_size=32, dropout=0.1, attention_dropout=0.2
        )
    )
    rates = [m.rate for _, m in nnx.iter_modules(abstract) if isinstance(m, nnx.Dropout)]
    # torchvision: one after the position embedding, then per layer one after attention and two
    # in the MLP at ``dropout``, plus attention-weight dropout at ``attention_dropout``
    assert sorted(rates) == [0.1] * (1 + 3 * 12) + [0.2] * 12


def test_vit_dropout_is_active_in_train_mode_only():
    torch_model, without_dropout = _pair("vit_b_16")
    flax_model = _abstract_twin(
        lambda: flax_vit.build_flax(
            1000, rngs=nnx.Rngs(0), image_size=32, dropout=0.1, attention_dropout=0.1
        ),
        flax_vit.links,
        torch_model.state_dict(),
    )
    nnx.reseed(flax_model, default=0, dropout=0)  # the abstract build left the streams keyless
    x = _batch("vit_b_16", seed=7)[0]
    flax_model.eval()
    evaluated = equivalence.flax_logits(flax_model, x, jit=False)
    np.testing.assert_array_equal(evaluated, equivalence.flax_logits(without_dropout, x, jit=False))
    flax_model.train()
    first = equivalence.flax_logits(flax_model, x, jit=False)
    second = equivalence.flax_logits(flax_model, x, jit=False)
    assert not np.allclose(first, second)
    assert not np.allclose(first, evaluated)


def test_parity_check_catches_swapped_batchnorm_statistics():
    torch_model, flax_model = _pair("resnet50")
    bn = flax_model.stages[2][0].bn2
    mean, var = np.asarray(bn.mean[...]), np.asarray(bn.var[...])
    bn.mean[...], bn.var[...] = var, np.abs(mean)  # kept positive: the error must not be a NaN
    err, _ = equivalence.compare_logits(torch_model, flax_model, _batch("resnet50", seed=8)[0])
    assert 1e-3 < err < np.inf


def test_parity_check_catches_a_misordered_qkv_split():
    torch_model, flax_model = _pair("vit_b_16")
    attn = flax_model.encoder.layers[0].self_attention
    q, k, v = np.split(np.asarray(attn.in_proj.kernel[...]), 3, axis=1)
    attn.in_proj.kernel[...] = np.concatenate([k, q, v], axis=1)
    qb, kb, vb = np.split(np.asarray(attn.in_proj.bias[...]), 3)
    attn.in_proj.bias[...] = np.concatenate([kb, qb, vb])
    x = _batch("vit_b_16", seed=9)[0]
    err, _ = equivalence.compare_logits(torch_model, flax_model, x, jit=False)
    assert err > 1e-3


def test_saved_weights_load_through_build_pair(tmp_path):
    source, _ = _pair("vit_b_16")
    torch.save(source.state_dict(), tmp_path / "w.pth")
    state_dict = porting.load_torchvision_weights(tmp_path / "w.pth")
    # a different seed: every weight must come from the file, none from initialisation
    torch_model, flax_model = build_pair("vit_b_16", seed=10, state_dict=state_dict, image_size=32)
    x, _ = _batch("vit_b_16", seed=10)
    err, logits = equivalence.compare_logits(torch_model, flax_model, x, jit=False)
    assert err <= LOGIT_TOL, err
    np.testing.assert_array_equal(logits, equivalence.torch_logits(source, x))
