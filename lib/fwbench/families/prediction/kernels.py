"""A model as the kernels that run it: what each framework actually launches, with the shapes a
price depends on.

The op-category predictor (``predictor.py``) sees FLOPs and bytes per category. It cannot see that
XLA:CPU runs a 3x3 convolution with a 2x2 output at a thirtieth of PyTorch's speed, or what XLA
fused. A kernel-level price (``kernel_prices.py``) needs the kernels themselves:

- **JAX** (and torchax, which lowers to the same compiler): the instructions of the optimized HLO
  module's entry computation (``op_categories.entry_kernels``). A fusion is one kernel: the one
  built around a convolution or a dot is that convolution or dot (its epilogue rides along, as the
  micro-benchmarks' own epilogue does); any other is memory-bound, priced by the bytes it reads
  and writes and the number of ops it fused.
- **PyTorch eager**: the aten ops one forward dispatches, read on the meta device (nothing runs);
  views are free, every other op is a kernel.

A kernel is a ``kind`` and a ``shape``: ``conv`` and ``grouped_conv`` (batch, input and output
channels, kernel height and width, stride, output height and width, groups), ``matmul`` (batch,
m, n, k) and ``memory`` (bytes read and written, ops fused). The same key names the same work in
both frameworks, so one micro-benchmark table can hold both.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

CONV, GROUPED_CONV, MATMUL, MEMORY = "conv", "grouped_conv", "matmul", "memory"
KINDS = (CONV, GROUPED_CONV, MATMUL, MEMORY)
# the shape's fields per kind, in order
FIELDS = {
    CONV: ("batch", "cin", "cout", "kh", "kw", "stride", "hout", "wout", "groups"),
    GROUPED_CONV: ("batch", "cin", "cout", "kh", "kw", "stride", "hout", "wout", "groups"),
    MATMUL: ("batch", "m", "n", "k"),
    MEMORY: ("bytes", "ops"),
}
_ITEM = 4  # fp32: the precision the prediction family measures


@dataclass(frozen=True)
class Kernel:
    kind: str
    shape: tuple[int, ...]
    name: str = ""  # what ran: the HLO instruction or the aten op

    def __post_init__(self):
        if self.kind not in FIELDS or len(self.shape) != len(FIELDS[self.kind]):
            raise ValueError(f"a {self.kind!r} kernel takes {FIELDS.get(self.kind)}: {self.shape}")

    @property
    def fields(self) -> dict[str, int]:
        return dict(zip(FIELDS[self.kind], self.shape, strict=True))

    @property
    def flops(self) -> float:
        f = self.fields
        if self.kind in (CONV, GROUPED_CONV):
            per_output = 2 * f["kh"] * f["kw"] * f["cin"] // f["groups"]
            return float(f["batch"] * f["hout"] * f["wout"] * f["cout"] * per_output)
        if self.kind == MATMUL:
            return float(2 * f["batch"] * f["m"] * f["n"] * f["k"])
        return 0.0

    @property
    def bytes(self) -> float:
        """Bytes read and written once each (fp32), the least any implementation moves."""
        f = self.fields
        if self.kind in (CONV, GROUPED_CONV):
            stride = f["stride"]
            h_in, w_in = f["hout"] * stride, f["wout"] * stride
            x = f["batch"] * f["cin"] * h_in * w_in
            w = f["cout"] * f["cin"] // f["groups"] * f["kh"] * f["kw"]
            y = f["batch"] * f["cout"] * f["hout"] * f["wout"]
            return float(_ITEM * (x + w + y))
        if self.kind == MATMUL:
            b, m, n, k = (f[key] for key in ("batch", "m", "n", "k"))
            return float(_ITEM * b * (m * k + k * n + m * n))
        return float(f["bytes"])

    def features(self) -> np.ndarray:
        """What a price is interpolated over, on log scales: work and traffic first, then the
        shape terms that decide how well a kernel library runs it (a 2x2 output, a depthwise
        filter, a skinny matmul)."""
        f = self.fields
        work = [math.log2(max(self.flops, 1.0)), math.log2(max(self.bytes, 1.0))]
        if self.kind in (CONV, GROUPED_CONV):
            return np.array(
                [
                    *work,
                    math.log2(f["hout"] * f["wout"]),
                    math.log2(f["cin"] // f["groups"]),
                    math.log2(f["cout"]),
                    f["kh"] * f["kw"],
                    f["stride"],
                ]
            )
        if self.kind == MATMUL:
            return np.array([*work, *(math.log2(f[key]) for key in ("m", "n", "k"))])
        return np.array([work[1], f["ops"]])


def conv_kernel(batch, cin, cout, kh, kw, stride, hout, wout, groups, name: str = "") -> Kernel:
    kind = GROUPED_CONV if groups > 1 else CONV
    shape = (batch, cin, cout, kh, kw, stride, hout, wout, groups)
    return Kernel(kind, tuple(int(v) for v in shape), name)


# ------------------------------------------------------------------------------------------ XLA

_SHAPE = re.compile(r"\b(pred|[subf]\d+|bf16|c64|c128)\[([\d,]*)\]")
_DEFINED = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\([^()]*\)|\S+)")
_OPERANDS = re.compile(r"\b[\w\-]+\(([^()]*)\)")
_NAME = re.compile(r"%([\w.\-]+)")
_WINDOW = re.compile(r"window=\{size=([\dx]+)(?:\s+stride=([\dx]+))?")
_DIM_LABELS = re.compile(r"dim_labels=(\w+)_(\w+)->(\w+)")
_GROUPS = re.compile(r"feature_group_count=(\d+)")
_LHS_BATCH = re.compile(r"lhs_batch_dims=\{([\d,]*)\}")
_LHS_CONTRACT = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_RHS_BATCH = re.compile(r"rhs_batch_dims=\{([\d,]*)\}")
_RHS_CONTRACT = re.compile(r"rhs_contracting_dims=\{([\d,]*)\}")
_BYTES = {"pred": 1, "bf16": 2, "c64": 8, "c128": 16}
_LAYOUT_ONLY = {"copy", "transpose", "reshape", "broadcast", "slice", "pad", "concatenate"}


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",") if d)


def _shape_bytes(shape_text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(shape_text):
        size = _BYTES.get(dtype) or max(int(dtype[1:]) // 8, 1)
        total += size * math.prod(_dims(dims))
    return total


def _first_dims(shape_text: str) -> tuple[int, ...]:
    found = _SHAPE.search(shape_text)
    return _dims(found.group(2)) if found else ()


def _defined_shapes(hlo_text: str) -> dict[str, str]:
    """Every instruction's name -> its result shape's text (names are unique in a module)."""
    shapes = {}
    for line in hlo_text.splitlines():
        found = _DEFINED.match(line)
        if found:
            shapes[found.group(1)] = found.group(2)
    return shapes


def _operand_names(line: str) -> list[str]:
    # the operand list follows the opcode; operands print as "%name" or "shape %name"
    found = _OPERANDS.search(line.split("=", 1)[1])
    return _NAME.findall(found.group(1)) if found else []


def _xla_conv(line: str, shapes: dict[str, str], name: str) -> Kernel | None:
    labels = _DIM_LABELS.search(line)
    window = _WINDOW.search(line)
    operands = _operand_names(line)
    if not (labels and window and len(operands) >= 2):
        return None
    lhs_labels, _, out_labels = labels.groups()
    lhs = _first_dims(shapes.get(operands[0], ""))
    out = _first_dims(_DEFINED.match(line).group(2))
    if len(lhs) != len(lhs_labels) or len(out) != len(out_labels):
        return None
    size = _dims(window.group(1).replace("x", ","))
    stride = _dims((window.group(2) or "1").replace("x", ","))
    spatial = [out[out_labels.index(d)] for d in "01" if d in out_labels]
    if len(size) != 2 or len(spatial) != 2:
        return None  # not a 2-D convolution: a 1-D one is priced as memory-bound work
    groups = int((_GROUPS.search(line) or [None, "1"])[1])
    return conv_kernel(
        lhs[lhs_labels.index("b")],
        lhs[lhs_labels.index("f")],
        out[out_labels.index("f")],
        size[0],
        size[1],
        stride[0],
        spatial[0],
        spatial[1],
        groups,
        name,
    )


def _xla_dot(line: str, shapes: dict[str, str], name: str) -> Kernel | None:
    operands = _operand_names(line)
    if len(operands) < 2:
        return None
    lhs = _first_dims(shapes.get(operands[0], ""))
    rhs = _first_dims(shapes.get(operands[1], ""))
    if not lhs or not rhs:
        return None

    def picked(pattern) -> tuple[int, ...]:
        found = pattern.search(line)
        return _dims(found.group(1)) if found else ()

    lb, lc, rb, rc = (picked(p) for p in (_LHS_BATCH, _LHS_CONTRACT, _RHS_BATCH, _RHS_CONTRACT))
    batch = math.prod(lhs[d] for d in lb)
    k = math.prod(lhs[d] for d in lc)
    m = math.prod(s for d, s in enumerate(lhs) if d not in lb and d not in lc)
    n = math.prod(s for d, s in enumerate(rhs) if d not in rb and d not in rc)
    return Kernel(MATMUL, (batch, m, n, k), name)


def xla_kernels(hlo_text: str, convs: list[Kernel] | None = None) -> list[Kernel]:
    """The kernels of an optimized HLO module (``jit(f).lower(...).compile().as_text()``).

    XLA may run a convolution in other terms than the model wrote it: with a small output it
    swaps the roles of image and filter (``dim_labels=01fb_o01i->f01b``), and its shapes then
    describe another problem. ``convs``, the convolutions the program asked for
    (``jaxpr_convs``), name the convolution kernels instead where they are as many; a
    micro-benchmark of one of them, compiled alone, makes XLA choose as it chose in the model."""
    from fwbench.families.inference.op_categories import entry_kernels

    shapes = _defined_shapes(hlo_text)
    kernels = []
    for instr in entry_kernels(hlo_text):
        found = None
        for part in instr["parts"]:
            if part["opcode"] == "convolution":
                found = _xla_conv(part["line"], shapes, instr["name"])
            elif part["opcode"] == "dot":
                found = _xla_dot(part["line"], shapes, instr["name"])
            if found:
                break
        if found is None:
            moved = _shape_bytes(_DEFINED.match(instr["line"]).group(2))
            moved += sum(_shape_bytes(shapes.get(o, "")) for o in _operand_names(instr["line"]))
            ops = sum(p["opcode"] not in _LAYOUT_ONLY for p in instr["parts"])
            found = Kernel(MEMORY, (moved, max(ops, 1)), instr["name"])
        kernels.append(found)
    in_hlo = [i for i, k in enumerate(kernels) if k.kind in (CONV, GROUPED_CONV)]
    if convs is not None and len(convs) == len(in_hlo):
        for i, asked in zip(in_hlo, convs, strict=True):
            kernels[i] = Kernel(asked.kind, asked.shape, kernels[i].name)
    return kernels


def _conv_eqn(eqn) -> Kernel | None:
    lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
    out = eqn.outvars[0].aval.shape
    numbers = eqn.params["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = numbers.lhs_spec, numbers.rhs_spec, numbers.out_spec
    if len(out_spec) != 4:
        return None  # a 1-D convolution: its kernel is priced as XLA's HLO describes it
    return conv_kernel(
        lhs[lhs_spec[0]],
        lhs[lhs_spec[1]],
        out[out_spec[1]],
        rhs[rhs_spec[2]],
        rhs[rhs_spec[3]],
        eqn.params["window_strides"][0],
        out[out_spec[2]],
        out[out_spec[3]],
        eqn.params["feature_group_count"],
        "conv_general_dilated",
    )


def jaxpr_convs(fn, *args) -> list[Kernel]:
    """The 2-D convolutions ``fn(*args)`` asks for, in the terms it wrote them (batch, channels,
    filter, stride, output size, groups), read off its traced program (``jax.make_jaxpr``),
    nested calls included."""
    import jax

    found: list[Kernel] = []

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "conv_general_dilated":
                kernel = _conv_eqn(eqn)
                if kernel is not None:
                    found.append(kernel)
            for param in eqn.params.values():
                inner = getattr(param, "jaxpr", None)
                if inner is not None:
                    walk(getattr(inner, "jaxpr", inner))

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


# ---------------------------------------------------------------------------------- PyTorch

_MATMULS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2)}


def _torch_kernel(func, args, out) -> Kernel | None:
    import torch

    name = func._overloadpacket.__name__
    if getattr(func, "is_view", False) or name in ("detach", "alias", "lift_fresh"):
        return None
    if name.startswith("empty"):
        return None  # an allocation: no kernel runs
    if name == "convolution":
        x, w, stride, groups = args[0], args[1], args[3], args[8]
        if x.dim() == 4 and out.dim() == 4:
            n, cin = x.shape[:2]
            cout, _, kh, kw = w.shape
            return conv_kernel(n, cin, cout, kh, kw, stride[0], *out.shape[2:], groups, name)
    if name in _MATMULS:
        a, b = (args[i] for i in _MATMULS[name])
        batch = a.shape[0] if a.dim() == 3 else 1
        return Kernel(MATMUL, (batch, a.shape[-2], b.shape[-1], a.shape[-1]), name)
    tensors = [t for t in (*args, out) if isinstance(t, torch.Tensor)]
    outs = out if isinstance(out, (list, tuple)) else (out,)
    tensors += [t for t in outs if isinstance(t, torch.Tensor) and t is not out]
    moved = sum(t.numel() * t.element_size() for t in tensors)
    return Kernel(MEMORY, (int(moved), 1), name)


def torch_kernels(model, example) -> list[Kernel]:
    """The kernels one eager forward of ``model`` on ``example`` launches, read on the meta
    device (move both there first: nothing is computed) under ``torch.no_grad``, as the
    benchmark runs."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    kernels: list[Kernel] = []

    class Listing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            found = _torch_kernel(func, args, out)
            if found is not None:
                kernels.append(found)
            return out

    with torch.no_grad(), Listing():
        model(example)
    return kernels


