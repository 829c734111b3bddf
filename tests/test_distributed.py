"""The distributed family: where a worker finds its place, the batches and shards, the scaling
arithmetic on known numbers, and, on real processes, every strategy against the one-process
reference in float64 (the parity the notebook records)."""

import functools
import threading
import time

import numpy as np
import pandas as pd
import pytest

from fwbench.families.distributed import scaling
from fwbench.families.distributed.job import (
    Job,
    bus_bandwidth,
    global_batch,
    place_from,
    shard_rows,
)
from fwbench.families.distributed.launch import DistributedRunError, launch
from fwbench.families.distributed.worker import collective_seconds

# ResNet-18 rather than a MobileNet: XLA compiles its float64 step in half the time (41 s against
# 81 s for JAX data parallel on two cores), which is most of what these tests cost
CNN = dict(
    model="resnet18",
    image_size=96,
    batch_per_worker=2,
    steps=3,
    warmup=0,
    precision="fp64",
    compute_only=False,
)
TOLERANCE = 1e-9
# data parallelism also times its gradients' all-reduce alone, after its compute-only steps
TIMED = ("ddp", "dp_fused")


def test_a_worker_finds_its_place_from_flags_then_torchrun_then_slurm():
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "4"}
    assert place_from(env={}) == (0, 1, None)
    assert place_from(env=torchrun) == (1, 2, "10.0.0.1:29500")
    assert place_from(coordinator="n1:1234", env=slurm) == (1, 4, "n1:1234")
    # flags win over an enclosing job's variables (a kernel inside a Slurm allocation)
    assert place_from(0, 2, "127.0.0.1:5", env={**slurm, **torchrun}) == (0, 2, "127.0.0.1:5")
    with pytest.raises(ValueError, match="coordinator"):
        place_from(env=slurm)
    with pytest.raises(ValueError, match="outside"):
        place_from(3, 2, "h:1", env={})


def test_every_process_draws_the_same_batch_and_shards_cover_it():
    job = Job("torch", "ddp", 2, batch_per_worker=3, image_size=8)
    images, labels = global_batch(job, 5)
    again, _ = global_batch(job, 5)
    assert images.shape == (6, 3, 8, 8) and np.array_equal(images, again)
    assert not np.array_equal(images, global_batch(job, 6)[0])
    rows = [shard_rows(job, i) for i in range(2)]
    assert np.array_equal(np.concatenate([images[r] for r in rows]), images)
    # the one-process reference of two workers trains the same global batch
    reference = Job("torch", "none", 1, batch_per_worker=3, image_size=8, micro_batches=2)
    assert np.array_equal(global_batch(reference, 5)[0], images)


def test_jobs_a_framework_cannot_run_are_refused():
    with pytest.raises(ValueError, match="not a torch strategy"):
        Job("torch", "dp", 2).check()
    with pytest.raises(ValueError, match="CNN"):
        Job("jax", "tp", 2, model="resnet50").check()
    with pytest.raises(ValueError, match="world size 1"):
        Job("jax", "none", 2).check()


def test_bus_bandwidth_follows_nccl_tests():
    algbw, busbw = bus_bandwidth(8_000_000, 0.002, 4)
    assert algbw == pytest.approx(4e9) and busbw == pytest.approx(4e9 * 2 * 3 / 4)
    assert bus_bandwidth(1000, 1.0, 2) == pytest.approx((1000.0, 1000.0))
    assert scaling.message_sizes(1024, 65536) == [1024, 4096, 16384, 65536]


def test_step_summary_takes_the_slowest_rank_and_derives_overhead_and_efficiency():
    job2 = Job("torch", "ddp", 2, batch_per_worker=4)
    ranks = [
        {
            "step_s": [0.10, 0.30, 0.20],
            "compute_only_step_s": [0.05, 0.05, 0.05],
            "cpu_s": [0.1, 0.1, 0.1],
            "peak_rss_bytes": 10,
            "state_bytes": 5,
            "losses": [1.0],
        },
        {
            "step_s": [0.20, 0.10, 0.20],
            "compute_only_step_s": [0.10, 0.04, 0.05],
            "cpu_s": [0.3, 0.3, 0.3],
            "peak_rss_bytes": 20,
            "state_bytes": 4,
            "losses": [1.0],
        },
    ]
    at2 = scaling.summarize(job2, ranks)
    assert at2.step_samples_s == [0.2, 0.3, 0.2] and at2.step_s == pytest.approx(0.2)
    assert at2.compute_only_step_s == pytest.approx(0.05)
    assert at2.comm_overhead_frac == pytest.approx(0.75)
    assert at2.cpu_s_per_rank == pytest.approx(0.2)
    assert (at2.peak_rss_bytes, at2.state_bytes) == (20, 5)
    job1 = Job("torch", "ddp", 1, batch_per_worker=4)
    at1 = scaling.summarize(job1, [dict(ranks[0], step_s=[0.1, 0.1, 0.1])])
    # 8 images in 0.2 s against 4 in 0.1 s on one worker: half of perfect weak scaling
    assert scaling.scaling_efficiency(at2, at1) == pytest.approx(0.5)
    assert scaling.loss_parity_max_rel([1.0, 2.0], [1.0, 2.0 * (1 + 1e-12)]) < 1.1e-12


