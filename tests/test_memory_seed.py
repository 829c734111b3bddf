"""The seed's scale in small: BERT with its mask through the whole-step tracer, swap on a graph
whose timings are set by hand, the checkpointing baselines and the budget curve."""

import json
import math
import mmap

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from fwbench.families.memory import (
    footprint,
    liveness,
    memory_records,
    planner,
    profiler,
    rewriter,
    simulator,
    study,
    tracer,
)
from fwbench.families.memory.cases import (
    ENCODER_CONFIGS,
    IGNORE,
    MaskedLM,
    build_case,
    masked_lm_batch,
)
from fwbench.measure.timing import StopRule
from fwbench.vocab import MEMORY_COMPILED_KINDS


def _trace(case):
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    return traced, liveness.analyze(traced)


def _targets(graph):
    return {str(n.target) for n in graph.nodes if n.op == "call_function"}


def test_bert_step_traces_with_embedding_mask_and_loss_and_no_scalar_readback():
    case = build_case("bert", 2, seq_len=16, encoder_size="tiny")
    assert (case.batch[:, 1] == 0).any(), "the batch should hold padding for the mask to matter"
    assert (case.targets == IGNORE).any() and (case.targets != IGNORE).any()
    traced, found = _trace(case)
    ops = _targets(traced.graph_module.graph)
    assert "aten.embedding.default" in ops
    assert not ops & {"aten._local_scalar_dense.default", "aten.item.default"}
    assert found.activations and found.forward_end < found.backward_start


def test_bert_traced_step_computes_the_eager_loss_and_the_mask_matters():
    torch.manual_seed(0)
    layers, hidden, heads, ff, vocab = ENCODER_CONFIGS["tiny"]
    model = MaskedLM(layers, hidden, heads, ff, vocab, dropout=0.0).double()
    batch, targets = masked_lm_batch(2, 16, vocab, torch.Generator().manual_seed(1))

    def loss_fn(logits, y):
        return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE)

    eager = loss_fn(model(batch), targets).item()
    traced = tracer.trace_training_step(model, batch, targets, loss_fn)
    loss, _ = traced.run([t.clone() for t in traced.inputs])
    assert abs(loss.item() - eager) <= 1e-12
    # unmasking the padding changes the loss of the real tokens
    unmasked = batch.clone()
    unmasked[:, 1] = 1
    assert abs(loss_fn(model(unmasked), targets).item() - eager) > 1e-6


@pytest.mark.parametrize(
    "seq_len, fraction, bandwidth",
    [(64, 0.1, None), (16, 0.3, 12e6)],
    ids=["recompute", "recompute-and-swap"],
)
def test_bert_plans_are_exact_in_float64(seq_len, fraction, bandwidth):
    shape = {"seq_len": seq_len, "encoder_size": "tiny"}
    case = build_case("bert", 4, **shape)
    traced, found = _trace(case)
    prof = profiler.profile_graph(traced.graph_module, traced.inputs, found, warmup=0, iters=1)
    base = simulator.simulate(found, (), prof)
    budget = planner.budget_for_fraction(found, base.peak_bytes, fraction)
    plan = planner.plan_recomputation(found, prof, budget, swap_bandwidth_bytes_per_ms=bandwidth)
    assert plan.swap if bandwidth else plan.recompute
    (check,) = study.exact_equivalence("bert", 2, shape, {"plan": plan}).values()
    assert check.equal and max(check.max_abs_diff.values()) <= study.EXACT_TOLERANCE


# --- swap on a hand-timed graph ------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU())
    model.append(nn.Linear(256, 8))
    # a batch large enough that activations, not the optimizer, make the peak
    x, y = torch.randn(1024, 64), torch.randint(0, 8, (1024,))
    traced = tracer.trace_training_step(model, x, y, nn.functional.cross_entropy)
    found = liveness.analyze(traced)
    # every node takes 1 ms and adds nothing beyond its outputs: the clock is the rank
    prof = profiler.Profile("cpu", 1, {n.name: 1.0 for n in found.nodes}, {}, {}, 0, step_ms=0)
    prof.step_ms = prof.iteration_ms
    act = max(
        (a for a in found.activations.values() if a.first_backward_use - a.last_forward_use > 4),
        key=lambda a: (a.nbytes, a.name),
    )
    return found, prof, act


def test_swap_that_hides_behind_compute_frees_its_bytes_between_the_copies(mlp):
    found, prof, act = mlp
    gap = act.first_backward_use - act.last_forward_use - 1  # ms of compute between the uses
    bandwidth = act.nbytes / (gap / 4)  # each copy takes a quarter of the gap
    (window,) = simulator.swap_schedule(found, [act.name], prof, bandwidth)
    copy_ms = gap / 4
    assert window.out_start_ms == pytest.approx(act.last_forward_use + 1)
    assert window.out_done_ms == pytest.approx(act.last_forward_use + 1 + copy_ms)
    assert window.in_done_ms == pytest.approx(act.first_backward_use)  # as late as it can
    assert window.in_start_ms == pytest.approx(act.first_backward_use - copy_ms)
    assert window.late_ms == 0.0
    base = simulator.simulate(found, (), prof)
    swapped = simulator.simulate(found, (), prof, swap=[act.name], bandwidth_bytes_per_ms=bandwidth)
    assert swapped.swap_stall_ms == 0.0 and swapped.added_ms == 0.0
    away = [
        i
        for i, r in enumerate(swapped.ranks)
        if window.freed_rank < r < window.back_rank - 1 and "@" not in swapped.labels[i]
    ]
    assert away
    assert all(base.by_kind["ACT"][i] - swapped.by_kind["ACT"][i] == act.nbytes for i in away)
    # outside the window it is in memory as before
    assert (
        base.by_kind["ACT"][act.first_backward_use]
        == swapped.by_kind["ACT"][act.first_backward_use]
    )


