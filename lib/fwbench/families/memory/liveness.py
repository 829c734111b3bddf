"""Static analysis of a traced training step: ranks, regions, kinds, storages and activations.

Memory belongs to storages, not to nodes: a view, an in-place op or a ``mark`` returns an alias
of its input (their schemas say so), so only the node that created a storage owns its bytes and
only such owners can be recomputation candidates. A storage lives from its creation to the last
use of any of its aliases; graph inputs live for the whole step.

An activation is a storage created in the forward or loss region and still needed by the
backward region. Recomputing one replays the forward nodes between it and tensors that are still
in memory at that point (its ``recompute sources``); it is excluded when that replay would run an
op that writes to its inputs and has no side-effect-free twin. A random op (dropout's
``bernoulli_``) is replayed with the random generator's state the forward pass drew with, as
``torch.utils.checkpoint`` does, so it draws the same mask (``analyze(replay_random=False)`` rules
such activations out instead).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from torch import fx

from fwbench.families.memory import torch_internals
from fwbench.families.memory.tracer import (
    BUFFER,
    FORWARD_END,
    GRAD,
    LOSS_END,
    OPT_STATE,
    OTHER,
    PARAM,
    TracedStep,
    is_mark,
)

FORWARD, LOSS, BACKWARD, OPTIMIZER = "forward", "loss", "backward", "optimizer"
GRAD_KIND, ACT = "GRAD", "ACT"
KINDS = (PARAM, BUFFER, OPT_STATE, GRAD_KIND, ACT, OTHER)

_aten = torch.ops.aten
# Ops that update running statistics in place; replayed with the statistics left out, since in
# training mode they only ever read the batch. Values: argument positions to replace by None.
_STATS_ARGS_TO_DROP = {_aten.native_batch_norm.default: (3, 4)}


@dataclass
class _NodeInfo:
    name: str
    rank: int
    region: str
    kind: str
    owner: str | None  # the node whose storage this node's tensor lives in
    is_random: bool


@dataclass
class _Storage:
    owner: str
    nbytes: int
    created: int  # rank of the owning node; -1 for graph inputs
    last_use: int
    kind: str
    uses: list[int] = field(default_factory=list)
    random_writer: bool = False


@dataclass
class Activation:
    name: str
    nbytes: int
    created: int
    last_forward_use: int
    first_backward_use: int
    last_backward_use: int
    from_random_op: bool
    recomputable: bool
    reason: str = ""


@dataclass
class GraphAnalysis:
    nodes: list[fx.Node]
    info: dict[str, _NodeInfo]
    storages: dict[str, _Storage]
    activations: dict[str, Activation]
    forward_end: int
    backward_start: int
    backward_end: int
    # forward nodes living in an activation's storage whose values backward nodes read
    backward_aliases: dict[str, list[fx.Node]] = field(default_factory=dict)
    replay_random: bool = False  # a recomputation may replay random ops (generator restored)

    @property
    def n_ranks(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> fx.Node:
        return self.nodes[self.info[name].rank]

    def activation_bytes(self) -> int:
        return sum(a.nbytes for a in self.activations.values())


def _tensor(val) -> bool:
    return isinstance(val, torch.Tensor)


def _storage_nbytes(val: torch.Tensor) -> int:
    try:
        return int(val.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return val.numel() * val.element_size()


def _aliased_input(node: fx.Node) -> fx.Node | None:
    """The input node whose storage ``node``'s output shares, per the op schema; None if fresh."""
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        parent, index = node.args
        returns = schema_returns(parent.target)
        if not returns:
            return None
        ret = returns[index] if len(returns) > 1 else returns[0]
        return _arg_with_alias(parent, ret.alias_info)
    returns = schema_returns(node.target)
    if len(returns) != 1:
        return None
    return _arg_with_alias(node, returns[0].alias_info)


def schema_returns(target):
    """The returns of an operator's schema (empty for anything but an aten-style op)."""
    return (
        list(torch_internals.op_schema(target).returns)
        if torch_internals.is_aten_style_op(target)
        else []
    )


def _arg_with_alias(node: fx.Node, alias_info) -> fx.Node | None:
    if alias_info is None:
        return None
    for arg_schema, arg in zip(
        torch_internals.op_schema(node.target).arguments, node.args, strict=False
    ):
        info = arg_schema.alias_info
        if info is not None and info.before_set & alias_info.before_set:
            return arg if isinstance(arg, fx.Node) else None
    return None


