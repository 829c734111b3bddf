"""MobileNetV3-Small and EfficientNet-B0: the Flax twins compute what torchvision computes.

Inputs are 64x64 (batch 2) to keep CPU time down; every layer still runs, the deepest feature map
being 2x2. The Flax side is built abstractly (``nnx.eval_shape``) and filled by the port: its own
random initialisation would cost one XLA compile per weight shape and is overwritten anyway.

The same function is proven in float64 (JAX with x64 enabled, torch ``.double()``): logits to
1e-10 and every parameter's gradient to 1e-8. fp32 logits keep a 1e-5 sanity bound; fp32
gradients measure how the CPU's kernels round and are not compared here.
"""

import copy
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from torchvision.ops import StochasticDepth as StochasticDepthTorch

from fwbench.models import equivalence, porting, registry
from fwbench.models.flax_efficientnet import StochasticDepth

jax.config.update("jax_default_matmul_precision", "highest")

NAMES = ["mobilenet_v3_small", "efficientnet_b0"]
LOGIT_TOL = 1e-5
FP64_LOGIT_TOL, FP64_GRAD_TOL = 1e-10, 1e-8
# Train mode normalises the last stage over 2 x 2 x 2 = 8 values per channel; dividing by such
# small-sample deviations amplifies fp32 rounding beyond what eval mode shows (seen: ~1e-5).
TRAIN_TOL = 1e-4


@pytest.fixture(scope="module", params=NAMES)
def twin(request):
    """(name, Flax model with abstract weights and concrete rng state, its links)."""
    name = request.param
    impl = registry.get_spec(name).flax_impl()
    model = nnx.eval_shape(lambda: impl.build_flax(1000, rngs=nnx.Rngs(0)))
    for i, (_, node) in enumerate(nnx.iter_graph(model)):
        if isinstance(node, nnx.RngKey):
            node.set_value(jax.random.key(i))
        elif isinstance(node, nnx.RngCount):
            node.set_value(jnp.zeros((), jnp.uint32))
    return name, model, impl.links(model)


def _torch_model(name, seed):
    torch.manual_seed(seed)
    model = registry.get_spec(name).torch_model()
    equivalence.randomize_torch_(model, seed)
    return model


def _inputs(seed, size=64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, size, size)).astype(np.float32)
    return x, rng.integers(0, 1000, size=2)


# LLVM's optimisation passes dominate XLA:CPU compile time for these graphs (about half of this
# file's runtime) and do not touch the arithmetic being compared, as fast-math stays off. Not for
# float64: XLA:CPU runs float64 convolutions as generated loops rather than Eigen's kernels, and
# unoptimised those ran 5x longer (EfficientNet-B0's gradient: 60 s against 11 s) than the
# optimisation passes cost.
_FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _jit(fn, compiler_options=_FAST_COMPILE):
    """``nnx.jit`` with compiler options: ``fn(model, *args)`` compiled once per graph."""
    compiled = {}

    def call(model, *args):
        graphdef, state = nnx.split(model)
        if graphdef not in compiled:

            def pure(state, *args):
                inner = nnx.merge(graphdef, state)
                return fn(inner, *args), nnx.state(inner)

            compiled[graphdef] = jax.jit(pure, compiler_options=compiler_options)
        out, new_state = compiled[graphdef](state, *args)
        nnx.update(model, new_state)  # BatchNorm statistics and rng counters move on
        return out

    return call


@_jit
def _forward(model, x):
    return model(x)