def test_swap_slower_than_the_gap_stalls_by_the_hand_computed_lateness(mlp):
    found, prof, act = mlp
    gap = act.first_backward_use - act.last_forward_use - 1
    copy_ms = gap  # each copy as long as the whole gap: the copy in cannot finish in time
    (window,) = simulator.swap_schedule(found, [act.name], prof, act.nbytes / copy_ms)
    # out from t = lfu + 1 to lfu + 1 + gap = fbu; in from then, done gap later
    assert window.in_start_ms == pytest.approx(act.first_backward_use)
    assert window.late_ms == pytest.approx(copy_ms)
    sim = simulator.simulate(
        found, (), prof, swap=[act.name], bandwidth_bytes_per_ms=act.nbytes / copy_ms
    )
    assert sim.swap_stall_ms == pytest.approx(copy_ms)
    assert simulator.predicted_iteration_ms(sim, prof) == pytest.approx(prof.iteration_ms + copy_ms)


def test_an_activation_is_recomputed_or_swapped_not_both(mlp):
    found, prof, act = mlp
    with pytest.raises(ValueError, match="not both"):
        simulator.simulate(found, [act.name], prof, swap=[act.name], bandwidth_bytes_per_ms=1e9)


def test_planner_swaps_what_hides_and_recomputes_when_copies_are_slow(mlp):
    found, prof, _ = mlp
    base = simulator.simulate(found, (), prof)
    budget = planner.budget_for_fraction(found, base.peak_bytes, 0.2)
    fast = planner.plan_recomputation(found, prof, budget, swap_bandwidth_bytes_per_ms=1e12)
    assert fast.swap and fast.simulation.swap_stall_ms == 0.0
    assert all(fast.decision(n) == "swapped" for n in fast.swap)
    slow = planner.plan_recomputation(found, prof, budget, swap_bandwidth_bytes_per_ms=1.0)
    assert not slow.swap and slow.recompute
    plain = planner.plan_recomputation(found, prof, budget)
    assert slow.recompute == plain.recompute


# --- the checkpointing baselines and the curve ------------------------------------------


def test_checkpoint_segments_run_the_same_step_and_restore_the_blocks():
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(5)]
    model = nn.Sequential(*blocks).double()
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    reference = torch.autograd.grad(model(x).sum(), [x, *model.parameters()])
    for size in (1, 2, 4, 5):
        with footprint.checkpoint_segments(blocks, size):
            starts = [i for i, b in enumerate(blocks) if "forward" in vars(b)]
            assert starts == list(range(5))  # every block is patched: a start or a passthrough
            grads = torch.autograd.grad(model(x).sum(), [x, *model.parameters()])
        assert all(torch.equal(a, b) for a, b in zip(reference, grads, strict=True))
        assert not any("forward" in vars(b) for b in blocks)
    with pytest.raises(ValueError):
        with footprint.checkpoint_segments(blocks, 0):
            pass


def test_sqrt_n_segments_and_method_names():
    assert footprint.sqrt_n_segment(50) == 7  # ResNet-152's 50 bottlenecks
    assert footprint.sqrt_n_segment(12) == round(math.sqrt(12)) == 3  # BERT-base's layers
    assert footprint.sqrt_n_segment(1) == 1
    assert footprint.checkpoint_method(2) == "checkpoint_every_2"
    assert footprint.checkpoint_method(None) == "checkpoint_sqrt_n"
    assert study.method_kind("mu_two@0.3") == ("mu_two", 0.3)
    assert study.method_kind("compiled_mu_two@0.5") == ("compiled_mu_two", 0.5)
    assert study.method_kind("mu_two_swap@0.1") == ("mu_two_swap", 0.1)
    assert study.method_kind("compile_budget_0.5") == ("compile_budget", 0.5)
    assert study.method_kind("checkpoint_sqrt_n") == ("checkpoint", None)
    assert study.method_kind("none") == ("none", None)
    assert study.method_kind(study.COMPILED_GRAPH_METHOD) == ("compiled_graph", None)


def test_lower_budgets_never_plan_a_higher_peak(mlp):
    found, prof, _ = mlp
    base = simulator.simulate(found, (), prof)
    fractions = [0.9, 0.7, 0.5, 0.3, 0.1]
    budgets = [planner.budget_for_fraction(found, base.peak_bytes, f) for f in fractions]
    assert budgets == sorted(budgets, reverse=True)
    plans = [planner.plan_recomputation(found, prof, b) for b in budgets]
    peaks = [p.predicted_peak_bytes for p in plans]
    added = [p.added_ms for p in plans]
    assert peaks == sorted(peaks, reverse=True) and added == sorted(added)
    for plan, budget in zip(plans, budgets, strict=True):
        assert plan.met_budget == (plan.predicted_peak_bytes <= budget)
    # a greedy prefix: each plan extends the one for the next higher budget
    for higher, lower in zip(plans, plans[1:], strict=False):
        assert lower.recompute[: len(higher.recompute)] == higher.recompute


def test_best_within_the_overhead_goal_picks_per_kind():
    frame = pd.DataFrame(
        [
            {
                "kind": "mu_two",
                "method": "mu_two@0.1",
                "overhead_pct": 60.0,
                "measured": True,
                "activation_saved_pct": 80.0,
            },
            {
                "kind": "mu_two",
                "method": "mu_two@0.5",
                "overhead_pct": 10.0,
                "measured": True,
                "activation_saved_pct": 55.0,
            },
            {
                "kind": "checkpoint",
                "method": "checkpoint_every_1",
                "overhead_pct": 40.0,
                "measured": True,
                "activation_saved_pct": 70.0,
            },
            {
                "kind": "mu_two_swap",
                "method": "mu_two_swap@0.1",
                "overhead_pct": 0.0,
                "measured": False,
                "activation_saved_pct": 90.0,
            },
        ]
    )
    from fwbench.families.memory import memory_curve

    best = memory_curve.best_within(frame, overhead_pct=33.0)
    assert best["mu_two"].method == "mu_two@0.5"
    assert best["checkpoint"] is None
    assert "mu_two_swap" not in best  # simulated rows never count as measured savings


# --- the report's curve ----------------------------------------------------------------------


