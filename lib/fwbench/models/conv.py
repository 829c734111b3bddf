"""The twins' 2-D convolution: ``nnx.Conv`` with a per-layer implementation chosen by shape.

A twin is built in its stock form, every convolution lowered by ``lax.conv_general_dilated`` as
``nnx.Conv`` lowers it. In its expert form (``use_implementation(model, EXPERT)``) each layer
writes the same maths the way a JAX engineer writes it for XLA:CPU, where the library kernel that
a stock convolution becomes (YNNPACK by default) is slow for some shapes:

- a depthwise convolution (one group per channel) as a fused shift-and-multiply-add: the padded
  input's k x k strided windows, each times its per-channel weight, summed; XLA fuses the slices,
  products and sums into one loop (jax-ml/jax#23713: stock depthwise on CPU is several times
  slower than PyTorch's);
- a convolution whose kernel tiles its input (kernel equal to stride, no padding: ViT's stem, and
  every 1x1 convolution at stride 1) as a reshape and one matrix product (on XLA:CPU the 1x1
  convolutions of ResNet-50 and EfficientNet-B0 ran 15-25% faster as a matmul);
- a dense convolution whose spatial output is small (``SMALL_OUTPUT_PIXELS`` or fewer pixels, as
  in a ResNet on 32-pixel images, where XLA's 3x3 kernel with a 2x2 output runs far below its
  peak) as im2col: the k x k windows concatenated on the channel axis, then one matrix product;
- anything else as stock.

The choice is made per layer from the shapes it is traced with (they are static under ``jit``),
so one twin picks differently at 32 and at 224 pixels. ``kind`` names what a layer would pick,
``expert_kinds`` counts a model's picks for its records. Every implementation computes the same
function; tests/test_models_expert.py proves each one and every twin in expert form in float64.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

STOCK = "stock"
EXPERT = "expert"
IMPLEMENTATIONS = (STOCK, EXPERT)

# What an expert layer may become, by shape (see the module docstring).
DEPTHWISE, RESHAPE_MATMUL, IM2COL, LIBRARY = "depthwise", "reshape-matmul", "im2col", "library"
# At or below this many output pixels (7 x 7) a dense convolution becomes im2col and one matmul.
# On XLA:CPU the library kernel's time per output pixel grows sharply as the output shrinks (a
# 3x3 convolution with a 2x2 output ran at a few percent of PyTorch's speed), while im2col's
# copies grow with the output. On an AMD EPYC (family 25, model 17), 2 threads, fp32: ResNet-18
# at 224 px, batch 1, took 48 ms with a 4 x 4 bound, 29 ms with 7 x 7 and 32 ms with 14 x 14;
# ResNet-50 moved by less than its noise. The tuning run decides per model whether the expert
# form is used at all, so this bound only has to be right where small outputs dominate.
SMALL_OUTPUT_PIXELS = 49


def kind(conv: nnx.Conv, input_shape: tuple) -> str:
    """What an expert layer computes ``conv`` on an input of ``input_shape`` (NHWC) with."""
    if len(conv.kernel_size) != 2 or len(input_shape) != 4 or conv.mask is not None:
        return LIBRARY
    kh, kw = conv.kernel_size
    strides = _pair(conv.strides)
    padding = conv.padding
    same_symmetric = padding == "SAME" and strides == (1, 1) and kh % 2 == kw % 2 == 1
    if _dilated(conv) or (isinstance(padding, str) and padding != "VALID" and not same_symmetric):
        return LIBRARY
    padding = _pads(padding, (kh, kw))
    if conv.feature_group_count > 1:
        depthwise = conv.feature_group_count == conv.in_features == conv.out_features
        return DEPTHWISE if depthwise else LIBRARY
    if (kh, kw) == strides and all(p == (0, 0) for p in padding):
        if input_shape[1] % kh == 0 and input_shape[2] % kw == 0:
            return RESHAPE_MATMUL
    out_h, out_w = _output_size(input_shape, (kh, kw), strides, padding)
    return IM2COL if out_h * out_w <= SMALL_OUTPUT_PIXELS else LIBRARY


class Conv(nnx.Conv):
    """``nnx.Conv`` (same variables, same porting keys) with an ``implementation`` switch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.implementation = STOCK

    def __call__(self, x):
        picked = LIBRARY if self.implementation == STOCK else kind(self, x.shape)
        _count(picked)
        if picked == LIBRARY:
            return super().__call__(x)
        x, kernel, bias = self.promote_dtype(
            (x, self.kernel[...], None if self.bias is None else self.bias[...]), dtype=self.dtype
        )
        strides, pads = _pair(self.strides), _pads(self.padding, self.kernel_size)
        if picked == DEPTHWISE:
            y = depthwise(x, kernel, strides, pads)
        elif picked == RESHAPE_MATMUL:
            y = _reshape_matmul(x, kernel, precision=self.precision)
        else:
            y = im2col(x, kernel, strides, pads, self.precision)
        return y if bias is None else y + bias


