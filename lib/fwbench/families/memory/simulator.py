"""Memory simulator (μ-TWO Algorithm G): the memory a plan would use at every step of the graph.

Every storage is an interval of positions in execution order: from the node that allocates it to
the last node that reads any alias of it; graph inputs span the whole step. While a node runs,
memory is what was live before it plus what the node itself adds: its outputs and any workspace
its kernel allocates. The profile measures that per-node increment, so the simulator adds exactly
what was seen; without a profile it falls back to the node's own output bytes.

A plan recomputes some activations. Each such activation is freed after its last forward use and
rebuilt by a replay block (its recomputation closure) placed just before its first backward use;
the block's temporaries live only inside the block, and the tensors it reads (its sources) stay
alive until the block has run. The rewriter builds exactly these blocks, in the same order.

A plan may also swap activations (μ-TWO's other option): copy one to host memory after its last
forward use and back before its first backward use, on copy engines that run beside the compute.
The clock is the profiled node times in execution order. Copies out queue one after another in
the order their activations go idle; each frees its device memory when it completes. Copies in
run one after another on their own engine, each as late as it can while finishing before the
node that needs it (and never before its copy out is done); memory is taken again when the copy
in starts. A copy in that finishes late stalls the compute until it is done; the copies are
timed on the stall-free clock, so the iteration is late by the largest such lateness. On a CPU
there is no separate device memory, so a swap plan is simulated only, at a bandwidth the caller
sets.

The time model: the plan's iteration time is the profiled whole step, plus its replay blocks'
profiled node times scaled by how much the per-node timer overstates the whole step (it times
each node from Python), plus the swap stall.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from torch import fx

from fwbench.families.memory.liveness import (
    KINDS,
    Closure,
    GraphAnalysis,
    recompute_closure,
    replay_call,
)
from fwbench.families.memory.profiler import Profile


@dataclass
class _ReplayBlock:
    activation: str
    before_rank: int  # the block runs right before this node (the first backward use)
    closure: Closure


@dataclass
class SwapWindow:
    activation: str
    nbytes: int
    out_start_ms: float
    out_done_ms: float
    in_start_ms: float
    in_done_ms: float
    needed_ms: float  # when its first backward use starts on the stall-free clock
    freed_rank: int  # the node that runs when the copy out completes
    back_rank: int  # the node that runs when the copy in starts

    @property
    def late_ms(self) -> float:
        return max(0.0, self.in_done_ms - self.needed_ms)


def _node_clock(analysis: GraphAnalysis, profile: Profile | None) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ms) of every node in execution order, from the profiled node times."""
    ms = np.array(
        [profile.node_ms.get(n.name, 0.0) if profile is not None else 0.0 for n in analysis.nodes]
    )
    end = np.cumsum(ms)
    return end - ms, end


def swap_schedule(
    analysis: GraphAnalysis,
    swap: Iterable[str],
    profile: Profile | None,
    bandwidth_bytes_per_ms: float,
) -> list[SwapWindow]:
    """When each swapped activation's copies run, on two copy engines beside the compute."""
    swap = list(swap)
    if not swap:
        return []
    if not bandwidth_bytes_per_ms or bandwidth_bytes_per_ms <= 0:
        raise ValueError("swapping needs a positive copy bandwidth")
    start, end = _node_clock(analysis, profile)
    acts = [analysis.activations[n] for n in swap]

    def rank_at(t: float) -> int:
        # the node running at time t: the first whose end is past t (the last node at the end)
        return int(min(np.searchsorted(end, t, side="right"), len(end) - 1))

    out = {}
    engine_free = 0.0
    for act in sorted(acts, key=lambda a: (a.last_forward_use, a.name)):
        begin = max(float(end[act.last_forward_use]), engine_free)
        engine_free = begin + act.nbytes / bandwidth_bytes_per_ms
        out[act.name] = (begin, engine_free)
    # copies in: latest first, each ending by its need and by the next copy's start
    latest = {}
    next_start = float("inf")
    for act in sorted(acts, key=lambda a: (a.first_backward_use, a.name), reverse=True):
        done = min(float(start[act.first_backward_use]), next_start)
        latest[act.name] = done - act.nbytes / bandwidth_bytes_per_ms
        next_start = latest[act.name]
    windows = []
    engine_free = 0.0
    for act in sorted(acts, key=lambda a: (a.first_backward_use, a.name)):
        duration = act.nbytes / bandwidth_bytes_per_ms
        begin = max(latest[act.name], out[act.name][1], engine_free)
        engine_free = begin + duration
        windows.append(
            SwapWindow(
                act.name,
                act.nbytes,
                out[act.name][0],
                out[act.name][1],
                begin,
                engine_free,
                float(start[act.first_backward_use]),
                max(rank_at(out[act.name][1]), act.last_forward_use),
                min(rank_at(begin), act.first_backward_use),
            )
        )
    return windows


