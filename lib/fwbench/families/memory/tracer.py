"""One torch.fx graph of a whole training step: forward, loss, backward and the Adam update.

Region boundaries cannot be recovered reliably from aten ops alone, so the step marks them with an
identity op of our own (``fwbench_mem::mark``), registered through ``torch.library``:

- the model output passes through an autograd Function whose forward marks ``forward_end`` and
  whose backward marks ``loss_backward_end`` on the incoming gradient;
- the loss passes through one that marks ``loss_end`` and, in backward, ``backward_start``;
- every parameter gradient is marked ``grad`` before the optimizer reads it.

``mark`` is declared as returning an alias of its input, so it costs no memory and the analysis
treats it like a view. The optimizer state exists before tracing and is a graph input like the
parameters; the update mutates both in place, exactly as an eager step would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx
from torch.func import functional_call

from fwbench.families.memory import torch_internals
from fwbench.families.memory.functional_adam import (
    AdamConfig,
    AdamState,
    adam_step_,
    init_adam_state,
)

FORWARD_END = "forward_end"
LOSS_END = "loss_end"
_BACKWARD_START = "backward_start"
_LOSS_BACKWARD_END = "loss_backward_end"
GRAD = "grad"

_LIBRARY = torch.library.Library("fwbench_mem", "DEF")
_LIBRARY.define("mark(Tensor(a) x, str tag) -> Tensor(a)")


def _mark_impl(x: torch.Tensor, tag: str) -> torch.Tensor:
    return x.view_as(x)


_LIBRARY.impl("mark", _mark_impl, "CompositeExplicitAutograd")
_MARK = torch.ops.fwbench_mem.mark.default


class _BoundaryMarker(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tag, backward_tag):
        ctx.backward_tag = backward_tag
        return torch.ops.fwbench_mem.mark(x, tag)

    @staticmethod
    def backward(ctx, grad):
        return torch.ops.fwbench_mem.mark(grad, ctx.backward_tag), None, None


def is_mark(node: fx.Node, tag: str | None = None) -> bool:
    return node.op == "call_function" and node.target is _MARK and tag in (None, node.args[1])


# Graph input kinds; the batch (inputs and targets) is OTHER.
PARAM, BUFFER, OPT_STATE, OTHER = "PARAM", "BUFFER", "OPT_STATE", "OTHER"


@dataclass
class TracedStep:
    graph_module: fx.GraphModule
    inputs: list[torch.Tensor]  # real tensors, in placeholder order
    input_kinds: list[str]
    param_names: list[str]
    torch_version: str

    def run(self, inputs: list[torch.Tensor] | None = None, graph_module=None):
        """One training step; returns ``(loss, grads)``. Parameters and state update in place."""
        with torch.no_grad():
            # `is None`, not `or`: a compiled module refuses bool() (it asks for its len())
            module = self.graph_module if graph_module is None else graph_module
            out = module(*(self.inputs if inputs is None else inputs))
        return out[0], list(out[1:])


def trace_training_step(
    model: torch.nn.Module,
    batch: torch.Tensor,
    targets: torch.Tensor,
    loss_fn,
    adam: AdamConfig | None = None,
    state: AdamState | None = None,
) -> TracedStep:
    """Trace ``loss_fn(model(batch), targets)``, its backward and one Adam step into one graph.

    The returned graph's inputs alias ``model``'s parameters and buffers, so running it trains the
    model itself. It returns the loss and the parameter gradients.
    """
    adam = adam or AdamConfig()
    named_params = [(n, p.detach()) for n, p in model.named_parameters()]
    named_buffers = [(n, b.detach()) for n, b in model.named_buffers()]
    params = [p for _, p in named_params]
    state = state or init_adam_state(params)
    n_params, n_buffers = len(named_params), len(named_buffers)

    def step(*flat):
        params_in = list(flat[:n_params])
        buffers_in = flat[n_params : n_params + n_buffers]
        rest = flat[n_params + n_buffers :]
        step_state = AdamState(
            list(rest[:n_params]), list(rest[n_params : 2 * n_params]), rest[2 * n_params]
        )
        x, y = rest[2 * n_params + 1 :]
        tensors = {n: t for (n, _), t in zip(named_params, params_in, strict=True)}
        tensors.update({n: t for (n, _), t in zip(named_buffers, buffers_in, strict=True)})
        out = functional_call(model, tensors, (x,))
        out = _BoundaryMarker.apply(out, FORWARD_END, _LOSS_BACKWARD_END)
        loss = _BoundaryMarker.apply(loss_fn(out, y), LOSS_END, _BACKWARD_START)
        grads = torch.autograd.grad(loss, params_in)
        grads = [torch.ops.fwbench_mem.mark(g, GRAD) for g in grads]
        with torch.no_grad():
            adam_step_(params_in, grads, step_state, adam)
        return (loss, *grads)

    inputs = [*params, *(b for _, b in named_buffers), *state.tensors(), batch, targets]
    kinds = [PARAM] * n_params + [BUFFER] * n_buffers + [OPT_STATE] * (2 * n_params + 1)
    kinds += [OTHER, OTHER]
    tracing_inputs = [
        t.detach().requires_grad_(k == PARAM) for t, k in zip(inputs, kinds, strict=True)
    ]
    was_training = model.training
    model.train()
    try:
        gm = torch_internals.make_fx_fake(step)(*tracing_inputs)
    finally:
        model.train(was_training)
    _deinplace_forward(gm)
    return TracedStep(
        gm, inputs, kinds, [n for n, _ in named_params], torch_internals.torch_version()
    )


def _out_of_place_variant(target):
    """``aten.relu.default`` for ``aten.relu_.default``; None where no such twin exists."""
    if not torch_internals.is_aten_style_op(target):
        return None
    packet_name = target.overloadpacket.__name__
    if not packet_name.endswith("_") or packet_name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, packet_name[:-1], None)
    variant = (
        getattr(packet, torch_internals.overload_name(target), None) if packet is not None else None
    )
    if variant is None or any(
        a.alias_info is not None and a.alias_info.is_write
        for a in torch_internals.op_schema(variant).arguments
    ):
        return None
    return variant


def _is_random(target) -> bool:
    return torch_internals.is_aten_style_op(target) and torch.Tag.nondeterministic_seeded in (
        target.tags
    )


def _deinplace_forward(gm: fx.GraphModule) -> int:
    """Turn in-place ops on forward intermediates into out-of-place ones; returns how many.

    ``relu_(bn_out)`` makes the ReLU output share the batch-norm output's storage, so recomputing
    the activation would need the whole chain of writers replayed in order. Out of place, every
    activation is written once by the node that owns it. Peak memory is unchanged in practice:
    the overwritten tensor dies at the in-place op either way. Ops on graph inputs (running
    statistics, optimizer state) and random ops stay in place.
    """
    nodes = list(gm.graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    replaced = 0
    for node in nodes:
        if is_mark(node, _BACKWARD_START):
            break
        if node.op != "call_function" or _is_random(node.target) or not node.args:
            continue
        variant = _out_of_place_variant(node.target)
        self_arg = node.args[0]
        if variant is None or not isinstance(self_arg, fx.Node) or self_arg.op != "call_function":
            continue
        aliases = [u for u in self_arg.users if u is not node and _returns_alias(u.target)]
        if aliases:
            continue  # a view of self_arg would silently keep seeing the old values
        with gm.graph.inserting_after(node):
            fresh = gm.graph.call_function(variant, node.args, node.kwargs)
        fresh.meta = dict(node.meta)
        node.replace_all_uses_with(fresh)
        for user in list(self_arg.users):
            if user is not fresh and position.get(user, -1) > position[node]:
                user.replace_input_with(self_arg, fresh)
        gm.graph.erase_node(node)
        replaced += 1
    gm.graph.lint()
    gm.recompile()
    return replaced


def _returns_alias(target) -> bool:
    if not torch_internals.is_aten_style_op(target):
        return target is not None and getattr(target, "__name__", "") == "getitem"
    return any(r.alias_info is not None for r in torch_internals.op_schema(target).returns)
