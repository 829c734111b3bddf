"""One category table for the ops of both frameworks, so that their profiles can be subtracted.

PyTorch eager runs one aten op per layer call: an op's time (its own and its children's) goes to
the category of the outermost aten op it ran under, so the bias add inside a convolution counts as
convolution and the matmuls inside scaled-dot-product attention as attention. A convolution is
depthwise/grouped when its input has more channels than its weight takes per group.

XLA runs HLO instructions, most of them fusions. A fusion goes to the category of its most
expensive constituent: the convolution or dot it is built around, else its first op that computes
something (HLO text order, layout ops such as the broadcast of a constant skipped). Instructions
that ran under a named scope of the Flax twins (``attention`` around the scaled-dot-product core,
``batch_norm`` and ``layer_norm`` around normalisation) take that scope's category first, as their
PyTorch counterparts do.

A fusion is one kernel, so its time cannot be split between the ops it fused. Where those ops span
several categories (XLA on a CPU fuses a ResNet's last stage, convolutions with their BatchNorms,
ReLUs and the global pooling, into one kernel; a BatchNorm with the ReLU after it into another),
the instruction's category names them all, joined by ``FUSED_JOIN`` with the category it goes to
first: "convolution + normalisation + elementwise/activation + pooling/reduction". The report
merges those categories on both sides of a comparison, so that PyTorch's separate BatchNorm and
ReLU are set against the JAX kernel that holds them. Layout ops inside a fusion are how it
addresses memory and do not count, and an attention-scoped fusion is attention whole, as
PyTorch's scaled-dot-product op is.
"""

from __future__ import annotations

import re

from fwbench.vocab import OP_CATEGORIES, OVERHEAD

CONV, DEPTHWISE, MATMUL, ATTENTION, NORM, ELEMENTWISE, POOL, MOVE, OTHER = OP_CATEGORIES
assert OVERHEAD not in OP_CATEGORIES
# Joins the categories of a fusion's ops into one category name; report/why.py splits on the same
# string (the report may not import families; tests/test_why_parts.py holds the two equal).
FUSED_JOIN = " + "

# Outermost aten op names, first match wins ("convert" is not a convolution, "addmm" is a matmul
# before it is an add).
_TORCH_RULES = (
    (ATTENTION, r"scaled_dot_product|attention|softmax"),
    (CONV, r"conv(?!ert)"),
    (MATMUL, r"linear|addmm|\bmm\b|bmm|matmul|einsum|baddbmm|\bdot\b"),
    (NORM, r"batch_norm|layer_norm|group_norm|instance_norm|\bnorm\b"),
    (POOL, r"pool|\bmean\b|\bsum\b|amax|amin|\bmax\b|\bmin\b|logsumexp|\bprod\b"),
    (
        MOVE,
        r"copy|\bto\b|_to_copy|contiguous|clone|\bcat\b|stack|permute|transpose|reshape|view|"
        r"flatten|expand|pad|index|slice|select|narrow|split|chunk|squeeze|\bt\b|as_strided|"
        r"empty|zeros|ones|fill|unbind|repeat",
    ),
)


# Inside PyTorch's fused attention layer the batched matmuls and the softmax are the attention
# core (scores and weighted sum); its plain matmuls are the projections.
_ATTENTION_CORE = r"bmm|baddbmm|softmax"


def torch_category(name: str, input_shapes: list | None = None, in_attention: bool = False) -> str:
    """The category of an outermost aten op, e.g. ``aten::conv2d``; ``input_shapes`` (as the
    profiler records them with ``record_shapes=True``) tell a grouped convolution apart.
    ``in_attention``: the op ran inside a fused attention layer (see profiling.CONTAINERS)."""
    op = name.split("::", 1)[-1].lower()
    if in_attention and re.search(_ATTENTION_CORE, op):
        return ATTENTION
    for category, pattern in _TORCH_RULES:
        if re.search(pattern, op):
            if category == CONV and _grouped(input_shapes):
                return DEPTHWISE
            return category
    return ELEMENTWISE if name.startswith("aten::") else OTHER


def _grouped(shapes: list | None) -> bool:
    """An NCHW input with more channels than the OIHW weight takes: groups = C_in / I > 1."""
    if not shapes or len(shapes) < 2:
        return False
    x, w = shapes[0], shapes[1]
    if not (isinstance(x, list | tuple) and isinstance(w, list | tuple)):
        return False
    if len(x) != 4 or len(w) != 4 or not w[1]:
        return False
    return x[1] // w[1] > 1


# ---------------------------------------------------------------------------- XLA

