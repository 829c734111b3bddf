"""Apply a recomputation and swap plan to the training-step graph, and check the result is the
same step.

For each activation to recompute the rewriter copies its recomputation closure (the forward nodes
that rebuild it from tensors still in memory) to just before its first backward use, then points
the backward readers, and only them, at the copies. A random op in a closure (dropout's mask) is
replayed with the random generator's state captured just before the forward pass ran it, and the
generator is put back afterwards, as ``torch.utils.checkpoint`` does. The forward nodes are untouched, so the
original tensor now dies after its last forward use; fx's generated code frees every value after
its last reader, which is what turns the plan into saved memory.

For each activation to swap (a ``SwapWindow`` of the simulator) it inserts three calls: a copy out
to host memory right after the activation's last forward use, a copy back in where the window
starts it (``back_rank``), and a wait just before the first backward use, after which the views the
backward reads are rebuilt on the copy. On a GPU the copies run on two side streams, one each way,
beside the compute stream, as μ-TWO's swap does; the allocator is told which stream uses what, so
no buffer is reused while a copy still reads it. On a CPU there is no separate device memory: the
copies are plain clones, which proves the rewrite computes the same step and saves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import fx

from fwbench.families.memory.liveness import (
    GraphAnalysis,
    mutated_args,
    replay_call,
    schema_returns,
)
from fwbench.families.memory.simulator import SwapWindow, replay_schedule
from fwbench.families.memory.tracer import TracedStep, is_mark

REPLAY_SUFFIX = "_recomp"
SWAP_OUT_SUFFIX, SWAP_IN_SUFFIX, SWAP_WAIT_SUFFIX = "_swap_out", "_swap_in", "_swap_wait"


@dataclass
class _Swapped:
    """A tensor in flight between memories, with the event that marks its copy done (None on the
    CPU, where the copy is done when the call returns)."""

    tensor: torch.Tensor
    device: torch.device  # where the tensor came from, and goes back to
    event: object = None


_SIDE_STREAMS: dict[tuple[torch.device, str], object] = {}


def _side_stream(device: torch.device, way: str):
    """One side stream per device and direction: the two copy engines of the simulator."""
    key = (device, way)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device=device)
    return _SIDE_STREAMS[key]


def swap_out(tensor: torch.Tensor) -> _Swapped:
    """Copy ``tensor`` to host memory; on a GPU, on the copy-out stream once the compute stream
    has produced it."""
    if tensor.device.type != "cuda":
        return _Swapped(tensor.clone(), tensor.device)
    stream = _side_stream(tensor.device, "out")
    stream.wait_stream(torch.cuda.current_stream(tensor.device))
    with torch.cuda.stream(stream):
        host = torch.empty_like(tensor, device="cpu", pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        done = torch.cuda.Event()
        done.record(stream)
    # the compute stream's tensor may be freed now; its memory is not reused until the copy is done
    tensor.record_stream(stream)
    return _Swapped(host, tensor.device, done)


def swap_in(swapped: _Swapped) -> _Swapped:
    """Start copying a swapped tensor back to its device, on the copy-in stream, once its copy out
    is done."""
    device = swapped.device
    if device.type != "cuda":
        return _Swapped(swapped.tensor.clone(), device)
    stream = _side_stream(device, "in")
    with torch.cuda.stream(stream):
        stream.wait_event(swapped.event)
        back = torch.empty_like(swapped.tensor, device=device)
        back.copy_(swapped.tensor, non_blocking=True)
        done = torch.cuda.Event()
        done.record(stream)
    return _Swapped(back, device, done)


def swap_wait(swapped: _Swapped) -> torch.Tensor:
    """The copied-in tensor, once the compute stream may read it."""
    tensor = swapped.tensor
    if tensor.device.type == "cuda":
        current = torch.cuda.current_stream(tensor.device)
        current.wait_event(swapped.event)
        # allocated on the copy-in stream, read on the compute stream: tell the allocator
        tensor.record_stream(current)
    return tensor


RNG_SUFFIX = "_rng"


def _rng_state(like: torch.Tensor) -> torch.Tensor:
    """The state of the random generator that an op on ``like``'s device draws from."""
    if like.device.type == "cuda":
        return torch.cuda.get_rng_state(like.device)
    return torch.get_rng_state()


def _op(qualified: str):
    """``aten::bernoulli_.float`` -> ``torch.ops.aten.bernoulli_.float``."""
    namespace, rest = qualified.split("::")
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")