def _curve_meas():
    """Three trials of a model at one batch size: the eager step, two plan budgets and two
    checkpoint segmentings, with trial-to-trial noise shared by every method of a trial."""
    rows = []
    methods = {
        # mode: (kind, budget, peak MiB, time ms, activation saved %)
        "none": ("none", None, 1000, 100.0, 0.0),
        "mu_two@0.5": ("mu_two", 0.5, 700, 110.0, 60.0),
        "mu_two@0.1": ("mu_two", 0.1, 500, 150.0, 100.0),
        "checkpoint_every_1": ("checkpoint", None, 600, 140.0, 80.0),
        "checkpoint_every_4": ("checkpoint", None, 800, 135.0, 40.0),
    }
    for trial, noise in ((1, 1.00), (2, 1.05), (3, 1 / 1.05)):  # geometric mean 1
        for mode, (kind, budget, peak, ms, saved) in methods.items():
            extra = {"method": kind} | ({"budget": budget} if budget is not None else {})
            for metric, value in (
                ("iter_time_ms", ms * noise),
                ("peak_mem_bytes", peak * 2**20),
                ("activation_saved_pct", saved),
            ):
                rows.append(_record(mode, trial, metric, value, extra))
    return pd.DataFrame(rows)


def _record(mode, trial, metric, value, extra, shared=False):
    """One memory record of ResNet-152 at batch 8, the cell every curve test uses."""
    return {
        "family": "memory",
        "status": "ok",
        "model": "resnet152",
        "batch_size": 8,
        "device_name": "cpu X",
        "mode": mode,
        "trial": trial,
        "metric": metric,
        "value": value,
        "extra": extra,
        "shared_machine": shared,
    }


def test_curve_table_pairs_trials_and_states_the_goal_and_the_curves():
    from fwbench.families.memory import memory_curve, memory_curve_words

    table = memory_curve.curve_table(_curve_meas()).set_index("method")
    # the shared trial noise cancels in the paired overhead: exactly +10%, a zero-width interval
    assert table.loc["mu_two@0.5", "overhead_pct"] == pytest.approx(10.0)
    assert table.loc["mu_two@0.5", "overhead_low"] == pytest.approx(10.0)
    assert table.loc["mu_two@0.5", "rounds"] == 3
    # the time itself keeps the spread between trials
    assert table.loc["none", "time_low"] < 100.0 < table.loc["none", "time_high"]
    text = " ".join(memory_curve_words.sentences(table.reset_index()))
    assert "the μ-TWO plan saves 60.0% of the activation memory at +10.0%" in text
    assert "meets the 50% goal" in text
    # +40% and +35%, each with a zero-width interval over the trials: both shown beyond +33%
    assert "torch.utils.checkpoint: every point's time interval lies above +33%" in text
    # checkpoint_every_4 (800 MiB, 135 ms): the μ-TWO plan reaches 700 MiB in 110 ms -> below it; the
    # trials' shared noise cancels trial by trial, so the paired interval has no width
    assert (
        "at checkpoint_every_4's peak of 800 MiB the μ-TWO plan takes 110 ms against its 135 ms "
        "(ours/its 0.815 [0.815, 0.815] over 3 paired trials): the μ-TWO curve lies below it"
        in text
    )
    # checkpoint_every_1 (600 MiB, 140 ms): the μ-TWO plan needs 150 ms to get under 600 MiB -> above
    assert (
        "at checkpoint_every_1's peak of 600 MiB the μ-TWO plan takes 150 ms against its 140 ms "
        "(ours/its 1.071 [1.071, 1.071] over 3 paired trials): the μ-TWO curve lies above it"
        in text
    )
    memory_curve.curve_chart(table.reset_index()).to_dict()


def test_the_curves_meet_where_the_paired_trials_cannot_tell_them_apart():
    from fwbench.families.memory import memory_curve, memory_curve_words

    meas = _curve_meas()
    # checkpoint_every_4 takes 135 ms a trial; our 110 ms point now swings about it, trial by
    # trial: faster in two trials, slower in the third
    swing = {1: 100.0, 2: 105.0, 3: 160.0}
    hit = (meas["mode"] == "mu_two@0.5") & (meas.metric == "iter_time_ms")
    meas.loc[hit, "value"] = [swing[t] for t in meas[hit].trial]
    table = memory_curve.curve_table(meas)
    text = " ".join(memory_curve_words.sentences(table))
    assert (
        "at checkpoint_every_4's peak of 800 MiB the μ-TWO plan takes 119 ms against its 135 ms "
        "(ours/its 0." in text
    )
    assert "over 3 paired trials): the trials do not tell the two apart, so the curves" in text
    # one trial: no interval, and two point estimates of one process decide nothing
    one = memory_curve.curve_table(_curve_meas().query("trial == 1"))
    text = " ".join(memory_curve_words.sentences(one))
    assert (
        "the μ-TWO plan takes 110 ms against its 135 ms (one trial in common, no interval): one trial "
        "does not place the μ-TWO curve against it" in text
    )
    assert "the μ-TWO curve lies" not in text
    # a kind that did not run is said to be not run, not to have missed the time goal; one
    # trial's overhead (the notebook's own record) is said to have no interval
    alone = _curve_meas().query("trial == 1 and not mode.str.startswith('checkpoint')")
    extra = {"method": "mu_two", "budget": 0.5}
    alone.loc[len(alone)] = _record("mu_two@0.5", 1, "overhead_pct", 10.0, extra)
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(alone)))
    assert "torch.utils.checkpoint: not run." in text and "lies above +33%" not in text
    # +10% in one trial, 60% saved: without an interval the goal stays undecided
    assert (
        "at +10.0% time (one trial: no interval) (mu_two@0.5; the 50% goal undecided: no "
        "interval on its time; its budget sets the saving, so only the time is tested)" in text
    )