# a shape is one token, or a tuple in parentheses (a library call on a GPU returns its scratch
# buffer beside its result)
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(?:\([^()]*\)|\S+)(?:\{[^}]*\})?\s+([\w\-]+)\("
)
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_GROUPS = re.compile(r"feature_group_count=(\d+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CUSTOM_TARGET = re.compile(r'custom_call_target="([^"]*)"')
# A library call that runs an activation after its convolution or matmul says so in its backend
# config (cuDNN's fused convolution, cuBLASLt's epilogue); a bias alone is part of the layer on
# both sides (aten::linear and conv2d add theirs too).
_CALL_ACTIVATION = re.compile(
    r'"activation_mode":"k(?!None)\w+"|"epilogue":"\w*(?:RELU|GELU|SILU|SWISH|SIGMOID|TANH)',
    re.IGNORECASE,
)

_SCOPES = ((ATTENTION, "attention"), (NORM, "batch_norm"), (NORM, "layer_norm"))
_MOVE_OPCODES = {
    "copy",
    "transpose",
    "reshape",
    "broadcast",
    "concatenate",
    "slice",
    "dynamic-slice",
    "dynamic-update-slice",
    "pad",
    "gather",
    "scatter",
    "bitcast",
    "convert",
    "copy-start",
    "copy-done",
    "reverse",
    "iota",
}
_POOL_OPCODES = {"reduce-window", "reduce", "select-and-scatter", "reduce-precision"}
_TRIVIAL = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast"}


def _parse_hlo(text: str) -> dict[str, list[dict]]:
    """Computation name -> its instructions in text order (name, opcode, the line)."""
    computations: dict[str, list[dict]] = {}
    current = None
    for line in text.splitlines():
        found = _INSTRUCTION.match(line)
        if found and current is not None:
            name, opcode = found.groups()
            computations[current].append({"name": name, "opcode": opcode, "line": line})
            continue
        head = _COMPUTATION.match(line)
        if head and "=" not in line.split("{", 1)[0]:
            current = head.group(1)
            computations[current] = []
    return computations


def _constituents(instr: dict, computations: dict, depth: int = 0) -> list[dict]:
    """The instructions a fusion (or call) runs, nested fusions flattened, in text order."""
    called = _CALLS.search(instr["line"])
    if not called or called.group(1) not in computations or depth > 8:
        return [instr]
    out = []
    for inner in computations[called.group(1)]:
        out.extend(_constituents(inner, computations, depth + 1))
    return out


def _scope(instr: dict) -> str | None:
    found = _OP_NAME.search(instr["line"])
    name = found.group(1) if found else ""
    for category, scope in _SCOPES:
        if f"/{scope}/" in f"/{name}/" or name.endswith(f"/{scope}"):
            return category
    return None


def _opcode_category(instr: dict) -> str:
    opcode = instr["opcode"]
    if opcode == "convolution":
        groups = _GROUPS.search(instr["line"])
        return DEPTHWISE if groups and int(groups.group(1)) > 1 else CONV
    if opcode == "dot":
        return MATMUL
    if opcode == "custom-call":
        target = (_CUSTOM_TARGET.search(instr["line"]) or [None, ""])[1].lower()
        if "conv" in target:
            return CONV
        if "matmul" in target or "gemm" in target or "dot" in target:
            return MATMUL
        return OTHER
    if opcode in _POOL_OPCODES:
        return POOL
    if opcode in _MOVE_OPCODES:
        return MOVE
    if opcode == "rsqrt":
        return NORM
    return ELEMENTWISE


def _lead_category(parts: list[dict]) -> str:
    for part in parts:
        if _scope(part) == ATTENTION:
            return ATTENTION
    for wanted in (CONV, DEPTHWISE, MATMUL):
        for part in parts:
            if _opcode_category(part) == wanted:
                return wanted
    # the first op that computes something: a fusion's text often opens with the broadcast of a
    # constant it uses; only a fusion of nothing but layout ops is data movement
    computing = [p for p in parts if _opcode_category(p) != MOVE]
    first = (computing or parts)[0]
    return _scope(first) or _opcode_category(first)


def _instruction_category(instr: dict, computations: dict) -> str:
    """The category an instruction's time goes to, joined with the categories of the other ops
    it fused (see the module's note)."""
    parts = [i for i in _constituents(instr, computations) if i["opcode"] not in _TRIVIAL]
    parts = parts or [instr]
    lead = _lead_category(parts)
    if lead == ATTENTION:
        return lead
    fused = {_scope(p) or _opcode_category(p) for p in parts}
    if any(p["opcode"] == "custom-call" and _CALL_ACTIVATION.search(p["line"]) for p in parts):
        fused.add(ELEMENTWISE)
    fused -= {lead, MOVE, OTHER}
    return FUSED_JOIN.join([lead, *(c for c in OP_CATEGORIES if c in fused)])


def fused_parts(category: str) -> tuple[str, ...]:
    """The categories a (possibly fused) category name holds, the one it goes to first."""
    return tuple(category.split(FUSED_JOIN))


def hlo_categories(hlo_text: str) -> dict[str, str]:
    """Every instruction of an optimized HLO module's computations -> its category, keyed by
    the instruction name a profile's events carry (``fusion.12``, ``convolution.3``)."""
    computations = _parse_hlo(hlo_text)
    return {
        instr["name"]: _instruction_category(instr, computations)
        for instructions in computations.values()
        for instr in instructions
    }


_ENTRY = re.compile(r"^\s*ENTRY\s+%?([\w.\-]+)")


def entry_kernels(hlo_text: str) -> list[dict]:
    """The kernels an optimized HLO module runs, in order: each instruction of its entry
    computation that computes or moves data (parameters, constants, tuples and bitcasts do
    neither), with ``parts``, the instructions it runs (a fusion's ops, nested fusions
    flattened; itself otherwise). A fusion is one kernel."""
    computations = _parse_hlo(hlo_text)
    entry = next((m.group(1) for m in map(_ENTRY.match, hlo_text.splitlines()) if m), None)
    if entry not in computations:
        raise ValueError("the HLO text has no ENTRY computation")
    kernels = []
    for instr in computations[entry]:
        if instr["opcode"] in _TRIVIAL:
            continue
        parts = [i for i in _constituents(instr, computations) if i["opcode"] not in _TRIVIAL]
        kernels.append({**instr, "parts": parts or [instr]})
    return kernels
