"""What one distributed run is, the batches it trains on, and where each worker learns its place.

A ``Job`` is written to JSON by the launcher and read by every worker, so that the workers of one
run cannot disagree about it. Its batches are a pure function of the seed and the step: every
worker draws the same global batch and keeps its own rows, and the one-process reference draws
the same batch and splits it into the same micro-batches.

Every strategy computes one function, the "ghost batch" one: the global batch is cut into shards
of ``batch_per_worker`` images, each shard is normalised by its own BatchNorm statistics, and the
loss is the mean over shards of each shard's mean cross-entropy. DDP computes exactly that (each
rank normalises its own shard); a one-process reference computes it by running the micro-batches
one after the other; the JAX strategies compute it shard by shard inside ``shard_map``. A jit over
the whole sharded batch would normalise over the global batch instead: the same code, another
function. Tensor parallelism splits the model, not the batch: every rank sees the whole global
batch, which only the ViT (no BatchNorm) trains.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fwbench import vocab

PRECISIONS = ("fp32", "fp64")
_PHASES = ("train", "allreduce")
# torchrun's variables, then Slurm's: a worker started by either finds its place without flags
_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_SLURM_ENV = ("SLURM_PROCID", "SLURM_NTASKS")


@dataclass(frozen=True)
class Job:
    framework: str
    strategy: str
    world_size: int
    model: str = "mobilenet_v3_small"
    image_size: int = 96
    batch_per_worker: int = 4
    steps: int = 10
    warmup: int = 2
    precision: str = "fp32"
    # the one-process reference ("none") trains the global batch of this many workers
    micro_batches: int = 1
    # also time each step without its collectives (see the workers)
    compute_only: bool = True
    seed: int = 0
    lr: float = 0.01
    num_classes: int = 10
    phase: str = "train"
    allreduce_bytes: tuple[int, ...] = field(default_factory=tuple)
    device: str = "cpu"

    def __post_init__(self):
        object.__setattr__(self, "allreduce_bytes", tuple(int(b) for b in self.allreduce_bytes))

    @property
    def shards(self) -> int:
        """How many ``batch_per_worker`` shards one step's global batch holds."""
        return self.world_size if self.strategy != "none" else self.micro_batches

    @property
    def global_batch(self) -> int:
        return self.batch_per_worker * self.shards

    def check(self) -> Job:
        """Raise ValueError naming the first thing wrong with this job."""
        strategies = ("none", *vocab.DISTRIBUTED_STRATEGIES.get(self.framework, ()))
        if self.framework not in vocab.FRAMEWORKS:
            raise ValueError(f"framework must be one of {vocab.FRAMEWORKS}, got {self.framework!r}")
        if self.strategy not in strategies:
            raise ValueError(
                f"strategy {self.strategy!r} is not a {self.framework} strategy; "
                f"choose from {strategies}"
            )
        if self.strategy == "none" and self.world_size != 1:
            raise ValueError("the one-process reference (strategy none) has world size 1")
        if self.world_size < 1 or self.batch_per_worker < 1 or self.micro_batches < 1:
            raise ValueError("world size, batch per worker and micro-batches must be positive")
        if self.steps < 1 or self.warmup < 0:
            raise ValueError("steps must be positive and warmup not negative")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.phase not in _PHASES:
            raise ValueError(f"phase must be one of {_PHASES}, got {self.phase!r}")
        if self.strategy == "tp" and not _tensor_parallel_model(self.model):
            raise ValueError(
                f"tensor parallelism splits Linear layers; {self.model} is a CNN, "
                "use vit_b_16 (strategy tp)"
            )
        return self

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, path: Path) -> Job:
        return cls(**json.loads(Path(path).read_text())).check()


def _tensor_parallel_model(model: str) -> bool:
    from fwbench.models import get_spec

    return get_spec(model).kind == "transformer"


class Place(NamedTuple):
    rank: int
    world_size: int
    # host:port of the rendezvous (rank 0's store or JAX's coordinator); None for one process
    coordinator: str | None


def place_from(
    rank: int | None = None,
    world_size: int | None = None,
    coordinator: str | None = None,
    env: dict | None = None,
) -> Place:
    """This worker's rank, the world size and the rendezvous address.

    Flags first (the JAX spawner passes them), then torchrun's variables, then Slurm's task
    variables (``srun`` sets them for each task); one process when none is set."""
    env = os.environ if env is None else env
    if rank is None and "RANK" in env and "WORLD_SIZE" in env:
        rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
    if rank is None and all(k in env for k in _SLURM_ENV):
        rank, world_size = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    if rank is None:
        rank, world_size = 0, world_size or 1
    if coordinator is None and "MASTER_ADDR" in env and "MASTER_PORT" in env:
        coordinator = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    if world_size is None or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    if world_size > 1 and not coordinator:
        raise ValueError("a world of several processes needs a coordinator address (host:port)")
    return Place(rank, world_size, coordinator)


def global_batch(job: Job, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Step ``step``'s whole batch, NCHW float64 noise and integer labels, the same in every
    process that asks (seeded by the job's seed and the step alone)."""
    rng = np.random.default_rng([job.seed, step])
    images = rng.standard_normal((job.global_batch, 3, job.image_size, job.image_size))
    labels = rng.integers(0, job.num_classes, job.global_batch)
    return images, labels


def shard_rows(job: Job, index: int) -> slice:
    """The rows of the global batch that shard ``index`` holds."""
    return slice(index * job.batch_per_worker, (index + 1) * job.batch_per_worker)


def pin_to_core(rank: int) -> int:
    """Run this worker on one core of those the launcher may use, chosen by rank, with one
    intra-op thread: N ranks then share the machine as N single-core workers would."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    os.sched_setaffinity(0, {core})
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    return core


def bus_bandwidth(message_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """All-reduce algorithm and bus bandwidth in bytes/s, as nccl-tests defines them: algbw is
    the message over the time, busbw scales it by 2(n-1)/n, what each link carries in a ring."""
    algbw = message_bytes / seconds
    return algbw, algbw * 2 * (world_size - 1) / world_size
