"""FLOPs from the frameworks' own counters: torch's FlopCounterMode and XLA's cost analysis.

Both count a multiply-add as 2 FLOPs for matmuls and convolutions. XLA also counts elementwise work
(activations, normalisation, softmax) that torch's counter skips, so XLA's number runs a little
higher; the validation notebook reports the gap per model. ``xla_matmul_conv_flops`` reads only
the convolutions and dot products of a lowered program, the op class torch counts, so a whole
training step (forward, backward, optimizer) can be counted alike on both sides: ``torch_flops``
over the torch step, ``xla_matmul_conv_flops`` over the jitted one.
"""

from __future__ import annotations

import re

import numpy as np


def _cpu_flash_attention_flops(query_shape, key_shape, value_shape, *_args, **_kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_attention_backward_flops(
    grad_out_shape, query_shape, key_shape, value_shape, *_args, **_kwargs
) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _conv_backward_flops(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    _groups,
    output_mask,
    out_shape=None,
    **_kwargs,
) -> int:
    """torch's formula for a convolution's gradients, with the weight gradient of a grouped
    convolution counted right.

    Each gradient does exactly the forward's multiply-adds (every product x * w of the forward
    meets one element of grad_out). torch counts the input gradient that way, but the weight
    gradient as a full convolution over all input channels, ignoring ``groups``: a depthwise
    convolution's weight gradient comes out ``groups`` times too large (MobileNetV3's and
    EfficientNet's training steps 7x and 13x too large at 32 px).
    """
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def custom_formulas() -> dict:
    """Corrections to torch's FLOP formulas, keyed by op packet, taking shapes as torch's own do.

    torch counts the CUDA attention kernels but not the CPU flash-attention ops; without these
    entries a ViT on CPU would miss its QK^T and AV products (4% of ViT-B/16's forward FLOPs) and
    their gradients. Convolution gradients go through ``_conv_backward_flops``.
    """
    import torch

    custom = {torch.ops.aten.convolution_backward: _conv_backward_flops}
    for name, count in (
        ("_scaled_dot_product_flash_attention_for_cpu", _cpu_flash_attention_flops),
        (
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            _cpu_flash_attention_backward_flops,
        ),
    ):
        op = getattr(torch.ops.aten, name, None)
        if op is not None:
            custom[op] = count
    return custom


def torch_flops(fn) -> int:
    """Matmul and convolution FLOPs of everything ``fn()`` runs, forward and backward alike,
    with ``custom_formulas`` over torch's own."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=custom_formulas())
    with counter:
        fn()
    return int(counter.get_total_flops())


def torch_forward_flops(model, example) -> int:
    import torch

    # Under no_grad, nn.MultiheadAttention takes a fused fast path the counter cannot see into
    # (a ViT-B/16 would lose a third of its FLOPs); with grad enabled it runs plain matmuls.
    with torch.enable_grad():
        return torch_flops(lambda: model(example))


def xla_cost(compiled) -> dict:
    """flops and bytes accessed of a compiled XLA executable (``jit(f).lower(...).compile()``)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older jax returned one dict per device
        analysis = analysis[0] if analysis else {}
    analysis = analysis or {}
    return {
        "flops": float(analysis.get("flops", 0.0)),
        "bytes_accessed": float(analysis.get("bytes accessed", 0.0)),
    }


_TENSOR = re.compile(r"tensor<([0-9x]+)x[a-z]+[0-9]*>")
_KERNEL_LAYOUT = re.compile(r"\]x\[([^\]]+)\]->")
_CONTRACTING = re.compile(r"contracting_dims = \[([0-9, ]*)\] x")
_LHS_DILATE = re.compile(r"lhs_dilate = \[([0-9, ]*)\]")


def _shape(text: str) -> list[int]:
    return [int(d) for d in text.split("x")]


def xla_matmul_conv_flops(stablehlo_text: str) -> float:
    """FLOPs of the convolutions and dot products in a lowered JAX program (2 per multiply-add).

    This is the same op class torch's FlopCounterMode counts, read from the program XLA compiles,
    so the two counters can be compared like for like; ``xla_cost`` adds elementwise work on top.
    """
    total = 0.0
    for line in stablehlo_text.splitlines():
        if "stablehlo.convolution" in line:
            lhs, rhs, out = (_shape(s) for s in _TENSOR.findall(line.split(" : ")[-1])[:3])
            layout = [d.strip() for d in _KERNEL_LAYOUT.search(line).group(1).split(",")]
            out_features = rhs[layout.index("o")]
            # each output element needs (kernel elements / output features) multiply-adds; an
            # input dilated by s (the input gradient of a stride-s convolution) holds s - 1 zeros
            # between neighbours along each axis, and products with those are not work
            dilate = _LHS_DILATE.search(line)
            zeros = np.prod([int(d) for d in dilate.group(1).split(",")]) if dilate else 1
            total += 2.0 * np.prod(out) * np.prod(rhs) / out_features / zeros
        elif "stablehlo.dot_general" in line:
            lhs, _rhs, out = (_shape(s) for s in _TENSOR.findall(line.split(" : ")[-1])[:3])
            dims = _CONTRACTING.search(line).group(1)
            contracted = np.prod([lhs[int(d)] for d in dims.split(",") if d.strip()])
            total += 2.0 * np.prod(out) * contracted
    return float(total)