def depthwise(x, kernel, strides: tuple, pads: tuple):
    """Depthwise convolution (NHWC; kernel (kh, kw, 1, C)) as shifted windows times weights."""
    kh, kw = kernel.shape[:2]
    x, out_h, out_w = _padded(x, (kh, kw), strides, pads)
    total = None
    for i in range(kh):
        for j in range(kw):
            window = _window(x, i, j, out_h, out_w, strides)
            term = window * kernel[i, j, 0]
            total = term if total is None else total + term
    return total


def im2col(x, kernel, strides: tuple, pads: tuple, precision=None):
    """Dense convolution (NHWC; kernel (kh, kw, Cin, Cout)) as its windows and one matmul."""
    kh, kw, cin, cout = kernel.shape
    x, out_h, out_w = _padded(x, (kh, kw), strides, pads)
    # window (i, j) fills channels [(i*kw + j)*Cin, ...): the kernel's own row-major order
    patches = jnp.concatenate(
        [_window(x, i, j, out_h, out_w, strides) for i in range(kh) for j in range(kw)], axis=-1
    )
    return jnp.dot(patches, kernel.reshape(kh * kw * cin, cout), precision=precision)


def _reshape_matmul(x, kernel, precision=None):
    """A convolution whose kernel tiles the input (stride = kernel, no padding) as one matmul."""
    kh, kw, cin, cout = kernel.shape
    b, h, w, _ = x.shape
    tiles = x.reshape(b, h // kh, kh, w // kw, kw, cin).transpose(0, 1, 3, 2, 4, 5)
    tiles = tiles.reshape(b, h // kh, w // kw, kh * kw * cin)
    return jnp.dot(tiles, kernel.reshape(kh * kw * cin, cout), precision=precision)


def use_implementation(model: nnx.Module, implementation: str) -> nnx.Module:
    """Switch every ``Conv`` of ``model`` to ``implementation`` (in place); returns the model."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}: one of {IMPLEMENTATIONS}")
    for _, module in nnx.iter_graph(model):
        if isinstance(module, Conv):
            module.implementation = implementation
    return model


def expert_kinds(model: nnx.Module, x) -> dict[str, int]:
    """How many of ``model``'s convolutions run as each kind on input ``x`` (NHWC), found by
    tracing one abstract forward: ``{"depthwise": 11, "library": 41, ...}`` (a stock layer
    counts as ``library``)."""
    return traced_kinds(*nnx.split(model), x)


def traced_kinds(graphdef, state, x) -> dict[str, int]:
    """``expert_kinds`` of the model ``nnx.merge(graphdef, state)`` would give, without it."""
    global _COUNTS
    _COUNTS = {}
    try:
        jax.eval_shape(lambda s, inputs: nnx.merge(graphdef, s)(inputs), state, x)
        return dict(sorted(_COUNTS.items()))
    finally:
        _COUNTS = None


# Set by ``traced_kinds`` while it traces: each layer adds the kind it ran as.
_COUNTS: dict[str, int] | None = None


def _count(picked: str) -> None:
    if _COUNTS is not None:
        _COUNTS[picked] = _COUNTS.get(picked, 0) + 1


def _padded(x, kernel: tuple, strides: tuple, pads: tuple):
    """``x`` padded as the convolution pads it, and the output's height and width."""
    out_h, out_w = _output_size(x.shape, kernel, strides, pads)
    return jnp.pad(x, ((0, 0), *pads, (0, 0))), out_h, out_w


def _window(x, i: int, j: int, out_h: int, out_w: int, strides: tuple):
    sh, sw = strides
    return jax.lax.slice(
        x,
        (0, i, j, 0),
        (x.shape[0], i + sh * (out_h - 1) + 1, j + sw * (out_w - 1) + 1, x.shape[3]),
        (1, sh, sw, 1),
    )


def _pair(value) -> tuple:
    return (value, value) if isinstance(value, int) else tuple(value)


def _pads(padding, kernel_size: tuple = (1, 1)) -> tuple:
    if padding == "VALID":
        return ((0, 0), (0, 0))
    if padding == "SAME":  # only at stride 1 with an odd kernel (``kind``): symmetric
        return tuple(((k - 1) // 2, (k - 1) // 2) for k in kernel_size)
    if isinstance(padding, int):
        return ((padding, padding), (padding, padding))
    return tuple((p, p) if isinstance(p, int) else tuple(p) for p in padding)


def _dilated(conv: nnx.Conv) -> bool:
    return any(
        d not in (None, 1) and _pair(d) != (1, 1)
        for d in (conv.kernel_dilation, conv.input_dilation)
    )


def _output_size(input_shape: tuple, kernel: tuple, strides: tuple, pads: tuple) -> tuple:
    return tuple(
        math.floor((n + lo + hi - k) / s) + 1
        for n, k, s, (lo, hi) in zip(input_shape[1:3], kernel, strides, pads, strict=True)
    )
