"""Apply a recomputation plan to the training-step graph, and check the result is the same step.

For each chosen activation the rewriter copies its recomputation closure (the forward nodes that
rebuild it from tensors still in memory) to just before its first backward use, then points the
backward readers, and only them, at the copies. The forward nodes are untouched, so the original
tensor now dies after its last forward use; fx's generated code frees every value after its last
reader, which is what turns the plan into saved memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import fx

from fwbench.families.memory.liveness import GraphAnalysis, replay_call
from fwbench.families.memory.simulator import replay_schedule
from fwbench.families.memory.tracer import TracedStep, is_mark

REPLAY_SUFFIX = "_recomp"


def rewrite(gm: fx.GraphModule, analysis: GraphAnalysis, plan: Iterable[str]) -> fx.GraphModule:
    """A new graph module that recomputes the activations in ``plan`` during the backward pass."""
    blocks_at: dict[int, list] = {}
    for block in replay_schedule(analysis, plan):
        blocks_at.setdefault(block.before_rank, []).append(block)

    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    backward_view: dict[fx.Node, fx.Node] = {}  # forward node -> its replay, for backward readers
    for node in gm.graph.nodes:
        rank = analysis.info[node.name].rank
        for block in blocks_at.get(rank, []):
            local: dict[fx.Node, fx.Node] = {}
            for original in block.closure.nodes:
                target, args, kwargs = replay_call(original)
                args, kwargs = fx.node.map_arg(
                    (args, kwargs), lambda a, local=local: local.get(a, env[a])
                )
                replay = graph.create_node(
                    "call_function", target, args, kwargs, name=original.name + REPLAY_SUFFIX
                )
                replay.meta = dict(original.meta)
                local[original] = replay
            for alias in analysis.backward_aliases.get(block.activation, []):
                backward_view[alias] = local[alias]
        in_backward = rank >= analysis.backward_start
        env[node] = graph.node_copy(
            node, lambda a, b=in_backward: backward_view.get(a, env[a]) if b else env[a]
        )
    graph.lint()
    rewritten = fx.GraphModule(gm, graph)
    rewritten.recompile()
    return rewritten


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
    dropout draws the same masks as long as the plan never replays a random op.
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
