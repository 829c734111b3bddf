"""The twins' expert form computes what torchvision computes, in float64.

``models/conv.py`` lets each twin's convolutions be written as a JAX engineer writes them for
XLA:CPU (depthwise as shifted windows times weights, 1x1 and patchifying convolutions as one
matmul, small outputs as im2col). Each implementation is checked against ``lax``'s convolution on
shapes that exercise strides, odd sizes and padding, and every twin in expert form (those whose
code a smaller twin runs line for line, once, on the smaller) against its torchvision model (eval
logits within 1e-10, as the stock twins). A wrong window
order, a transposed kernel or an off-by-one stride cannot pass: the reference is computed by a
different route, on random weights.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from fwbench.models import build_pair, conv, equivalence, get_spec, porting
from fwbench.models.registry import twin_models

jax.config.update("jax_default_matmul_precision", "highest")

FP64_TOL = 1e-10
BATCH = 2
# the smallest input each twin runs at (a ViT's patch grid must fit; 32 px keeps float64 cheap)
SIZE = {"vit_b_16": 32, "vit_b_32": 64}


def _layer(cin, cout, k, stride, pad, groups=1, bias=False):
    layer = conv.Conv(
        cin,
        cout,
        (k, k),
        strides=stride,
        padding=pad if isinstance(pad, str) else ((pad, pad), (pad, pad)),
        feature_group_count=groups,
        use_bias=bias,
        param_dtype=jnp.float64,
        rngs=nnx.Rngs(0),
    )
    if bias:  # a zero bias would hide a bias added twice or never
        layer.bias[...] = jnp.linspace(-1.0, 1.0, cout, dtype=jnp.float64)
    return layer


LAYERS = {
    # (cin, cout, kernel, stride, pad, groups), input side, the kind the expert picks
    "depthwise k3 s1": ((16, 16, 3, 1, 1, 16), 9, conv.DEPTHWISE),
    "depthwise k3 s2 even": ((8, 8, 3, 2, 1, 8), 10, conv.DEPTHWISE),
    "depthwise k5 s2 odd": ((8, 8, 5, 2, 2, 8), 11, conv.DEPTHWISE),
    "depthwise k5 s1": ((4, 4, 5, 1, 2, 4), 7, conv.DEPTHWISE),
    "small 3x3 s1": ((8, 12, 3, 1, 1, 1), 4, conv.IM2COL),
    "small 3x3 s2": ((8, 12, 3, 2, 1, 1), 5, conv.IM2COL),
    "small 7x7 s2": ((3, 8, 7, 2, 3, 1), 9, conv.IM2COL),
    "1x1": ((8, 12, 1, 1, 0, 1), 9, conv.RESHAPE_MATMUL),
    "1x1 s2": ((8, 12, 1, 2, 0, 1), 5, conv.IM2COL),
    "patchify 4": ((3, 8, 4, 4, 0, 1), 16, conv.RESHAPE_MATMUL),
    "large 3x3": ((4, 4, 3, 1, 1, 1), 12, conv.LIBRARY),
    "grouped": ((8, 8, 3, 1, 1, 2), 6, conv.LIBRARY),
    # Flax's default padding: symmetric at stride 1 with an odd kernel (squeeze-excitation's 1x1)
    "1x1 SAME": ((8, 12, 1, 1, "SAME", 1), 1, conv.RESHAPE_MATMUL),
    "3x3 SAME small": ((8, 12, 3, 1, "SAME", 1), 3, conv.IM2COL),
    "3x3 SAME s2": ((8, 12, 3, 2, "SAME", 1), 5, conv.LIBRARY),
}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name", list(LAYERS))
def test_each_expert_implementation_is_the_same_convolution(name, bias):
    (cin, cout, k, stride, pad, groups), side, expected_kind = LAYERS[name]
    with jax.enable_x64(True):
        layer = _layer(cin, cout, k, stride, pad, groups, bias)
        x = jnp.asarray(np.random.default_rng(1).standard_normal((3, side, side, cin)))
        assert conv.kind(layer, x.shape) == expected_kind
        stock = layer(x)
        conv.use_implementation(layer, conv.EXPERT)
        expert = layer(x)
    assert expert.dtype == stock.dtype == jnp.float64
    assert expert.shape == stock.shape
    assert equivalence.max_rel_err(np.asarray(expert), np.asarray(stock)) <= FP64_TOL


def test_a_wrong_rewrite_fails_the_same_check():
    # the check above is worth running only if it catches a broken rewrite: swap two windows
    with jax.enable_x64(True):
        layer = _layer(8, 8, 3, 1, 1, 8)
        x = jnp.asarray(np.random.default_rng(1).standard_normal((2, 7, 7, 8)))
        stock = layer(x)
        flipped = conv.depthwise(x, layer.kernel[...][::-1], (1, 1), ((1, 1), (1, 1)))
    assert equivalence.max_rel_err(np.asarray(flipped), np.asarray(stock)) > 1e-3


def test_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="unknown implementation"):
        conv.use_implementation(conv.Conv(4, 4, (3, 3), rngs=nnx.Rngs(0)), "fast")


@pytest.mark.parametrize("name", [n for n, (_, _, k) in LAYERS.items() if k != conv.LIBRARY])
def test_the_expert_form_has_the_same_gradients(name):
    # the training steps take the expert form too: its backward must be the stock one's, for the
    # weights and for the input (a model's gradients are these, chained)
    (cin, cout, k, stride, pad, groups), side, _ = LAYERS[name]
    grads = {}
    with jax.enable_x64(True):
        layer = _layer(cin, cout, k, stride, pad, groups, bias=True)
        rng = np.random.default_rng(2)
        x = jnp.asarray(rng.standard_normal((2, side, side, cin)))
        weights = jnp.asarray(rng.standard_normal(layer(x).shape))
        for implementation in conv.IMPLEMENTATIONS:
            conv.use_implementation(layer, implementation)
            params = nnx.grad(lambda m, x=x: (m(x) * weights).sum())(layer)
            inputs = jax.grad(lambda x: (layer(x) * weights).sum())(x)
            grads[implementation] = [*jax.tree.leaves(params), inputs]
    stock, expert = grads[conv.STOCK], grads[conv.EXPERT]
    assert len(stock) == len(expert) == 3  # kernel, bias, input
    pairs = zip(expert, stock, strict=True)
    worst = max(equivalence.max_rel_err(np.asarray(e), np.asarray(s)) for e, s in pairs)
    assert worst <= FP64_TOL


# A deeper or wider twin runs every line of a smaller one's code, expert convolutions included
# (each layer picks its implementation by its own shape): ResNet-34 ResNet-18's, ResNet-101 and
# -152 ResNet-50's, ResNeXt-101 ResNeXt-50's, EfficientNet-B2 to B7 B1's on larger tables. Their
# stock forms are proven layer for layer in tests/test_models_variants_*.py; the expert form is
# proven once, on the smaller
BY_A_SMALLER = {
    "resnet34", "resnet101", "resnet152", "resnext101_32x8d",
    *(f"efficientnet_b{b}" for b in range(2, 8)),
}  # fmt: skip


@pytest.mark.parametrize("name", [n for n in twin_models() if n not in BY_A_SMALLER])
def test_every_twin_in_expert_form_matches_torchvision_in_float64(name):
    size = SIZE.get(name, 32)
    torch_model, flax_model = build_pair(name, seed=0, image_size=size)
    equivalence.randomize_torch_(torch_model, seed=0)
    porting.port_state_dict(get_spec(name).flax_impl().links(flax_model), torch_model.state_dict())
    conv.use_implementation(flax_model, conv.EXPERT)
    x = np.random.default_rng(0).standard_normal((BATCH, 3, size, size), dtype=np.float32)
    with equivalence.float64_on_cpu():
        model64 = equivalence.flax_float64(flax_model)
        kinds = conv.expert_kinds(model64, jnp.zeros((BATCH, size, size, 3), jnp.float64))
        got = equivalence.flax_logits(model64, x)
    expected = equivalence.torch_logits(equivalence.torch_float64(torch_model), x)
    # the float64 copy kept the expert form, and it rewrote something: else this proves nothing
    assert sum(n for k, n in kinds.items() if k != conv.LIBRARY) > 0, kinds
    assert got.dtype == expected.dtype == np.float64
    assert np.abs(expected).std() > 0.05
    assert equivalence.max_rel_err(got, expected) <= FP64_TOL


def test_the_jit_expert_training_step_trains_the_expert_form():
    from fwbench.families.training.optim import OptimConfig
    from fwbench.families.training.steps import JaxTrainer

    _, flax_model = build_pair("mobilenet_v3_small", seed=0, num_classes=10)
    trainer = JaxTrainer(flax_model, OptimConfig(), mode="jit-expert")
    convs = [m for _, m in nnx.iter_graph(trainer.model) if isinstance(m, conv.Conv)]
    assert convs and {m.implementation for m in convs} == {conv.EXPERT}