@pytest.fixture(scope="module")
def reference_losses(tmp_path_factory):
    """Both frameworks' one-process references of two workers, in float64."""
    out = tmp_path_factory.mktemp("reference")
    return {
        framework: launch(Job(framework, "none", 1, micro_batches=2, **CNN), out / framework)[0][
            "losses"
        ]
        for framework in ("torch", "jax")
    }


def test_the_two_frameworks_references_agree_in_float64(reference_losses):
    assert len(reference_losses["torch"]) == CNN["steps"]
    assert scaling.loss_parity_max_rel(reference_losses["jax"], reference_losses["torch"]) <= (
        TOLERANCE
    )


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """Each strategy's two ranks in float64, launched once for the tests that read them."""

    @functools.cache
    def ranks(framework, strategy):
        job = Job(framework, strategy, 2, **dict(CNN, compute_only=strategy in TIMED))
        return launch(job, tmp_path_factory.mktemp(f"{framework}_{strategy}"))

    return ranks


# PyTorch ddp and JAX dp also run across two nodes, in tests/test_slurm_nodes.py
@pytest.mark.parametrize(
    "framework, strategy",
    [("torch", "ddp"), ("torch", "fsdp"), ("jax", "dp_fused"), ("jax", "fsdp")],
)
def test_every_strategy_trains_the_reference_function_in_float64(
    framework, strategy, reference_losses, two_ranks
):
    timed = strategy in TIMED
    ranks = two_ranks(framework, strategy)
    assert [r["rank"] for r in ranks] == [0, 1]
    losses = ranks[0]["losses"]
    assert ranks[1]["losses"] == losses  # the global batch's loss, on every rank
    assert scaling.loss_parity_max_rel(losses, reference_losses[framework]) <= TOLERANCE
    # and the losses move: a run that never stepped would agree trivially
    assert losses[0] != losses[-1]
    if timed:
        summary = scaling.summarize(Job(framework, strategy, 2, **CNN), ranks)
        parts = summary.parts()
        assert summary.grad_allreduce_s > 0 and summary.grad_arrays > 1
        # ResNet-18's 11.2 M parameters in float64, whatever the number of arrays they are in
        assert 11e6 * 8 < summary.grad_bytes < 12e6 * 8
        assert sum(parts.values()) == pytest.approx(summary.step_s)


def test_a_step_parts_into_compute_its_all_reduce_and_the_rest_that_add_up():
    from fwbench.families.distributed.distributed_report import (
        parts_sentences,
        step_parts_table,
    )

    table = pd.DataFrame(
        {
            "model": ["m"] * 3,
            "framework": ["jax", "jax", "torch"],
            "strategy": ["dp", "dp", "ddp"],
            "precision": ["fp32"] * 3,
            "world_size": [1, 2, 2],
            "step_ms": [50.0, 80.0, 60.0],
            "compute_only_step_ms": [50.0, 52.0, 51.0],
            "grad_allreduce_ms": [float("nan"), 20.0, 15.0],
        }
    )
    parts = step_parts_table(table)
    assert list(parts.world_size) == [2, 2]  # one process has no all-reduce to part
    assert list(parts.rest_ms) == [8.0, -6.0]
    assert (parts.compute_ms + parts.grad_allreduce_ms + parts.rest_ms == parts.step_ms).all()
    first, second = parts_sentences(parts)
    assert first.endswith("80.0 ms a step = 52.0 ms compute + 20.0 ms the gradients' "
                          "all-reduce alone + 8.0 ms the rest.")  # fmt: skip
    assert second.endswith("− 6.0 ms overlapped.")
    assert step_parts_table(table.drop(columns="grad_allreduce_ms")).empty


def test_the_gap_to_ddp_is_parted_into_its_steps_parts_largest_first():
    from fwbench.families.distributed.distributed_report import gap_sentences

    parts = pd.DataFrame(
        {
            "model": ["m"] * 3,
            "framework": ["jax", "jax", "torch"],
            "strategy": ["dp", "dp_fused", "ddp"],
            "precision": ["fp32"] * 3,
            "world_size": [2, 2, 2],
            "step_ms": [160.0, 70.0, 60.0],
            "compute_ms": [60.0, 66.0, 50.0],
            "grad_allreduce_ms": [90.0, 6.0, 15.0],
            "rest_ms": [10.0, -2.0, -5.0],
        }
    )
    dp, fused = gap_sentences(parts)
    assert dp == (
        "On 2 processes (m, fp32), jax dp's step is 100.0 ms longer than torch ddp's: "
        "+75.0 ms the gradients' all-reduce (+75%), +15.0 ms the rest (+15%), "
        "+10.0 ms compute (+10%)."
    )
    # a part the fused step spends less on than DDP's counts against the gap
    assert "+16.0 ms compute (+160%), −9.0 ms the gradients' all-reduce (−90%)" in fused
    assert gap_sentences(parts[parts.framework == "jax"]) == []