def _mutates_inputs(target) -> bool:
    return torch_internals.is_aten_style_op(target) and any(
        a.alias_info is not None and a.alias_info.is_write
        for a in torch_internals.op_schema(target).arguments
    )


def is_random(target) -> bool:
    return torch_internals.is_aten_style_op(target) and torch.Tag.nondeterministic_seeded in (
        target.tags
    )


def _fresh_tensor(shape, stride, dtype, device) -> torch.Tensor:
    """An uninitialized tensor of the given layout: ``empty_like``'s replay, which needs no input."""
    return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def mutated_args(node: fx.Node) -> list[fx.Node]:
    """The argument nodes an op writes to in place, per its schema."""
    if not torch_internals.is_aten_style_op(node.target):
        return []
    written = []
    for i, arg in enumerate(torch_internals.op_schema(node.target).arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, fx.Node):
            written.append(value)
    return written


def replay_call(node: fx.Node, *, replay_random: bool = False):
    """``(target, args, kwargs)`` that recompute ``node`` without side effects, or None.

    ``empty_like`` is replayed from its recorded layout, so a replay never reaches back to the
    tensor it only took a shape from. With ``replay_random`` a random op is replayed as itself: the
    rewriter restores the random generator's state from before the forward pass ran it, so it
    draws the same numbers; an in-place one is only replayable where what it writes to is part of
    the same replay (the caller checks that), as dropout's ``bernoulli_`` on a fresh
    ``empty_like`` is."""
    args = list(node.args)
    if node.target in _STATS_ARGS_TO_DROP:
        for i in _STATS_ARGS_TO_DROP[node.target]:
            args[i] = None
        return node.target, tuple(args), dict(node.kwargs)
    if node.target is _aten.empty_like.default and "val" in node.meta:
        val = node.meta["val"]
        layout = (tuple(val.shape), tuple(val.stride()), val.dtype, str(val.device))
        return _fresh_tensor, layout, {}
    if is_random(node.target):
        return (node.target, tuple(args), dict(node.kwargs)) if replay_random else None
    if _mutates_inputs(node.target):
        return None
    return node.target, tuple(args), dict(node.kwargs)


