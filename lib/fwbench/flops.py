"""FLOPs from the frameworks' own counters: torch's FlopCounterMode and XLA's cost analysis.

Both count a multiply-add as 2 FLOPs for matmuls and convolutions. XLA also counts elementwise work
(activations, normalisation, softmax) that torch's counter skips, so XLA's number runs a little
higher; the validation notebook reports the gap per model.
"""

from __future__ import annotations

import re

import numpy as np


def _cpu_flash_attention_flops(query_shape, key_shape, value_shape, *_args, **_kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def torch_forward_flops(model, example) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    # torch counts the CUDA attention kernels but not the CPU flash-attention op; without this
    # a ViT on CPU would miss its QK^T and AV products (4% of ViT-B/16's FLOPs)
    custom = {}
    cpu_flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_flash is not None:
        custom[cpu_flash] = _cpu_flash_attention_flops
    counter = FlopCounterMode(display=False, custom_mapping=custom)
    # Under no_grad, nn.MultiheadAttention takes a fused fast path the counter cannot see into
    # (a ViT-B/16 would lose a third of its FLOPs); with grad enabled it runs plain matmuls.
    with torch.enable_grad(), counter:
        model(example)
    return int(counter.get_total_flops())


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
            # each output element needs (kernel elements / output features) multiply-adds
            total += 2.0 * np.prod(out) * np.prod(rhs) / out_features
        elif "stablehlo.dot_general" in line:
            lhs, _rhs, out = (_shape(s) for s in _TENSOR.findall(line.split(" : ")[-1])[:3])
            dims = _CONTRACTING.search(line).group(1)
            contracted = np.prod([lhs[int(d)] for d in dims.split(",") if d.strip()])
            total += 2.0 * np.prod(out) * contracted
    return float(total)
