"""The rewritten graph must train exactly like the original, and save the memory it predicts."""

import pytest
import torch

from fwbench.families.memory import (
    footprint,
    liveness,
    planner,
    profiler,
    rewriter,
    simulator,
    tracer,
)
from fwbench.families.memory.cases import build_case
from fwbench.measure.timing import StopRule

ONE_STEP = StopRule(min_iters=1, min_seconds=0.0)


def traced_case(name, batch_size, **kwargs):
    case = build_case(name, batch_size, num_classes=10, **kwargs)
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    return traced, liveness.analyze(traced)


def test_resnet50_recomputing_all_but_convolutions_keeps_the_step_identical():
    traced, found = traced_case("resnet50", 2, image_size=32)
    forward = found.nodes[: found.backward_start]
    # torchvision's in-place ReLU and residual add were made out of place for the analysis
    # (only num_batches_tracked, a graph input, is still updated in place)
    inplace = [n for n in forward if str(n.target) in ("aten.relu_.default", "aten.add_.Tensor")]
    assert inplace and all(n.args[0].op == "placeholder" for n in inplace)
    # Keep the convolution outputs and recompute everything else (batch norm, ReLU, residual
    # adds): short replays, and every batch norm is replayed without its running statistics.
    plan = [
        n
        for n, a in found.activations.items()
        if a.recomputable and "convolution" not in str(found.node(n).target)
    ]
    assert len(plan) > 100
    rewritten = rewriter.rewrite(traced.graph_module, found, plan)
    result = rewriter.check_equivalence(traced, rewritten)
    assert result.equal, result.max_abs_diff

    # the replay really runs: more batch-norm calls, the originals' outputs die in the forward
    def count(gm):
        return sum("native_batch_norm.default" in str(n.target) for n in gm.graph.nodes)

    assert count(rewritten) > count(traced.graph_module)


@pytest.fixture(scope="module")
def encoder_plan():
    traced, found = traced_case("bert_encoder", 4, seq_len=64, encoder_size="tiny")
    prof = profiler.profile_graph(traced.graph_module, traced.inputs, found, warmup=0, iters=1)
    baseline = simulator.simulate(found, (), prof)
    budget = planner.budget_for_fraction(found, baseline.peak_bytes, 0.5)
    plan = planner.plan_recomputation(found, prof, budget)
    rewritten = rewriter.rewrite(traced.graph_module, found, plan.recompute)
    return traced, found, baseline, plan, rewritten


def test_encoder_plan_is_equivalent(encoder_plan):
    traced, found, _, plan, rewritten = encoder_plan
    assert plan.recompute and plan.met_budget
    result = rewriter.check_equivalence(traced, rewritten, seed=3)
    assert result.equal, result.max_abs_diff


def test_replayed_dropout_draws_the_masks_of_the_forward_pass():
    traced, found = traced_case("bert_encoder", 2, seq_len=16, encoder_size="tiny")
    masks = [n for n, a in found.activations.items() if a.from_random_op]
    assert masks and all(found.activations[n].recomputable for n in masks)
    rewritten = rewriter.rewrite(traced.graph_module, found, masks)
    names = [n.name for n in rewritten.graph.nodes]
    assert sum(n.endswith(rewriter.RNG_SUFFIX) for n in names) == len(masks)
    # the masks are drawn anew in the backward pass: an equal step means equal masks
    result = rewriter.check_equivalence(traced, rewritten, seed=5, rtol=0.0, atol=0.0)
    assert result.equal, result.max_abs_diff
    # and the generator is put back: the step leaves it where the original step does
    torch.manual_seed(7)
    traced.run([t.detach().clone() for t in traced.inputs], traced.graph_module)
    after_original = torch.rand(4)
    torch.manual_seed(7)
    traced.run([t.detach().clone() for t in traced.inputs], rewritten)
    assert torch.equal(torch.rand(4), after_original)


def test_encoder_plan_cuts_measured_peak_as_simulated(encoder_plan):
    traced, _, baseline, plan, rewritten = encoder_plan
    original = footprint.measure_graph("graph", traced, traced.graph_module, "cpu", ONE_STEP)
    planned = footprint.measure_graph("mu_two", traced, rewritten, "cpu", ONE_STEP)
    assert planned.peak_bytes < 0.85 * original.peak_bytes
    assert abs(baseline.peak_bytes - original.peak_bytes) <= 0.10 * original.peak_bytes
    assert abs(plan.predicted_peak_bytes - planned.peak_bytes) <= 0.10 * planned.peak_bytes


def test_static_simulation_without_profile_is_within_ten_percent():
    # the static model alone (output bytes, no measured kernel workspaces) must land within 10%
    # of what the allocator saw on an activation-heavy step
    traced, found = traced_case("bert_encoder", 8, seq_len=64, encoder_size="tiny")
    predicted = simulator.simulate(found).peak_bytes
    measured = footprint.measure_graph("graph", traced, traced.graph_module, "cpu", ONE_STEP)
    assert abs(predicted - measured.peak_bytes) <= 0.10 * measured.peak_bytes