def test_the_overhead_counts_a_trial_without_a_contention_reading_as_quiet():
    """Three trials without a reading (runs from before it was recorded) and a fourth on a shared
    machine, where the plan took twice the eager step: the overhead pairs the three quiet trials
    and leaves the shared one out, as every other count of the table reads a missing reading."""
    from fwbench.families.memory import memory_curve

    meas = _curve_meas().assign(shared_machine=np.nan)
    fourth = [
        _record(mode, 4, "iter_time_ms", ms, {"method": kind}, shared=True)
        for mode, kind, ms in (("none", "none", 100.0), ("mu_two@0.5", "mu_two", 200.0))
    ]
    meas = pd.concat([meas, pd.DataFrame(fourth)], ignore_index=True)
    row = memory_curve.curve_table(meas).set_index("method").loc["mu_two@0.5"]
    assert row.rounds == 3
    assert row.overhead_pct == pytest.approx(10.0)
    assert row.shared_trials == 1


def test_curve_table_ignores_records_without_a_method_kind():
    from fwbench.families.memory import memory_curve

    meas = _curve_meas().assign(extra=[{}] * len(_curve_meas()))
    assert memory_curve.curve_table(meas).empty


def _part_meas():
    """The peak's parts of two BERT cells (sequence 128 at batch 4 and 32, sequence 512 at
    batch 4), for the unplanned graph and two plan budgets, over two trials."""
    rows = []
    cells = {
        "batch_sizes=4-32__model=bert__seq_len=128": (4, 32),
        "batch_sizes=4__model=bert__seq_len=512": (4,),
    }
    for cell, batches in cells.items():
        for batch in batches:
            acts = 10 * batch * (4 if "512" in cell else 1)
            methods = {"graph": (None, acts), "mu_two@0.5": (0.5, acts / 2)}
            methods["mu_two@0.3"] = (0.3, acts * 0.3)
            for trial in (1, 2):
                for mode, (budget, act_mib) in methods.items():
                    kind = "graph" if budget is None else "mu_two"
                    extra = {"method": kind} | ({"budget": budget} if budget else {})
                    parts = {"params": 400, "gradients": 400, "optimizer state": 0}
                    parts |= {"activations": act_mib + trial - 1, "other": 5}
                    for part, mib in parts.items():
                        record = _record(mode, trial, "peak_part_bytes", mib * 2**20, extra)
                        record["extra"] = extra | {"part": part, "peak_source": "simulator"}
                        rows.append(record | {"model": "bert", "batch_size": batch, "cell": cell})
    return pd.DataFrame(rows)


def test_the_peak_breakdown_shows_the_unplanned_step_and_the_tightest_plan_per_batch():
    from fwbench.families.memory import memory_breakdown

    table = memory_breakdown.breakdown_table(_part_meas())
    # the two cells differ in their sequence length only, which names them
    assert set(table.label) == {"BERT (masked LM) (seq_len 128)", "BERT (masked LM) (seq_len 512)"}
    plans = table.groupby("plan").method.unique()
    assert list(plans["no plan"]) == ["graph"] and list(plans["tightest μ-TWO plan"]) == [
        "mu_two@0.3"
    ]
    long = table[(table.label.str.contains("128")) & (table.batch_size == 32)]
    acts = long[long.part == "activations"].set_index("plan").MiB
    # the median over the two trials (320 and 321 MiB)
    assert acts["no plan"] == pytest.approx(320.5)
    assert acts["tightest μ-TWO plan"] == pytest.approx(96.5)
    wide = memory_breakdown.peak_shares(table).set_index(["label", "batch_size", "plan"])
    row = wide.loc[("BERT (masked LM) (seq_len 128)", 32, "no plan")]
    assert row.peak_MiB == pytest.approx(400 + 400 + 320.5 + 5)
    assert row.activation_share_pct == pytest.approx(100 * 320.5 / row.peak_MiB)
    text = " ".join(memory_breakdown.breakdown_sentences(table))
    assert (
        "(seq_len 128) on cpu X: the unplanned step peaks at 846 MiB at batch 4, 5% of it "
        "activations, and at 1,126 MiB at batch 32, 28% of it activations; at batch 32 the "
        "tightest μ-TWO plan (mu_two@0.3) peaks at 902 MiB, 96 MiB of it activations" in text
    )
    assert "(seq_len 512) on cpu X: the unplanned step peaks at 966 MiB at batch 4, 17%" in text
    memory_breakdown.parts_chart(table).to_dict()  # a valid Vega-Lite spec


def test_the_peak_parts_stay_out_of_the_per_mode_table_and_runs_without_them_show_none():
    from fwbench.families.memory import memory_breakdown, memory_report
    from fwbench.publish.outline import Analysis

    before = _curve_meas()
    assert memory_breakdown.breakdown_table(before).empty
    meas = pd.concat([before, _part_meas()], ignore_index=True)
    meas = meas.assign(framework="torch", precision="fp32")
    empty = pd.DataFrame()
    analysis = Analysis("c", "r", "", meas, empty, {}, empty, empty, {}, empty)
    assert "peak_part_bytes" not in memory_report.methods(analysis).columns
    assert not memory_report.breakdown(analysis).empty