def predicted_iteration_ms(sim: Simulation, profile: Profile) -> float:
    """The time model: the profiled whole step plus the plan's replay time, corrected for the
    per-node timer's overhead, plus the swap stall."""
    scale = profile.step_ms / profile.iteration_ms if profile.iteration_ms > 0 else 1.0
    return profile.step_ms + scale * sim.replay_ms + sim.swap_stall_ms


# The storage kinds as the five-part memory breakdown names them; buffers (batch-norm statistics)
# are the model's own state, so they count with the parameters.
PART_OF_KIND = {
    "PARAM": "params",
    "BUFFER": "params",
    "OPT_STATE": "optimizer state",
    "GRAD": "gradients",
    "ACT": "activations",
    "OTHER": "other",
}


@dataclass
class Simulation:
    labels: list[str]  # node names in execution order; replayed nodes as "name@recompute"
    ranks: np.ndarray  # the original rank each position runs at or just before
    total: np.ndarray  # bytes while each position runs
    by_kind: dict[str, np.ndarray]  # live bytes per storage kind before each position runs
    peak_bytes: int
    peak_index: int
    replay_ms: float  # profiled time of the replayed nodes
    swap_stall_ms: float = 0.0  # compute waiting for copies in
    swaps: list[SwapWindow] = field(default_factory=list)

    @property
    def added_ms(self) -> float:
        """Time the plan adds to an iteration, in profiled node time."""
        return self.replay_ms + self.swap_stall_ms

    def breakdown_at_peak(self) -> dict[str, int]:
        """Bytes per kind at the peak; what the running node adds is counted as OTHER."""
        parts = {k: int(v[self.peak_index]) for k, v in self.by_kind.items()}
        parts["OTHER"] += int(self.total[self.peak_index]) - sum(parts.values())
        return parts

    def parts_at_peak(self) -> dict[str, int]:
        """Bytes at the peak in the five-part breakdown: parameters (with buffers), gradients,
        optimizer state, activations and other (every part present, zero where nothing is)."""
        parts = dict.fromkeys(PART_OF_KIND.values(), 0)
        for kind, nbytes in self.breakdown_at_peak().items():
            parts[PART_OF_KIND[kind]] += nbytes
        return parts


def repeated_replay_ms(sim: Simulation, profile: Profile) -> float:
    """Profiled time of the replayed nodes that run more than once: each recomputed activation
    replays its own closure just before its first backward use, so a node that two closures
    share runs once for each (where ``torch.utils.checkpoint`` replays a block's forward once for
    every activation in it). The plan's replay time less that of its distinct nodes."""
    replayed = {n.removesuffix("@recompute") for n in sim.labels if n.endswith("@recompute")}
    distinct_ms = sum(profile.node_ms.get(name, 0.0) for name in replayed)
    return max(sim.replay_ms - distinct_ms, 0.0)


def _input_nodes(args, kwargs) -> list[fx.Node]:
    found: list[fx.Node] = []
    fx.node.map_arg((args, kwargs), found.append)
    return found


def replay_schedule(analysis: GraphAnalysis, plan: Iterable[str]) -> list[_ReplayBlock]:
    """Replay blocks for ``plan`` in the order the rewritten graph runs them."""
    plan = set(plan)
    retained = set(analysis.activations) - plan
    blocks = []
    for name in plan:
        act = analysis.activations[name]
        closure = recompute_closure(analysis, name, retained)
        if closure.blocker is not None:
            raise ValueError(f"activation {name} cannot be recomputed: {closure.blocker}")
        blocks.append(_ReplayBlock(name, act.first_backward_use, closure))
    blocks.sort(key=lambda b: (b.before_rank, analysis.activations[b.activation].created))
    return blocks


def _node_increment(analysis: GraphAnalysis, profile: Profile | None) -> np.ndarray:
    names = [n.name for n in analysis.nodes]
    if profile is not None and profile.node_peak_bytes:
        return np.array(
            [
                max(profile.node_peak_bytes.get(n, 0) - profile.node_active_bytes.get(n, 0), 0)
                for n in names
            ],
            dtype=np.int64,
        )
    increment = np.zeros(len(names), dtype=np.int64)
    for s in analysis.storages.values():
        if s.created >= 0:
            increment[s.created] += s.nbytes
    return increment