def test_interleaved_trials_decide_step_time_comparisons_through_the_verdicts():
    from fwbench.families.distributed.distributed_report import (
        scaling_rounds,
        scaling_verdicts,
    )
    from fwbench.measure import verdicts

    rng = np.random.default_rng(3)
    arms = {("torch", "ddp"): 60.0, ("jax", "dp"): 90.0, ("jax", "dp_fused"): 70.0}
    rows = []
    for run in ("r1", "r2", "r3"):
        shift = rng.normal(0, 0.01)
        for trial in range(1, 5):
            for (framework, strategy), ms in arms.items():
                for n, scale in ((1, 0.5), (2, 1.0)):
                    rows.append(
                        {
                            "family": "distributed",
                            "metric": "step_ms",
                            "status": "ok",
                            "run_id": run,
                            "trial": trial,
                            "model": "m",
                            "framework": framework,
                            "precision": "fp32",
                            "value": ms * scale * np.exp(shift + rng.normal(0, 0.02)),
                            "extra": {"strategy": strategy, "world_size": n},
                        }
                    )
    meas = pd.DataFrame(rows)
    rounds = scaling_rounds(meas)
    assert len(rounds) == 3 * 4 * 3 * 2  # runs × trials × pairs × world sizes
    table = scaling_verdicts(rounds).set_index(["world_size", "a", "b"])
    fused = table.loc[(2, "jax dp", "jax dp_fused")]
    assert fused.design == "3 runs × 4 rounds" and fused.ci_low < 90 / 70 < fused.ci_high
    assert fused.verdict == "faster" and fused.faster == "jax dp_fused"
    assert table.loc[(2, "torch ddp", "jax dp")].faster == "torch ddp"
    # one run calls no winner; cells without trials give no rounds
    one = scaling_verdicts(scaling_rounds(meas[meas.run_id == "r1"]))
    assert set(one.verdict) == {verdicts.WITHIN_ONE_RUN}
    assert scaling_rounds(meas.assign(trial=None)).empty
    # the float64 gate's cell (trial 0, run once before the rounds) is no round
    gate = meas[meas.trial == 1].assign(trial=0, value=1e6)
    assert len(scaling_rounds(pd.concat([meas, gate], ignore_index=True))) == len(rounds)


def test_fsdp_holds_a_shard_of_the_state_ddp_holds_whole(two_ranks):
    ddp, fsdp = two_ranks("torch", "ddp"), two_ranks("torch", "fsdp")
    assert max(r["state_bytes"] for r in fsdp) < 0.6 * ddp[0]["state_bytes"]


def test_a_failing_rank_is_named_with_its_error(tmp_path):
    # a ViT whose image size is no multiple of its patch: every rank fails building it
    job = Job("torch", "ddp", 2, **dict(CNN, model="vit_b_16", image_size=40))
    with pytest.raises(DistributedRunError, match="rank 0"):
        launch(job, tmp_path, timeout=300)


class _ThreadRank:
    """One rank of a two-rank world made of threads: a real barrier and a real max over the
    ranks, with an operation whose duration differs by rank."""

    def __init__(self, rank, shared, barrier, seconds):
        self.rank, self.shared, self._barrier, self.seconds = rank, shared, barrier, seconds
        self.calls = 0

    def barrier(self):
        self._barrier.wait(timeout=10)

    def max_over_ranks(self, value):
        self.shared[self.rank] = value
        self.barrier()
        agreed = max(self.shared)
        self.barrier()  # nobody overwrites its slot before every rank has read both
        return agreed

    def op(self):
        self.calls += 1
        time.sleep(self.seconds)


def test_ranks_of_different_speed_time_the_same_number_of_collectives():
    # a rank deciding alone would stop after 10 calls of 10 ms while the other, at 30 ms, is at
    # 4: its next collective would meet nobody (a hang on gloo, a size mismatch elsewhere)
    shared, barrier = [0.0, 0.0], threading.Barrier(2)
    ranks = [_ThreadRank(0, shared, barrier, 0.01), _ThreadRank(1, shared, barrier, 0.03)]
    results = [None, None]

    def run(rank):
        results[rank.rank] = collective_seconds(rank, rank.op, 2, 0.1)

    threads = [threading.Thread(target=run, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not barrier.broken
    assert ranks[0].calls == ranks[1].calls >= 4
    assert results[0] < results[1]