def test_each_trial_measures_the_methods_in_another_order():
    from fwbench.families.memory import footprint

    assert footprint.rotated(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert footprint.rotated([], 1) == []
    shape = {"encoder_size": "tiny", "seq_len": 16}
    rule = StopRule(min_iters=1, min_seconds=0.0)
    kwargs = dict(fractions=[0.5], rule=rule, checkpoint_every=[1], exact_check=False, **shape)
    first = study.run_batch("bert", 2, rotation=0, **kwargs)
    second = study.run_batch("bert", 2, rotation=1, **kwargs)
    assert [m.method for m in first.measurements] == [
        "graph",
        "mu_two@0.5",
        "none",
        "checkpoint_every_1",
    ]
    # on the CPU an odd trial starts with the eager methods, each list rotated by one
    assert [m.method for m in second.measurements] == [
        "checkpoint_every_1",
        "none",
        "mu_two@0.5",
        "graph",
    ]
    # the order changes what runs when, not what the unplanned methods hold at their peaks
    unplanned = ("graph", "none", "checkpoint_every_1")
    peaks = [{m.method: m.peak_bytes for m in r.measurements} for r in (first, second)]
    assert [peaks[0][m] for m in unplanned] == [peaks[1][m] for m in unplanned]


def test_interleaved_rounds_run_every_method_once_per_round_in_rotated_order():
    from fwbench.families.memory import footprint

    ran = []
    steps = {name: (lambda name=name: ran.append(name)) for name in ("graph", "a", "b")}
    faults = {}
    readings = []
    times = footprint.interleaved_rounds(
        steps, 3, "cpu", rotation=1, faults=faults, contention=readings
    )
    assert ran == ["a", "b", "graph", "b", "graph", "a", "graph", "a", "b"]
    # one reading of the machine per round (None where a round was too short to tell)
    assert len(readings) == 3
    assert all(r is None or {"steal_frac", "shared"} <= set(r) for r in readings)
    assert {k: len(v) for k, v in times.items()} == {"graph": 3, "a": 3, "b": 3}
    assert {k: len(v) for k, v in faults.items()} == {"graph": 3, "a": 3, "b": 3}

    # a step that touches 64 MiB of fresh pages faults: 16,384 times in 4 KiB pages, and still
    # 32 times where transparent huge pages back it with 2 MiB ones. The pages are mapped by the
    # step itself: a tensor's may come from memory malloc kept from earlier tests, already touched
    def touch():
        pages = mmap.mmap(-1, 64 * 2**20)
        view = np.frombuffer(pages, dtype=np.uint8)
        view[:] = 1
        del view
        pages.close()

    fresh = footprint.interleaved_rounds({"touch": touch}, 1, "cpu", faults=(touched := {}))
    assert fresh["touch"][0] > 0 and touched["touch"][0] >= 16
    with pytest.raises(ValueError, match="at least one round"):
        footprint.interleaved_rounds(steps, 0, "cpu")


def test_time_check_compares_predicted_and_measured_multiples_of_the_graph():
    """A plan that replays 50 ms of profiled nodes on a 200 ms profiled step is predicted at
    1.25x the graph; rounds that measured it at 1.2x, 1.3x and 1.25x give a median of 1.25x, so
    the model's error is 0 however far the profile's window sat from the rounds'."""
    from types import SimpleNamespace

    prof = profiler.Profile("cpu", 1, {"x": 100.0, "y": 100.0}, {}, {}, 0, step_ms=200.0)
    baseline = SimpleNamespace(replay_ms=0.0, swap_stall_ms=0.0)
    plan = SimpleNamespace(replay_ms=50.0, swap_stall_ms=0.0)
    graph_ms = [300.0, 320.0, 310.0]  # the machine ran 50% slower than in the profile
    plan_ms = [g * k for g, k in zip(graph_ms, (1.2, 1.3, 1.25), strict=True)]
    r = SimpleNamespace(
        profile=prof,
        baseline=baseline,
        round_ms={"graph": graph_ms, "mu_two@0.5": plan_ms},
        round_faults={"graph": [9, 9, 9], "mu_two@0.5": [5, 5, 5]},
        round_contention=[
            None,
            {"shared": True, "steal_frac": 0.3},
            {"shared": False, "steal_frac": 0.0},
        ],
    )
    block = {"p50": 1.0}
    graph = SimpleNamespace(method="graph", summary=block)
    found = memory_records._time_check(
        r, SimpleNamespace(method="mu_two@0.5", summary=block), graph, plan
    )
    assert found["predicted_multiple"] == pytest.approx(1.25)
    assert found["measured_multiple"] == pytest.approx(1.25)
    assert found["sim_time_error_pct"] == pytest.approx(0.0, abs=1e-9)
    assert found["predicted_iter_ms"] == pytest.approx(310.0 * 1.25)
    assert found["time_check_source"] == "interleaved rounds"
    assert found["time_diagnosis"]["minor_faults"] == [5, 5, 5]
    assert found["time_diagnosis"]["graph_round_ms"] == graph_ms
    assert found["time_diagnosis"]["round_shared"] == [False, True, False]
    assert found["time_diagnosis"]["round_steal"] == [None, 0.3, 0.0]
    on_graph = memory_records._time_check(r, graph, graph, baseline)
    assert on_graph["profile_drift_pct"] == pytest.approx(100 * (200 / 310 - 1))
    assert "sim_time_error_pct" not in on_graph
    # without rounds, the methods' own timings stand in, and the record says so
    r.round_ms = {}
    graph.summary = {"p50": 200.0}
    own = memory_records._time_check(
        r, SimpleNamespace(method="mu_two@0.5", summary={"p50": 260.0}), graph, plan
    )
    assert own["measured_multiple"] == pytest.approx(1.3)
    assert own["time_check_source"] == "each method's own timing"


def test_curve_table_checks_the_time_model_on_quiet_trials_only():
    from fwbench.families.memory import memory_curve, memory_curve_words

    meas = _curve_meas()
    extra = {"method": "mu_two", "budget": 0.5, "timed_by": "interleaved rounds"}
    for trial, error, shared in ((1, 2.0, False), (2, -3.0, False), (3, 40.0, True)):
        meas = pd.concat(
            [
                meas,
                pd.DataFrame(
                    [
                        _record("mu_two@0.5", trial, metric, value, extra, shared)
                        for metric, value in (
                            ("sim_time_error_pct", error),
                            ("sim_peak_error_pct", 0.5),
                        )
                    ]
                ),
            ],
            ignore_index=True,
        )
    table = memory_curve.curve_table(meas).set_index("method")
    row = table.loc["mu_two@0.5"]
    assert row.sim_time_error_pct == pytest.approx(-0.5)  # median of 2 and -3; 40 was shared
    assert row.sim_time_worst_pct == pytest.approx(3.0)
    assert row.quiet_time_trials == 2
    # the two quiet trials are the unit: +2% and -3% give -0.5% with a t-interval on one degree
    # of freedom, far wider than the 5% bar, however small each trial's error
    assert row.time_error_mean_pct == pytest.approx(-0.5)
    assert row.time_error_high_pct == pytest.approx(-0.5 + 12.7062 * 2.5, abs=1e-3)
    assert json.loads(row.time_trial_errors_pct) == [2.0, -3.0]
    text = " ".join(memory_curve_words.sentences(table.reset_index()))
    assert "multiple of the unplanned graph's" in text
    assert "-0.5% [-32.3%, +31.3%] at mu_two@0.5 over 2 trials (+2.0%, -3.0%)" in text
    assert "0 of 1 graphs have their interval inside ±5%; each within 5%: not shown" in text


def test_one_trial_without_rounds_leaves_the_time_bar_undecided():
    from fwbench.families.memory import memory_curve, memory_curve_words

    # memory_breakdown's shape: one trial, one timed step a method, no interleaved rounds
    extra = {"method": "mu_two", "budget": 0.5, "timed_by": "each method's own timing"}
    rows = [
        _record("mu_two@0.5", 1, metric, value, extra, False)
        for metric, value in (("sim_time_error_pct", 17.0), ("sim_peak_error_pct", 0.01))
    ]
    meas = pd.concat([_curve_meas(), pd.DataFrame(rows)], ignore_index=True)
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(meas)))
    assert "17.0% in the worst single trial)" in text
    assert "1 of 1 graphs have one quiet trial: no interval" in text
    assert "each within 5%: not shown" in text and "each within 5%: no." not in text