def random_replays(gm: fx.GraphModule) -> int:
    """How many replays of a random op a rewritten graph runs from a saved generator state (a
    mask two recomputed activations need is replayed twice). Each replay,
    and each capture of the state it replays from, calls the generator's get/set state, which
    torch.compile does not trace: the compiled graph breaks there."""
    return sum(1 for node in gm.graph.nodes if node.target is _replay_seeded)


def _replay_seeded(state: torch.Tensor, op: str, *args, **kwargs):
    """Run the random op ``op`` with the generator at ``state`` (where the forward pass drew
    from it), then put the generator back, so nothing after the replay draws anything else."""
    like = next(a for a in args if isinstance(a, torch.Tensor))
    if like.device.type == "cuda":
        saved = torch.cuda.get_rng_state(like.device)

        def restore(s):
            torch.cuda.set_rng_state(s, like.device)
    else:
        saved = torch.get_rng_state()
        restore = torch.set_rng_state
    restore(state)
    try:
        return _op(op)(*args, **kwargs)
    finally:
        restore(saved)


def _qualified(target) -> str:
    overload = target._overloadname
    return target._schema.name + ("" if overload == "default" else f".{overload}")


def _swap_ranks(analysis: GraphAnalysis, swaps: Iterable[SwapWindow]) -> tuple[dict, dict, dict]:
    """Where each swap window's copy out, copy in and wait go, by the rank of the node they
    precede or follow: ``(out_after, in_before, wait_before)``, each rank -> its windows."""
    out_after: dict[int, list[SwapWindow]] = {}
    in_before: dict[int, list[SwapWindow]] = {}
    wait_before: dict[int, list[SwapWindow]] = {}
    for window in swaps:
        act = analysis.activations[window.activation]
        # after its last forward use, and never before the node that holds it: an output of a
        # multi-output op that only the backward reads (batch norm's saved statistics) was
        # "created" by the op, one node before the getitem that picks it
        out_rank = max(act.last_forward_use, analysis.info[window.activation].rank)
        out_after.setdefault(out_rank, []).append(window)
        # the copy in starts where the window says, never before the copy out has been issued
        start = max(min(window.back_rank, act.first_backward_use), out_rank + 1)
        in_before.setdefault(start, []).append(window)
        wait_before.setdefault(act.first_backward_use, []).append(window)
    return out_after, in_before, wait_before


def rewrite(
    gm: fx.GraphModule,
    analysis: GraphAnalysis,
    plan: Iterable[str],
    swaps: Iterable[SwapWindow] = (),
) -> fx.GraphModule:
    """A new graph module that recomputes the activations in ``plan`` and swaps those of ``swaps``
    during the backward pass."""
    blocks_at: dict[int, list] = {}
    seeded: set[fx.Node] = set()  # random ops some replay runs: their generator state is kept
    for block in replay_schedule(analysis, plan):
        blocks_at.setdefault(block.before_rank, []).append(block)
        seeded.update(block.closure.random_nodes)
    rng: dict[fx.Node, fx.Node] = {}
    out_after, in_before, wait_before = _swap_ranks(analysis, swaps)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    backward_view: dict[fx.Node, fx.Node] = {}  # forward node -> its replay, for backward readers
    in_flight: dict[str, fx.Node] = {}  # swapped activation -> its copy out, then its copy in
    for node in gm.graph.nodes:
        rank = analysis.info[node.name].rank
        for window in in_before.get(rank, []):
            name = window.activation
            in_flight[name] = graph.call_function(
                swap_in, (in_flight[name],), name=name + SWAP_IN_SUFFIX
            )
        for window in wait_before.get(rank, []):
            name = window.activation
            restored = graph.call_function(
                swap_wait, (in_flight.pop(name),), name=name + SWAP_WAIT_SUFFIX
            )
            restored.meta = dict(analysis.node(name).meta)
            _rebuild_views(graph, analysis, name, restored, env, backward_view)
        for block in blocks_at.get(rank, []):
            local: dict[fx.Node, fx.Node] = {}
            for original in block.closure.nodes:
                target, args, kwargs = replay_call(original, replay_random=True)
                # a swapped activation a replay reads is its copy once that is back
                args, kwargs = fx.node.map_arg(
                    (args, kwargs),
                    lambda a, local=local: local.get(a, backward_view.get(a, env[a])),
                )
                if original in seeded:
                    target, args = _replay_seeded, (rng[original], _qualified(target), *args)
                replay = graph.create_node(
                    "call_function", target, args, kwargs, name=original.name + REPLAY_SUFFIX
                )
                replay.meta = dict(original.meta)
                local[original] = replay
            for alias in analysis.backward_aliases.get(block.activation, []):
                backward_view[alias] = local[alias]
        in_backward = rank >= analysis.backward_start
        if node in seeded:
            written = mutated_args(node) or list(node.all_input_nodes)
            rng[node] = graph.call_function(
                _rng_state, (env[written[0]],), name=node.name + RNG_SUFFIX
            )
        env[node] = graph.node_copy(
            node, lambda a, b=in_backward: backward_view.get(a, env[a]) if b else env[a]
        )
        for window in out_after.get(rank, []):
            name = window.activation
            in_flight[name] = graph.call_function(
                swap_out, (env[analysis.node(name)],), name=name + SWAP_OUT_SUFFIX
            )
    graph.lint()
    rewritten = fx.GraphModule(gm, graph)
    rewritten.recompile()
    return rewritten