def analyze(traced: TracedStep, *, replay_random: bool = True) -> GraphAnalysis:
    """The step's storages, activations and what each activation's recomputation replays.
    ``replay_random``: whether a recomputation may replay a random op (dropout) with the
    generator's state restored; without it those activations are never recomputed."""
    nodes = list(traced.graph_module.graph.nodes)
    rank = {n: i for i, n in enumerate(nodes)}
    forward_end = next(rank[n] for n in nodes if is_mark(n, FORWARD_END))
    # Autograd creates the seed gradient (ones_like) before the backward_start mark runs, so
    # the backward region begins right after the loss, not at the mark.
    backward_start = next(rank[n] for n in nodes if is_mark(n, LOSS_END)) + 1
    backward_end = max(rank[n] for n in nodes if is_mark(n, GRAD))

    def region(r: int) -> str:
        if r <= forward_end:
            return FORWARD
        if r < backward_start:
            return LOSS
        return BACKWARD if r <= backward_end else OPTIMIZER

    placeholders = [n for n in nodes if n.op == "placeholder"]
    input_kind = dict(zip(placeholders, traced.input_kinds, strict=True))
    owner: dict[fx.Node, fx.Node | None] = {}
    storages: dict[str, _Storage] = {}
    for n in nodes:
        src = _aliased_input(n)
        if src is not None:
            owner[n] = owner.get(src)
        elif _tensor(n.meta.get("val")):
            owner[n] = n
            # A multi-output op allocates all its outputs itself; getitem only picks one.
            maker = n.args[0] if n.target is operator.getitem else n
            storages[n.name] = _Storage(
                owner=n.name,
                nbytes=_storage_nbytes(n.meta["val"]),
                created=-1 if n.op == "placeholder" else rank[maker],
                last_use=rank[n],
                kind=input_kind.get(n, OTHER),
            )
        else:
            owner[n] = None

    last = len(nodes) - 1
    returned: set[str] = set()
    for n in nodes:
        for a in n.all_input_nodes:
            o = owner.get(a)
            if o is None:
                continue
            if n.op == "output":
                returned.add(o.name)  # lives to the end, but returning is not a backward use
            else:
                storages[o.name].uses.append(rank[n])
        if is_random(n.target) and owner.get(n) is not None:
            storages[owner[n].name].random_writer = True
        if is_mark(n, GRAD) and owner.get(n) is not None:
            storages[owner[n].name].kind = GRAD_KIND
    for s in storages.values():
        s.uses.sort()
        lives_to_end = s.created < 0 or s.owner in returned
        s.last_use = last if lives_to_end else max([s.created, *s.uses])

    activations: dict[str, Activation] = {}
    for s in storages.values():
        if s.created < 0 or s.created >= backward_start or s.kind != OTHER or s.owner in returned:
            continue
        backward_uses = [u for u in s.uses if u >= backward_start]
        if not backward_uses:
            continue
        s.kind = ACT
        activations[s.owner] = Activation(
            name=s.owner,
            nbytes=s.nbytes,
            created=s.created,
            last_forward_use=max([s.created, *(u for u in s.uses if u < backward_start)]),
            first_backward_use=backward_uses[0],
            last_backward_use=backward_uses[-1],
            from_random_op=s.random_writer,
            recomputable=replay_random or not s.random_writer,
            reason="written by a random op" if s.random_writer and not replay_random else "",
        )

    info = {
        n.name: _NodeInfo(
            name=n.name,
            rank=rank[n],
            region=region(rank[n]),
            kind=storages[owner[n].name].kind if owner.get(n) is not None else OTHER,
            owner=owner[n].name if owner.get(n) is not None else None,
            is_random=is_random(n.target),
        )
        for n in nodes
    }
    analysis = GraphAnalysis(
        nodes,
        info,
        storages,
        activations,
        forward_end,
        backward_start,
        backward_end,
        replay_random=replay_random,
    )
    for n in nodes[:backward_start]:
        o = info[n.name].owner
        if o in activations and any(rank[u] >= backward_start for u in n.users):
            analysis.backward_aliases.setdefault(o, []).append(n)
    for act in activations.values():
        if act.recomputable:
            closure = recompute_closure(analysis, act.name, set(activations))
            act.from_random_op = act.from_random_op or bool(closure.random_nodes)
            if closure.blocker is not None:
                act.recomputable = False
                act.from_random_op = act.from_random_op or closure.blocked_by_random
                act.reason = f"replay would run {closure.blocker}"
    return analysis


@dataclass
class Closure:
    nodes: list[fx.Node]  # forward nodes to replay, in graph order
    sources: set[str]  # storages read by the replay (retained activations and graph inputs)
    blocker: str | None = None
    blocked_by_random: bool = False

    @property
    def random_nodes(self) -> list[fx.Node]:
        """The random ops the replay runs, each with the generator's state restored."""
        return [n for n in self.nodes if is_random(n.target)]


def recompute_closure(analysis: GraphAnalysis, name: str, retained: set[str]) -> Closure:
    """Forward nodes that rebuild activation ``name`` from storages still in memory.

    ``retained`` names the activations kept in memory; graph inputs always are. Everything else
    (forward temporaries, activations chosen for recomputation, and ``name`` itself) is replayed.
    """
    info = analysis.info
    chosen: dict[fx.Node, None] = {}
    sources: set[str] = set()
    stack = list(analysis.backward_aliases.get(name, []))
    seen: set[fx.Node] = set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        owner = info[n.name].owner
        if n.op == "placeholder" or (owner is not None and owner != name and owner in retained):
            sources.add(owner or n.name)
            continue
        if n.op != "call_function" or info[n.name].rank >= analysis.backward_start:
            return Closure([], set(), blocker=f"{n.name} (not a forward op)")
        replay = replay_call(n, replay_random=analysis.replay_random)
        if replay is None:
            random = is_random(n.target)
            return Closure([], set(), blocker=f"{n.name} ({n.target})", blocked_by_random=random)
        chosen[n] = None
        replay_inputs: list[fx.Node] = []
        fx.node.map_arg((replay[1], replay[2]), replay_inputs.append)
        stack.extend(a for a in replay_inputs if a not in seen)
    for n in chosen:
        # an in-place random op may only write to what the replay itself made fresh
        outside = [a for a in mutated_args(n) if a not in chosen]
        if outside:
            return Closure(
                [],
                set(),
                blocker=f"{n.name} ({n.target}) on {outside[0].name}",
                blocked_by_random=True,
            )
    ordered = sorted(chosen, key=lambda n: info[n.name].rank)
    return Closure(ordered, sources)