def test_an_unchecked_time_leaves_the_verdict_to_the_peak_and_says_so():
    from fwbench.families.memory import memory_curve, memory_curve_words

    # every trial that timed the plan ran on a shared machine: only the peak was checked
    extra = {"method": "mu_two", "budget": 0.5, "timed_by": "interleaved rounds"}
    rows = [
        _record("mu_two@0.5", trial, metric, value, extra, True)
        for trial in (1, 2)
        for metric, value in (("sim_time_error_pct", 2.0), ("sim_peak_error_pct", 0.5))
    ]
    meas = pd.concat([_curve_meas(), pd.DataFrame(rows)], ignore_index=True)
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(meas)))
    assert "no quiet trial checked the time; the peak within 5%: yes." in text
    assert "each within 5%" not in text


# --- swap in the rewriter ------------------------------------------------------------------


def test_swap_rewrite_is_exact_in_float64_and_frees_the_forward_tensor():
    """BERT's dropout outputs cannot be recomputed (a replay would draw new masks) but can be
    swapped: a plan that swaps them and recomputes others computes the same step, and no backward
    node reads a swapped activation's forward tensor or its views any more."""
    shape = {"seq_len": 16, "encoder_size": "tiny"}
    case = build_case("bert", 2, dtype=torch.float64, **shape)
    traced, found = _trace(case)
    prof = profiler.profile_graph(traced.graph_module, traced.inputs, found, warmup=0, iters=1)
    base = simulator.simulate(found, (), prof)
    random_acts = [a.name for a in found.activations.values() if a.from_random_op]
    # and activations whose backward readers are views of them: the views are rebuilt on the copy
    viewed = [
        a.name
        for a in found.activations.values()
        if not a.from_random_op and found.backward_aliases.get(a.name, []) != [found.node(a.name)]
    ]
    assert random_acts and viewed
    # and an output of a multi-output op that only the backward reads (layer norm's statistics):
    # its op runs one node before the getitem that holds it
    picked = [
        a.name
        for a in found.activations.values()
        if found.info[a.name].rank > a.last_forward_use and not a.from_random_op
    ]
    assert picked
    swapped = [*random_acts, *viewed[:3], *[p for p in picked[:2] if p not in viewed[:3]]]
    swaps = simulator.swap_schedule(found, swapped, prof, 1e6)
    plan = planner.plan_recomputation(
        found, prof, planner.budget_for_fraction(found, base.peak_bytes, 0.5)
    )
    recompute = [a for a in plan.recompute if a not in swapped]
    rewritten = rewriter.rewrite(traced.graph_module, found, recompute, swaps)
    names = {n.name: n for n in rewritten.graph.nodes}
    for act in swapped:
        assert {act + s for s in ("_swap_out", "_swap_in", "_swap_wait")} <= set(names)
        forward = {n.name for n in found.backward_aliases.get(act, [])} | {act}
        readers = [u for f in forward if f in names for u in names[f].users]
        assert all(u.name.endswith("_swap_out") or not _in_backward(found, u) for u in readers)
    assert any(name.endswith("_view") for name in names)
    check = rewriter.check_equivalence(traced, rewritten, rtol=0.0, atol=study.EXACT_TOLERANCE)
    assert check.equal and max(check.max_abs_diff.values()) <= study.EXACT_TOLERANCE


def _in_backward(found, node) -> bool:
    if node.name.endswith(rewriter.REPLAY_SUFFIX):  # replays run in the backward pass
        return True
    info = found.info.get(node.name)
    return info is not None and info.rank >= found.backward_start


def _timed_meas(predicted: float, plan_rounds: dict[int, list[float]]):
    """_curve_meas plus one planned graph's time check: per trial the predicted multiple and the
    interleaved rounds (the graph at 100 ms in each round); trial 3 ran on a shared machine."""
    meas = _curve_meas()
    rows = []
    for trial, rounds in plan_rounds.items():
        extra = {
            "method": "mu_two",
            "budget": 0.5,
            "timed_by": "interleaved rounds",
            "round_ms": rounds,
            "graph_round_ms": [100.0] * len(rounds),
            "allocator": "jemalloc",
        }
        measured = float(np.median(rounds)) / 100
        for metric, value in (
            ("predicted_multiple", predicted),
            ("measured_multiple", measured),
            ("sim_time_error_pct", 100 * (predicted / measured - 1)),
            ("sim_peak_error_pct", 0.5),
        ):
            rows.append(_record("mu_two@0.5", trial, metric, value, extra, trial == 3))
    return pd.concat([meas, pd.DataFrame(rows)], ignore_index=True)