def simulate(
    analysis: GraphAnalysis,
    plan: Iterable[str] = (),
    profile: Profile | None = None,
    *,
    swap: Iterable[str] = (),
    bandwidth_bytes_per_ms: float | None = None,
) -> Simulation:
    """Memory at every position of the step under a plan that recomputes ``plan`` and swaps
    ``swap`` (at ``bandwidth_bytes_per_ms`` each way)."""
    plan, swap = list(plan), list(swap)
    both = set(plan) & set(swap)
    if both:
        raise ValueError(f"an activation is either recomputed or swapped, not both: {sorted(both)}")
    blocks = replay_schedule(analysis, plan)
    windows = swap_schedule(analysis, swap, profile, bandwidth_bytes_per_ms)
    swapped = {w.activation: w for w in windows}
    increment = _node_increment(analysis, profile)
    node_ms = profile.node_ms if profile is not None else {}

    # Positions: the original nodes at integer ranks, replayed nodes in between.
    pos_rank, pos_key, labels, pos_increment = [], [], [], []
    for n in analysis.nodes:
        r = analysis.info[n.name].rank
        pos_rank.append(r)
        pos_key.append((r, 0))
        labels.append(n.name)
        pos_increment.append(increment[r])
    replay_pos: list[dict[str, tuple[int, int]]] = []
    seq = 0
    added_ms = 0.0
    for block in blocks:
        where = {}
        for n in block.closure.nodes:
            seq += 1
            key = (block.before_rank, -1_000_000 + seq)  # sorts right before the backward use
            where[n.name] = key
            pos_rank.append(block.before_rank)
            pos_key.append(key)
            labels.append(f"{n.name}@recompute")
            pos_increment.append(increment[analysis.info[n.name].rank])
            added_ms += node_ms.get(n.name, 0.0)
        replay_pos.append(where)

    order = sorted(range(len(pos_key)), key=pos_key.__getitem__)
    keys = [pos_key[i] for i in order]
    index_of = {k: i for i, k in enumerate(keys)}
    n_pos = len(keys)

    intervals: list[tuple[int, int, int, str]] = []  # (start index, last index, bytes, kind)
    last_index = n_pos - 1
    extended: dict[str, int] = {}
    for block, where in zip(blocks, replay_pos, strict=True):
        block_nodes = block.closure.nodes
        for n in block_nodes:
            # what the replay reads, which is not always what the forward node read: a replayed
            # empty_like takes its layout from the trace, not from its input
            _, args, kwargs = replay_call(n, replay_random=True)
            for a in _input_nodes(args, kwargs):
                owner = analysis.info[a.name].owner
                if a.name in where or owner is None:
                    continue
                extended[owner] = max(extended.get(owner, -1), index_of[where[n.name]])
        owned = {}
        for n in block_nodes:
            owner = analysis.info[n.name].owner
            if owner is not None and owner in where and owner not in owned:
                owned[owner] = index_of[where[owner]]
        for owner, start in owned.items():
            if owner == block.activation:
                end = index_of[(analysis.activations[owner].last_backward_use, 0)]
            else:
                users = [
                    index_of[where[u.name]]
                    for n in block_nodes
                    if analysis.info[n.name].owner == owner
                    for u in n.users
                    if u.name in where
                ]
                end = max([start, *users])
            intervals.append((start, end, analysis.storages[owner].nbytes, "ACT"))

    planned = {b.activation for b in blocks}
    for s in analysis.storages.values():
        if s.created < 0:
            start, end = -1, last_index
        else:
            start = index_of[(s.created, 0)]
            last = s.last_use
            if s.owner in planned:
                last = analysis.activations[s.owner].last_forward_use
            elif s.owner in swapped:
                last = swapped[s.owner].freed_rank
            end = max(index_of[(last, 0)], extended.get(s.owner, -1))
            if s.owner in swapped:
                back = index_of[(swapped[s.owner].back_rank, 0)]
                if back > end:  # out and back in: live again from the copy in's start
                    intervals.append((back - 1, index_of[(s.last_use, 0)], s.nbytes, s.kind))
                else:  # the copy in starts before the copy out completes: never away
                    end = index_of[(s.last_use, 0)]
        intervals.append((start, end, s.nbytes, s.kind))

    by_kind = {}
    for kind in KINDS:
        diff = np.zeros(n_pos + 1, dtype=np.int64)
        for start, end, nbytes, k in intervals:
            if k == kind:
                # live before a position once created at an earlier one, until its last reader ran
                diff[start + 1] += nbytes
                diff[end + 1] -= nbytes
        by_kind[kind] = np.cumsum(diff)[:n_pos]
    live_before = sum(by_kind.values())
    total = live_before + np.array([pos_increment[i] for i in order], dtype=np.int64)
    peak_index = int(np.argmax(total))
    return Simulation(
        labels=[labels[i] for i in order],
        ranks=np.array([pos_rank[i] for i in order]),
        total=total,
        by_kind=by_kind,
        peak_bytes=int(total[peak_index]),
        peak_index=peak_index,
        replay_ms=added_ms,
        swap_stall_ms=max([0.0, *(w.late_ms for w in windows)]),
        swaps=windows,
    )
