"""What a model costs, read from its shapes alone: FLOPs and bytes per op category, op count, and
the bytes of parameters and of the activations alive at the peak of a forward pass.

The model runs on PyTorch's meta device, where every op computes its output's shape and nothing
else, so a ViT-B/16 at batch 64 takes about a second and no memory. A dispatch mode sees every aten
op: its FLOPs come from torch's own formulas (``torch.utils.flop_counter``, the counter
``measure.flops`` uses, with the same CPU-attention and grouped-convolution fixes), its category
from the table the profiles use (``inference.op_categories``), so a feature and a profile speak of
the same "depthwise/grouped convolution".

The twins compute the same function as their torchvision models (01_validation proves it in
float64), so one set of FLOP and byte features describes both frameworks' work; how many ops each
framework launches differs (XLA fuses), and the predictor learns that from the framework column.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from fwbench.families.inference import op_categories
from fwbench.vocab import OP_CATEGORIES

# nn.MultiheadAttention, torchvision's ShiftedWindowAttention(V2), MaxViT's attention
_ATTENTION_MODULE_SUFFIX = "Attention"
# ops that only return a view or modify their input in place allocate nothing
_NO_OUTPUT_BYTES = ("view", "alias", "inplace")


@dataclass
class Features:
    model: str
    batch_size: int
    image_size: int
    param_count: int
    param_bytes: int  # parameters and buffers as built (fp32)
    flops: dict[str, float] = field(default_factory=dict)  # category -> FLOPs of one forward
    bytes_written: dict[str, float] = field(default_factory=dict)  # category -> output bytes
    op_count: int = 0  # aten ops one eager forward dispatches
    peak_activation_bytes: int = 0  # live op outputs at the forward's peak, parameters excluded

    @property
    def total_flops(self) -> float:
        return float(sum(self.flops.values()))

    @property
    def model_peak_bytes(self) -> int:
        """The bytes the model itself needs to run a forward: parameters plus peak activations."""
        return self.param_bytes + self.peak_activation_bytes

    def row(self) -> dict:
        """One flat row: ``flops:<category>`` and ``bytes:<category>`` columns for every category."""
        out = {
            "model": self.model,
            "batch_size": self.batch_size,
            "image_size": self.image_size,
            "param_count": self.param_count,
            "param_bytes": self.param_bytes,
            "op_count": self.op_count,
            "peak_activation_bytes": self.peak_activation_bytes,
            "model_peak_bytes": self.model_peak_bytes,
            "total_flops": self.total_flops,
        }
        for category in OP_CATEGORIES:
            out[f"flops:{category}"] = float(self.flops.get(category, 0.0))
            out[f"bytes:{category}"] = float(self.bytes_written.get(category, 0.0))
        return out


def _tensors(value):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _allocates(func) -> bool:
    schema = func._schema
    if any(r.alias_info is not None for r in schema.returns):
        return False  # a view or an in-place op: its output is storage someone already owns
    return not any(tag.name in _NO_OUTPUT_BYTES for tag in getattr(func, "tags", ()))


class _Census:
    """Counts FLOPs, bytes and ops by category, and tracks live output bytes for the peak."""

    def __init__(self, formulas: dict):
        self.formulas = formulas
        self.in_attention = 0  # depth of attention modules the forward is inside
        self.flops: dict[str, float] = {}
        self.bytes_written: dict[str, float] = {}
        self.ops = 0
        self.live = 0
        self.peak = 0

    def _freed(self, nbytes: int) -> None:
        self.live -= nbytes

    def record(self, func, args, kwargs, out) -> None:
        packet = func._overloadpacket
        shapes = [list(a.shape) for a in args if hasattr(a, "shape")]
        category = op_categories.torch_category(
            f"aten::{packet.__name__}", shapes, in_attention=self.in_attention > 0
        )
        self.ops += 1
        formula = self.formulas.get(packet)
        if formula is not None:
            flops = float(formula(*args, **kwargs, out_val=out))
            self.flops[category] = self.flops.get(category, 0.0) + flops
        if not _allocates(func):
            return
        for tensor in _tensors(out):
            nbytes = tensor.numel() * tensor.element_size()
            self.bytes_written[category] = self.bytes_written.get(category, 0.0) + nbytes
            self.live += nbytes
            weakref.finalize(tensor, self._freed, nbytes)
        self.peak = max(self.peak, self.live)


def _formulas() -> dict:
    """torch's FLOP formulas keyed by op packet, ``measure.flops``' corrections on top."""
    from torch.utils import flop_counter

    from fwbench.measure.flops import custom_formulas

    custom = {op: flop_counter.shape_wrapper(f) for op, f in custom_formulas().items()}
    return {**flop_counter.flop_registry, **custom}


def _census(model, example, formulas: dict) -> _Census:
    from torch.utils._python_dispatch import TorchDispatchMode

    census = _Census(formulas)

    def enter(*_):
        census.in_attention += 1

    def leave(*_):
        census.in_attention -= 1

    # the attention core (QK^T, softmax, AV) runs as plain batched matmuls once decomposed; inside
    # an attention module they are attention, as in the profiles, and its projections stay matmuls
    hooks = []
    for module in model.modules():
        if type(module).__name__.endswith(_ATTENTION_MODULE_SUFFIX):
            hooks.append(module.register_forward_pre_hook(enter))
            hooks.append(module.register_forward_hook(leave))

    class Recording(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            census.record(func, args, kwargs, out)
            return out

    try:
        with Recording():
            model(example)
    finally:
        for hook in hooks:
            hook.remove()
    return census


def torch_features(name: str, batch_size: int, image_size: int | None = None) -> Features:
    """The features of registry model ``name`` (any torchvision classification model) at one batch
    size, from forward passes on the meta device: nothing is allocated or computed."""
    from fwbench.models.registry import get_spec

    size = image_size or get_spec(name).image_size
    return module_features(meta_model(name, size), batch_size, size, name=name)


def meta_model(name: str, image_size: int):
    """Registry model ``name`` on PyTorch's meta device, in eval mode: shapes, no storage."""
    import torch

    from fwbench.models.registry import get_spec

    spec = get_spec(name)
    try:
        with torch.device("meta"):
            model = spec.torch_model(image_size=image_size)
    except NotImplementedError:
        # a constructor that computes its own widths with tensors (torchvision's RegNets read
        # them back with .tolist()) cannot run on the meta device: build it on the CPU, then
        # drop its storage by moving it there
        model = spec.torch_model(image_size=image_size).to("meta")
    return model.eval()


def module_features(model, batch_size: int, image_size: int, *, name: str = "") -> Features:
    """The features of any image model: ``model`` on the meta device, fed NCHW RGB batches."""
    import torch

    example = torch.empty(batch_size, 3, image_size, image_size, device="meta")
    formulas = _formulas()
    # FLOPs with grad enabled: under no_grad nn.MultiheadAttention takes a fused fast path whose
    # one op torch's formulas do not cover (``measure.flops.torch_forward_flops`` says the same)
    with torch.enable_grad():
        counted = _census(model, example, formulas)
    # the peak under no_grad, as the benchmark runs: an activation dies once its last consumer
    # has run, and nothing is kept for a backward pass
    with torch.no_grad():
        walked = _census(model, example, formulas)
    tensors = (*model.parameters(), *model.buffers())
    return Features(
        model=name,
        batch_size=batch_size,
        image_size=image_size,
        param_count=sum(p.numel() for p in model.parameters()),
        param_bytes=sum(t.numel() * t.element_size() for t in tensors),
        flops=counted.flops,
        bytes_written=counted.bytes_written,
        op_count=counted.ops,
        peak_activation_bytes=int(walked.peak),
    )
