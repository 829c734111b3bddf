"""FLOPs from the frameworks' own counters: torch's FlopCounterMode and XLA's cost analysis.

Both count a multiply-add as 2 FLOPs for matmuls and convolutions. XLA also counts elementwise work
(activations, normalisation, softmax) that torch's counter skips, so XLA's number runs a little
higher; the validation notebook reports the gap per model.
"""

from __future__ import annotations


def torch_forward_flops(model, example) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
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