@functools.partial(_jit, compiler_options=None)  # only used in float64
def _logits_and_grads(model, x, labels):
    def loss_fn(m):
        logits = m(x)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1)), logits

    (_, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return logits, grads


def _grads_in_torch_layout(model, links, grads):
    by_path = {path: np.asarray(v.get_value()) for path, v in nnx.to_flat_state(grads)}
    path_of = {id(v): path for path, v in nnx.iter_graph(model) if isinstance(v, nnx.Param)}
    return {
        link.key: link.to_torch(by_path[path_of[id(link.variable)]])
        for link in links
        if isinstance(link.variable, nnx.Param)
    }


def test_parameter_count_equals_torchvision(twin):
    name, model, _ = twin
    flax_count = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    torch_count = sum(p.numel() for p in registry.get_spec(name).torch_model().parameters())
    assert flax_count == torch_count == registry.get_spec(name).param_count


def test_batchnorm_eps_and_momentum_are_torchvisions(twin):
    from fwbench.models.layers import TorchBatchNorm

    name, model, _ = twin
    bns = [
        m
        for m in registry.get_spec(name).torch_model().modules()
        if isinstance(m, torch.nn.BatchNorm2d)
    ]
    ours = [m for _, m in nnx.iter_graph(model) if isinstance(m, TorchBatchNorm)]
    assert len(ours) == len(bns)
    # B0 keeps torch's defaults (1e-5, 0.1); MobileNetV3 sets (1e-3, 0.01)
    assert {(m.eps, m.momentum) for m in ours} == {(m.eps, m.momentum) for m in bns}


def test_port_then_export_round_trips_exactly(twin):
    name, _, links = twin
    state = _torch_model(name, seed=3).state_dict()
    porting.port_state_dict(links, state)
    exported = porting.export_state_dict(links)
    expected = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    assert exported.keys() == expected.keys()
    for key, value in expected.items():
        assert np.array_equal(exported[key], value.numpy()), key


@pytest.mark.parametrize("seed", [0, 1])
def test_eval_logits_match(twin, seed):
    name, model, links = twin
    torch_model = _torch_model(name, seed).eval()
    porting.port_state_dict(links, torch_model.state_dict())
    model.eval()
    x, _ = _inputs(seed)
    with torch.no_grad():
        reference = torch_model(torch.from_numpy(x)).numpy()
    logits = _forward(model, jnp.asarray(x.transpose(0, 2, 3, 1)))
    assert np.abs(reference).max() > 1e-2  # randomised statistics keep the logits non-trivial
    assert equivalence.max_rel_err(logits, reference) <= LOGIT_TOL


def test_float64_eval_logits_and_gradients_match(twin):
    name, model, links = twin
    torch_model = _torch_model(name, seed=4).eval()
    porting.port_state_dict(links, torch_model.state_dict())
    model.eval()
    # 32x32: every layer still runs (the deepest map is 1x1, fine in eval mode), and float64
    # convolutions, which neither framework runs with optimised kernels, cost a quarter
    x, labels = _inputs(seed=4, size=32)
    # Gradients in eval mode: with batch statistics a BatchNorm bias that feeds (through a 1x1
    # conv) another batch-statistics BatchNorm has a gradient of exactly zero in exact arithmetic,
    # so both sides return rounding noise there and a relative comparison means nothing.
    torch64 = equivalence.torch_float64(torch_model)
    reference = torch64(torch.from_numpy(x).double()).detach().numpy()
    reference_grads = equivalence.torch_grads(torch64, x, labels)
    with equivalence.float64_on_cpu():
        model64 = equivalence.flax_float64(model)
        logits, grads = _logits_and_grads(model64, jnp.asarray(x.transpose(0, 2, 3, 1)), labels)
        links64 = registry.get_spec(name).flax_impl().links(model64)
    # float64 on both sides, or these bounds would not be reachable (fp32 gives ~1e-7)
    assert logits.dtype == reference.dtype == np.float64
    assert equivalence.max_rel_err(logits, reference) <= FP64_LOGIT_TOL
    errors = equivalence.grad_errors(
        _grads_in_torch_layout(model64, links64, grads), reference_grads
    )
    worst = max(errors, key=errors.get)
    assert errors[worst] <= FP64_GRAD_TOL, (worst, errors[worst])


def test_train_mode_logits_and_running_stats_match(twin):
    name, model, links = twin
    torch_model = _torch_model(name, seed=2)
    before = copy.deepcopy(torch_model.state_dict())
    porting.port_state_dict(links, before)
    x, _ = _inputs(seed=2)
    # batch statistics on, sampling off: dropout and stochastic depth draw different masks per side
    torch_model.train()
    for m in torch_model.modules():
        if isinstance(m, (torch.nn.Dropout, StochasticDepthTorch)):
            m.eval()
    model.train()
    model.set_attributes(deterministic=True)

    with torch.no_grad():
        reference = torch_model(torch.from_numpy(x)).numpy()
    logits = _forward(model, jnp.asarray(x.transpose(0, 2, 3, 1)))

    assert equivalence.max_rel_err(logits, reference) <= TRAIN_TOL
    exported, after = porting.export_state_dict(links), torch_model.state_dict()
    stat_keys = [k for k in exported if k.endswith(("running_mean", "running_var"))]
    assert all(not np.array_equal(after[k], before[k]) for k in stat_keys)  # one update happened
    assert (
        max(equivalence.max_rel_err(exported[k], after[k].numpy()) for k in stat_keys) <= TRAIN_TOL
    )


def test_dropout_and_stochastic_depth_rates_are_torchvisions(twin):
    name, model, _ = twin
    torch_model = registry.get_spec(name).torch_model()
    torch_dropout = [m.p for m in torch_model.modules() if isinstance(m, torch.nn.Dropout)]
    flax_dropout = [m.rate for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Dropout)]
    assert flax_dropout == torch_dropout == [0.2]
    # per block, by name: the rate grows with depth, so only the right block may hold each rate
    torch_depth = {
        n: m.p for n, m in torch_model.named_modules() if isinstance(m, StochasticDepthTorch)
    }
    flax_depth = {
        ".".join(map(str, path)): m.rate
        for path, m in nnx.iter_graph(model)
        if isinstance(m, StochasticDepth)
    }
    assert flax_depth == pytest.approx(torch_depth)
    assert len(torch_depth) == (16 if name == "efficientnet_b0" else 0)
    model.train()
    assert all(not m.deterministic for _, m in nnx.iter_graph(model) if hasattr(m, "deterministic"))
    model.eval()
    assert all(m.deterministic for _, m in nnx.iter_graph(model) if hasattr(m, "deterministic"))


def test_stochastic_depth_drops_whole_samples_in_train_mode_only():
    layer = StochasticDepth(0.25, rngs=nnx.Rngs(dropout=0))
    x = jnp.ones((4000, 2, 2, 3))
    y = np.asarray(layer(x))
    per_sample = y.reshape(len(y), -1)
    # "row" mode: a sample is either dropped entirely or kept and rescaled by 1 / survival
    assert np.all((per_sample == 0.0) | np.isclose(per_sample, 1 / 0.75))
    assert np.all(per_sample.min(axis=1) == per_sample.max(axis=1))
    assert abs((per_sample[:, 0] == 0).mean() - 0.25) < 0.03
    assert not np.array_equal(np.asarray(layer(x)), y)  # fresh mask each call
    layer.eval()
    assert np.array_equal(np.asarray(layer(x)), np.asarray(x))