def test_the_time_error_takes_one_value_per_quiet_trial_with_an_interval_over_trials():
    from fwbench.families.memory import memory_curve, memory_curve_words

    # every round 100 ms against the graph's 100: measured 1.0, predicted 1.1, +10% in each of
    # the two quiet trials, so the interval over trials has no width and lies beyond the bar;
    # the shared trial's slow rounds are left out
    meas = _timed_meas(1.1, {1: [100.0] * 3, 2: [100.0] * 3, 3: [200.0] * 3})
    row = memory_curve.curve_table(meas).set_index("method").loc["mu_two@0.5"]
    assert row.time_error_mean_pct == pytest.approx(10.0)
    assert row.time_error_low_pct == pytest.approx(10.0)
    assert row.time_error_trials == 2
    assert "time_error_pooled_pct" not in row.index and "time_rounds_pooled" not in row.index
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(meas)))
    assert "the interval reaching farthest is +10.0% [+10.0%, +10.0%] at mu_two@0.5" in text
    assert "each within 5%: no" in text
    assert "the steps' malloc: jemalloc" in text

    # rounds spread both ways: each trial's median is close to the prediction (errors 0% and
    # -1.0%), but two trials give a t-interval on one degree of freedom: [-6.8%, +5.8%]
    meas = _timed_meas(1.0, {1: [92.0, 100.0, 108.0], 2: [95.0, 104.0, 101.0]})
    row = memory_curve.curve_table(meas).set_index("method").loc["mu_two@0.5"]
    assert json.loads(row.time_trial_errors_pct) == pytest.approx([0.0, -0.9901], abs=1e-4)
    assert row.time_error_low_pct == pytest.approx(-6.785, abs=1e-3)
    assert row.time_error_high_pct == pytest.approx(5.795, abs=1e-3)
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(meas)))
    assert "0 of 1 graphs have their interval inside ±5%; each within 5%: not shown" in text


def test_trials_on_two_allocators_name_each_allocator_once():
    from fwbench.families.memory import memory_curve, memory_curve_words

    meas = _timed_meas(1.1, {1: [100.0] * 3, 2: [100.0] * 3})
    first = meas.trial.eq(1) & meas["mode"].eq("mu_two@0.5")
    meas.loc[first, "extra"] = [{**e, "allocator": "glibc"} for e in meas.loc[first, "extra"]]
    table = memory_curve.curve_table(meas).set_index("method")
    assert table.loc["mu_two@0.5", "allocator"] == "glibc, jemalloc"
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(meas)))
    assert "the steps' malloc: glibc and jemalloc." in text


def test_a_round_the_machine_was_shared_in_is_left_out_of_its_trials_error():
    from fwbench.families.memory import memory_curve, memory_curve_words

    # two rounds of the quiet trial 1 ran beside a burst of stolen time: 300 ms against 100, so
    # the trial's median round reads the plan three times the graph
    meas = _timed_meas(1.1, {1: [100.0, 300.0, 300.0], 2: [100.0] * 3})
    row = memory_curve.curve_table(meas).set_index("method").loc["mu_two@0.5"]
    assert json.loads(row.time_trial_errors_pct)[0] == pytest.approx(100 * (1.1 / 3 - 1))
    first = meas[(meas.trial == 1) & (meas.metric == "measured_multiple")].index[0]
    meas.at[first, "extra"] = {**meas.at[first, "extra"], "round_shared": [False, True, True]}
    row = memory_curve.curve_table(meas).set_index("method").loc["mu_two@0.5"]
    assert json.loads(row.time_trial_errors_pct) == pytest.approx([10.0, 10.0])
    assert (row.time_error_trials, row.time_rounds_shared) == (2, 2)
    text = " ".join(memory_curve_words.sentences(memory_curve.curve_table(meas)))
    assert (
        "(each quiet trial's error from its own rounds, 2 rounds on a shared machine left out;"
        in text
    )


def test_a_baseline_below_our_whole_curve_is_called_above_it_with_the_plans_reasons():
    from fwbench.families.memory import memory_curve, memory_curve_words

    rows = []
    methods = {
        # mode: (kind, budget, peak MiB, time ms, metrics of the plan)
        "none": ("none", None, 1000, 100.0, {}),
        "mu_two@0.2": (
            "mu_two",
            0.2,
            600,
            160.0,
            {
                "predicted_multiple": 1.50,
                "measured_multiple": 1.52,
                "sim_time_error_pct": None,  # per trial, below
                "replay_ms": 4000.0,
                "replay_repeat_pct": 45.0,
            },
        ),
        "checkpoint_every_1": ("checkpoint", None, 550, 130.0, {}),
        "checkpoint_every_4": ("checkpoint", None, 580, 170.0, {}),
    }

    def sentences_with(errors):
        """The cell's sentences with the time model's error in each trial."""
        for row in rows:
            if row["metric"] == "sim_time_error_pct":
                row["value"] = errors[row["trial"] - 1]
        return " ".join(memory_curve_words.sentences(memory_curve.curve_table(pd.DataFrame(rows))))

    for trial, noise in ((1, 1.00), (2, 1.05), (3, 1 / 1.05)):
        for mode, (kind, budget, peak, ms, metrics) in methods.items():
            extra = {"method": kind} | ({"budget": budget} if budget is not None else {})
            values = {
                "iter_time_ms": ms * noise,
                "peak_mem_bytes": peak * 2**20,
                "activation_saved_pct": 100.0 * (1000 - peak) / 500,
            } | metrics
            rows += [_record(mode, trial, m, v, extra) for m, v in values.items()]
    # -1.0, -1.5 and -2.0% over three trials: [-2.7%, -0.3%], inside the bar
    text = sentences_with([-1.0, -1.5, -2.0])
    assert (
        "checkpoint_every_1 reaches 550 MiB in 130 ms: less memory than the μ-TWO plan's lowest point "
        "(mu_two@0.2: 600 MiB in 160 ms), in less time (ours/its 1.231 [1.231, 1.231] over 3 "
        "paired trials): the μ-TWO curve lies above it; why: the time model foresaw the cost (1.50× "
        "the unplanned graph predicted for mu_two@0.2, 1.52× measured; its error over trials "
        "-1.5% [-2.7%, -0.3%] over 3 trials (-1.0%, -1.5%, -2.0%), inside ±5%)" in text
    )
    assert "mu_two@0.2 replays 4,000 ms of profiled forward nodes, 45% of it on nodes" in text
    # slower than our lowest point as well: the curves do not meet, and no reason is owed
    assert "checkpoint_every_4 reaches 580 MiB, below every peak the μ-TWO plan reached" in text
    # a model that missed in every trial: the cost lies partly outside it
    text = sentences_with([-21.0, -20.5, -21.5])
    assert "why: part of the cost lies outside the time model (" in text
    assert "[-22.2%, -19.8%] over 3 trials (-21.0%, -20.5%, -21.5%), beyond ±5%)" in text
    # small errors on average, but one trial far off: the trials cannot tell
    text = sentences_with([-5.95, 1.64, -0.41])
    assert "why: the trials do not show whether the time model foresaw the cost" in text
    assert "why: the time model foresaw" not in text and "outside the time model" not in text