def model_kernels(
    name: str,
    framework: str,
    batch_size: int,
    image_size: int | None = None,
    *,
    mode: str = "",
    layers: str = "stock",
    xla_options: str = "default",
) -> list[Kernel]:
    """The kernels registry model ``name`` runs for one fp32 forward at ``batch_size`` on this
    CPU: PyTorch eager's aten ops (meta device); what XLA compiled the Flax twin to (JAX's
    ``jit``, with ``layers`` and the option set ``xla_options`` as a ``jit-tuned`` cell would:
    weights ported, the compile real, nothing run); or, with ``mode="torchax"``, what XLA
    compiled PyTorch's own graph to. PyTorch's compiled modes generate their own kernels, which
    this does not read."""
    from fwbench.models import registry

    spec = registry.get_spec(name)
    size = image_size or spec.image_size
    shape = spec.input_shape(batch_size, size)
    if framework == "torch" and mode in ("", "eager"):
        import torch

        from fwbench.families.prediction.features import meta_model

        with torch.device("meta"):
            example = torch.empty(shape)
        return torch_kernels(meta_model(name, size), example)
    if framework != "jax":
        raise ValueError(f"kernels are read for torch eager and jax, not {framework} {mode}")
    from fwbench.families.inference.bench import JaxSide, TorchaxSide

    if mode == "torchax":
        side = TorchaxSide(registry.build_torch(name, image_size=image_size), "cpu", "fp32")
    else:
        _, flax_model = registry.build_pair(name, image_size=image_size)
        side = JaxSide(flax_model, "cpu", "fp32", layers, xla_options)
    x = side.inputs([np.zeros(shape, np.float32)])[0]
    compiled = side.jitted.lower(side.state, x).compile(
        compiler_options=side.compiler_options or None
    )
    return xla_kernels(compiled.as_text(), jaxpr_convs(side.jitted, side.state, x))