def _rebuild_views(graph, analysis, name, restored, env, backward_view) -> None:
    """Point the backward readers of activation ``name``'s storage at ``restored``: the
    activation itself, and every view of it the backward reads, replayed on the copy (views only
    compute where in the storage to look, so replaying them is free)."""
    base = analysis.node(name)
    rebuilt: dict[fx.Node, fx.Node] = {base: restored}
    info = analysis.info

    def derived(node: fx.Node) -> bool:
        # in the storage, or a multi-output view op over it (split, unbind: every output an
        # alias) whose items are
        if info[node.name].owner == name:
            return True
        returns = schema_returns(node.target)
        return (
            node.op == "call_function"
            and bool(returns)
            and all(r.alias_info is not None for r in returns)
            and any(info[x.name].owner == name for x in node.all_input_nodes)
        )

    def rebuild(node: fx.Node) -> fx.Node:
        if node in rebuilt:
            return rebuilt[node]
        target, args, kwargs = replay_call(node)
        args, kwargs = fx.node.map_arg(
            (args, kwargs),
            lambda a: rebuild(a) if derived(a) else env[a],
        )
        copy = graph.create_node("call_function", target, args, kwargs, name=node.name + "_view")
        copy.meta = dict(node.meta)
        rebuilt[node] = copy
        return copy

    backward_view[base] = restored
    for alias in analysis.backward_aliases.get(name, []):
        backward_view[alias] = rebuild(alias)


@dataclass
class Equivalence:
    equal: bool
    max_abs_diff: dict[str, float]


def _clone(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone() for t in tensors]


def check_equivalence(
    traced: TracedStep,
    rewritten: fx.GraphModule,
    *,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> Equivalence:
    """One step of each graph from identical copies of the state, compared with ``allclose``.

    Compares the loss, every gradient, and every graph input after the step: parameters,
    buffers (running statistics) and optimizer state. Both runs start from the same RNG seed, so
    the forward passes draw the same dropout masks; a replayed mask is drawn again from the state
    the forward pass drew it with.
    """
    results = {}
    for label, module in (("original", traced.graph_module), ("rewritten", rewritten)):
        inputs = _clone(traced.inputs)
        torch.manual_seed(seed)
        loss, grads = traced.run(inputs, module)
        results[label] = {"loss": [loss], "grads": grads, "state_after_step": inputs}
    diffs, equal = {}, True
    for key in ("loss", "grads", "state_after_step"):
        pairs = zip(results["original"][key], results["rewritten"][key], strict=True)
        worst = 0.0
        for a, b in pairs:
            if a.is_floating_point():
                worst = max(worst, float((a - b).abs().max()) if a.numel() else 0.0)
                equal = equal and torch.allclose(a, b, rtol=rtol, atol=atol)
            else:
                equal = equal and torch.equal(a, b)
        diffs[key] = worst
    return Equivalence(bool(equal), diffs)


def without_marks(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` with the region marks taken out, for torch.compile: functionalization
    refuses a custom op that returns an alias of its input, and a mark computes nothing."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        if is_mark(node):
            env[node] = env[node.args[0]]
            continue
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.lint()
    stripped = fx.GraphModule(gm, graph)
    stripped.recompile()
    return stripped