def test_a_compiled_plan_is_read_against_the_traced_step_compiled_whole():
    from fwbench.families.memory import memory_curve, memory_curve_words

    rows = []
    methods = {
        # mode: (kind, budget, peak MiB, time ms)
        "none": ("none", None, 1000, 100.0),
        "mu_two@0.5": ("mu_two", 0.5, 700, 110.0),
        "compiled_graph": ("compiled_graph", None, 1400, 80.0),
        "compiled_mu_two@0.5": ("compiled_mu_two", 0.5, 1260, 85.0),
        "compile_budget_1.0": ("compile_budget", 1.0, 1100, 75.0),
        "compile_budget_0.5": ("compile_budget", 0.5, 1300, 90.0),
    }
    for trial, noise in ((1, 1.00), (2, 1.05), (3, 1 / 1.05)):
        for mode, (kind, budget, peak, ms) in methods.items():
            extra = {"method": kind} | ({"budget": budget} if budget is not None else {})
            values = {
                "iter_time_ms": ms * noise,
                "peak_mem_bytes": peak * 2**20,
                "activation_saved_pct": (1000 - peak) / 5,
            }
            if mode == "compiled_graph":
                values["compiled_graphs"] = 1
            if mode == "compiled_mu_two@0.5":
                values |= {"compiled_graphs": 17, "random_replays": 8}
            rows += [_record(mode, trial, m, v, extra) for m, v in values.items()]
    table = memory_curve.curve_table(pd.DataFrame(rows))
    assert set(table[table.mode_group == "compiled"].method) == {
        "compiled_graph",
        "compiled_mu_two@0.5",
        "compile_budget_1.0",
        "compile_budget_0.5",
    }
    text = " ".join(memory_curve_words.sentences(table))
    assert (
        "the μ-TWO plan at budget 0.5 peaks at 700 MiB run eagerly and 1260 MiB compiled; the same "
        "traced step without a plan, compiled, peaks at 1400 MiB, so compiled the plan changes "
        "the peak by -10.0% (the model compiled without a budget: 1100 MiB); compiled into 17 "
        "graphs where the unplanned step made 1, its plan running 8 replays of a random op" in text
    )
    assert "reorder_for_locality" not in text  # the pass ran, as by default
    off = pd.DataFrame(rows)
    off["extra"] = [
        e | {"inductor_locality": False} if e["method"] in MEMORY_COMPILED_KINDS else e
        for e in off.extra
    ]
    without = " ".join(memory_curve_words.sentences(memory_curve.curve_table(off)))
    assert "every compilation ran with Inductor's reorder_for_locality pass off" in without
    # the compiled curve starts at the unplanned compiled step: at 1300 MiB the plan's 1260 MiB
    # point is reached in 85 ms, faster than the baseline's 90
    assert (
        "at compile_budget_0.5's peak of 1300 MiB the μ-TWO plan takes 85 ms against its 90 ms "
        "(ours/its 0.944 [0.944, 0.944] over 3 paired trials): the μ-TWO curve lies below it"
        in text
    )


def test_random_replays_count_the_dropout_masks_a_plan_draws_again():
    from fwbench.families.memory import rewriter

    case = build_case("bert", 4, seq_len=32, encoder_size="tiny")
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    counts = {}
    for replay in (False, True):
        found = liveness.analyze(traced, replay_random=replay)
        prof = profiler.profile_graph(traced.graph_module, traced.inputs, found, warmup=0, iters=1)
        base = simulator.simulate(found, (), prof)
        budget = planner.budget_for_fraction(found, base.peak_bytes, 0.1)
        plan = planner.plan_recomputation(found, prof, budget)
        rewritten = rewriter.rewrite(traced.graph_module, found, plan.recompute)
        counts[replay] = rewriter.random_replays(rewritten)
    assert counts[False] == 0  # a plan that may not replay masks keeps them all
    # at a tenth of the activations it has to replay some, and each recomputed activation replays
    # its own closure, so a mask can be drawn again more than once
    assert counts[True] > 0


def test_compile_locality_reaches_every_compilation_the_baselines_included():
    """With ``compile_locality`` off, Inductor's reorder_for_locality pass is off when each of
    them compiles: the unplanned traced step, the plan and the model under an activation memory
    budget, so the compiled curve compares like with like. Read by a backend at compile time."""
    import torch._inductor.config as inductor_config

    seen = []

    def backend(gm, example_inputs):
        seen.append(inductor_config.reorder_for_locality)
        return gm.forward

    rule = StopRule(min_iters=1, min_seconds=0.0)
    result = study.run_batch(
        "bert",
        2,
        fractions=[0.5],
        rule=rule,
        encoder_size="tiny",
        seq_len=16,
        checkpoint_every=[],
        compile_budgets=[1.0],
        compile_fractions=[0.5],
        compile_graph=True,
        compile_backend=backend,
        compile_locality=False,
        exact_check=False,
        time_rounds=0,
    )
    assert {"compiled_graph", "compiled_mu_two@0.5", "compile_budget_1.0"} <= {
        m.method for m in result.measurements
    }
    assert seen and not any(seen)
    assert inductor_config.reorder_for_locality  # put back afterwards
    summary = memory_records.summary_frame([result]).set_index("method")
    assert summary.inductor_locality["compile_budget_1.0"] is False
    assert summary.inductor_locality["none"] is None
