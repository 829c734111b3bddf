"""μ-TWO Algorithms E and F on hand-made statistics, and the random-op exclusion."""

import pytest
import torch
from torch import nn

from fwbench.families.memory import liveness, planner, profiler, simulator, tracer
from fwbench.families.memory.profiler import ActivationStats


def stats(name, srcs, time, size=100):
    return ActivationStats(name, size, 0.0, set(srcs), time, 0, total_recomp_time=time)


def test_algorithm_e_existing_recomputations_inherit_the_new_one():
    recomps = {"a": stats("a", {"b", "param"}, 2.0), "x": stats("x", {"param"}, 1.0)}
    chosen = stats("b", {"c"}, 3.0)
    count = planner.update_recomps(chosen, recomps)
    assert count == 2  # replayed for itself and inside a's replay
    assert recomps["a"].recomp_srcs == {"param", "c"} and recomps["a"].recomp_time == 5.0
    assert recomps["x"].recomp_srcs == {"param"} and recomps["x"].recomp_time == 1.0


def test_algorithm_f_candidates_inherit_sources_and_count_replays():
    recomps = {"a": stats("a", {"d", "param"}, 2.0)}
    chosen = stats("b", {"c"}, 3.0)
    candidates = {"d": stats("d", {"b"}, 1.0, size=400), "c": stats("c", {"param"}, 4.0)}
    planner.update_candidates(chosen, 2, candidates, recomps)
    d, c = candidates["d"], candidates["c"]
    assert d.recomp_srcs == {"c"} and d.recomp_time == 4.0
    assert d.total_recomp_time == 8.0  # once for itself, once inside a's replay
    assert d.recompute_ratio == pytest.approx(400 / 8.0)
    assert c.total_recomp_time == 8.0  # b's sources are replayed once per replay of b


@pytest.fixture(scope="module")
def dropout_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.5), nn.GELU(), nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    traced = tracer.trace_training_step(model, x, y, nn.functional.cross_entropy)
    return traced, liveness.analyze(traced)


def test_dropout_masks_are_replayed_from_the_generator_state_or_ruled_out(dropout_step):
    traced, found = dropout_step
    random = [a for a in found.activations.values() if a.from_random_op]
    assert random, "the dropout mask should be an activation"
    # replayed: the closure draws the mask again (bernoulli_ on a fresh tensor, not on the input)
    assert all(a.recomputable for a in random)
    (block,) = simulator.replay_schedule(found, [random[0].name])
    assert [str(n.target) for n in block.closure.random_nodes] == ["aten.bernoulli_.float"]
    assert "empty_like" in " ".join(str(n.target) for n in block.closure.nodes)
    assert random[0].name not in block.closure.sources
    # without replaying random ops, the masks are never candidates
    strict = liveness.analyze(traced, replay_random=False)
    masks = [a for a in strict.activations.values() if a.from_random_op]
    assert masks and all(not a.recomputable and "bernoulli" in a.reason for a in masks)
    assert any(a.recomputable for a in strict.activations.values())
    with pytest.raises(ValueError, match="cannot be recomputed"):
        simulator.replay_schedule(strict, [masks[0].name])


def test_budget_fraction_and_static_simulation_of_a_plan(dropout_step):
    _, found = dropout_step
    base = simulator.simulate(found)
    assert planner.budget_for_fraction(found, base.peak_bytes, 1.0) == base.peak_bytes
    half = planner.budget_for_fraction(found, base.peak_bytes, 0.5)
    assert half == base.peak_bytes - found.activation_bytes() // 2
    # recomputing the GELU output frees it between its last forward and first backward use
    gelu = next(n for n, a in found.activations.items() if n.startswith("gelu"))
    planned = simulator.simulate(found, [gelu])
    act = found.activations[gelu]
    idle = [
        i
        for i, r in enumerate(planned.ranks)
        if act.last_forward_use < r < act.first_backward_use and "@" not in planned.labels[i]
    ]
    assert idle
    drop = base.by_kind["ACT"][idle[0] + 0] - planned.by_kind["ACT"][idle[0]]
    assert drop == act.nbytes


def test_the_peak_parts_name_every_byte_of_the_peak(dropout_step):
    _, found = dropout_step
    sim = simulator.simulate(found)
    parts = sim.parts_at_peak()
    assert list(parts) == ["params", "optimizer state", "gradients", "activations", "other"]
    assert sum(parts.values()) == sim.peak_bytes
    kinds = sim.breakdown_at_peak()
    # buffers are the model's own state: they count with the parameters
    assert parts["params"] == kinds["PARAM"] + kinds["BUFFER"]
    traced = dropout_step[0]
    weights = sum(
        t.numel() * t.element_size()
        for t, kind in zip(traced.inputs, traced.input_kinds, strict=True)
        if kind == "PARAM"
    )
    # the model's 16*32 + 32 + 32*4 + 4 weights in float32, all alive through the step
    assert kinds["PARAM"] == weights == 4 * (16 * 32 + 32 + 32 * 4 + 4)


def test_repeated_replay_counts_the_nodes_two_closures_share(dropout_step):
    _, found = dropout_step
    # every node takes its rank + 1 ms, so a sum of times names the nodes summed
    prof = profiler.Profile(
        "cpu", 1, {n.name: found.info[n.name].rank + 1.0 for n in found.nodes}, {}, {}, 0
    )
    acts = [a for a in found.activations.values() if a.recomputable]
    pair = None
    for a in acts:  # an activation whose replay runs through another recomputed one
        for b in acts:
            if a.name == b.name:
                continue
            retained = set(found.activations) - {a.name, b.name}
            ca = liveness.recompute_closure(found, a.name, retained)
            cb = liveness.recompute_closure(found, b.name, retained)
            shared = {n.name for n in ca.nodes} & {n.name for n in cb.nodes}
            if shared and ca.blocker is None and cb.blocker is None:
                pair = a.name, b.name, shared
    assert pair, "the chain of linear, dropout and GELU should give two closures a common node"
    a, b, shared = pair
    alone = simulator.simulate(found, [a], prof)
    assert alone.replay_ms > 0 and simulator.repeated_replay_ms(alone, prof) == 0.0
    both = simulator.simulate(found, [a, b], prof)
    expected = sum(found.info[n].rank + 1.0 for n in shared)
    assert simulator.repeated_replay_ms(both, prof) == pytest.approx(expected)
    assert simulator.repeated_replay_ms(simulator.simulate(found, [], prof), prof) == 0.0
