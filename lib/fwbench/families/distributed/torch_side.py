"""One PyTorch worker: the one-process reference, DDP, FSDP2 (``fully_shard``) or tensor
parallelism (DTensor's ``parallelize_module``), trained on the job's batches and timed.

Every rank builds the same model from the same seed (DDP would broadcast rank 0's weights anyway;
FSDP2 and tensor parallelism shard what each rank already holds), with every residual branch
starting at zero on CNNs and dropout off, as the training family's parity check does, so that
float64 runs of different strategies can agree to rounding.

- ``none``: one process; each step runs the ``micro_batches`` shards one after the other, each
  forward normalised by its own BatchNorm statistics, their losses scaled by 1/shards so the
  accumulated gradient is the mean of the shards' gradients, which is what DDP averages.
- ``ddp``: each rank its shard; the compute-only step runs under ``no_sync()`` (no gradient
  all-reduce; DDP still broadcasts rank 0's BatchNorm buffers at each forward, its default).
- ``fsdp``: each block of the model a ``fully_shard`` unit, then the root; parameters,
  gradients and optimizer state live sharded. Its compute-only step trains an unsharded copy of
  the model on the rank's shard (FSDP's compute without any all-gather or reduce-scatter).
- ``tp``: the ViT's MLPs split Megatron-style (first Linear by columns, second by rows, one
  all-reduce per MLP forward); attention, whose projections torch keeps as one fused parameter,
  stays replicated. Every rank trains on the whole global batch, so the losses are the global
  batch's. There is no compute-only step: the split matmuls cannot run without their all-reduce.
"""

from __future__ import annotations

import contextlib
import copy
import os

import numpy as np

from fwbench.families.distributed.job import Job, Place, global_batch, shard_rows


def build_model(job: Job):
    """The registry's torchvision model for the job: seeded, residual branches at zero (CNNs),
    dropout and stochastic depth off, in the job's precision, in training mode."""
    import torch

    from fwbench.families.training.parity import zero_init_residual_
    from fwbench.families.training.steps import torch_stochastic_layers
    from fwbench.models import build_torch, get_spec

    model = build_torch(
        job.model, seed=job.seed, num_classes=job.num_classes, image_size=job.image_size
    )
    if get_spec(job.model).kind == "cnn":
        zero_init_residual_(model)
    for module in torch_stochastic_layers(model):
        module.p = 0.0
    dtype = torch.float64 if job.precision == "fp64" else torch.float32
    return model.to(dtype).train()


def optim_config(job: Job):
    """SGD with momentum at a constant rate, the one description both frameworks build."""
    from fwbench.families.training.optim import OptimConfig

    return OptimConfig(name="sgd", lr=job.lr, schedule="constant")


def _fsdp_units(model) -> list:
    """The blocks FSDP2 shards one by one (each gathered only while it runs): the ViT's encoder
    layers, a ResNet's stages, a MobileNet's or EfficientNet's feature blocks."""
    encoder = getattr(model, "encoder", None)
    if encoder is not None and hasattr(encoder, "layers"):
        return list(encoder.layers)
    if hasattr(model, "layer1"):
        return [model.layer1, model.layer2, model.layer3, model.layer4]
    if hasattr(model, "features"):
        return list(model.features)
    return []


def _tensor_parallel_plan(model) -> dict:
    """``parallelize_module``'s plan for torchvision's ViT: every MLP's first Linear by columns,
    its second by rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for name, _ in model.encoder.layers.named_children():
        plan[f"encoder.layers.{name}.mlp.0"] = ColwiseParallel()
        plan[f"encoder.layers.{name}.mlp.3"] = RowwiseParallel()
    return plan


def _local_bytes(tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


class TorchWorker:
    def __init__(self, job: Job, place: Place):
        import torch
        import torch.distributed as dist

        from fwbench.families.training.optim import torch_optimizer

        self.job, self.place = job, place
        torch.set_num_threads(1)
        self.distributed = job.strategy != "none"
        if self.distributed:
            self._init_process_group()
        self.dtype = torch.float64 if job.precision == "fp64" else torch.float32
        model = build_model(job)
        self.replica = None  # the compute-only step's unsharded model (fsdp)
        if job.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            self.model = DistributedDataParallel(model)
        elif job.strategy == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            if job.compute_only:
                self.replica = copy.deepcopy(model)
            mesh = init_device_mesh("cpu", (place.world_size,))
            for unit in _fsdp_units(model):
                fully_shard(unit, mesh=mesh)
            self.model = fully_shard(model, mesh=mesh)
        elif job.strategy == "tp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import parallelize_module

            mesh = init_device_mesh("cpu", (place.world_size,))
            self.model = parallelize_module(model, mesh, _tensor_parallel_plan(model))
        else:
            self.model = model
        config = optim_config(job)
        self.optimizer, self.scheduler = torch_optimizer(
            self.model.parameters(), config, foreach=False if job.strategy == "tp" else None
        )
        if self.replica is not None:
            self.replica_optimizer, self.replica_scheduler = torch_optimizer(
                self.replica.parameters(), config
            )
        self._dist = dist

    def _init_process_group(self) -> None:
        import torch.distributed as dist

        # torchrun sets these (and its agent's store); srun and the JAX-style spawner do not
        if "MASTER_ADDR" not in os.environ:
            host, port = self.place.coordinator.rsplit(":", 1)
            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port
        os.environ["RANK"] = str(self.place.rank)
        os.environ["WORLD_SIZE"] = str(self.place.world_size)
        dist.init_process_group("gloo", rank=self.place.rank, world_size=self.place.world_size)

    def barrier(self) -> None:
        if self.distributed:
            self._dist.barrier()

    def _tensors(self, step: int, rows: slice | None):
        import torch

        images, labels = global_batch(self.job, step)
        if rows is not None:
            images, labels = images[rows], labels[rows]
        x = torch.from_numpy(np.ascontiguousarray(images)).to(self.dtype)
        return x, torch.from_numpy(np.asarray(labels, np.int64))

    def _loss(self, model, x, y):
        import torch.nn.functional as F

        return F.cross_entropy(model(x), y)

    def step(self, step: int) -> float:
        """One synced update on step ``step``'s batch; returns this rank's loss before it."""
        job = self.job
        self.optimizer.zero_grad(set_to_none=True)
        if job.strategy == "none":
            x, y = self._tensors(step, None)
            total = 0.0
            for i in range(job.shards):
                rows = shard_rows(job, i)
                loss = self._loss(self.model, x[rows], y[rows]) / job.shards
                loss.backward()
                total += float(loss.detach())
        else:
            rows = None if job.strategy == "tp" else shard_rows(job, self.place.rank)
            x, y = self._tensors(step, rows)
            loss = self._loss(self.model, x, y)
            loss.backward()
            total = float(loss.detach())
        self.optimizer.step()
        self.scheduler.step()
        return total

    def compute_only_step(self, step: int) -> None:
        """The rank's share of the work without a collective (DDP under ``no_sync``; FSDP's
        unsharded replica)."""
        x, y = self._tensors(step, shard_rows(self.job, self.place.rank))
        if self.job.strategy == "ddp":
            self.optimizer.zero_grad(set_to_none=True)
            with self.model.no_sync():
                self._loss(self.model, x, y).backward()
            self.optimizer.step()
            self.scheduler.step()
        else:
            self.replica_optimizer.zero_grad(set_to_none=True)
            self._loss(self.replica, x, y).backward()
            self.replica_optimizer.step()
            self.replica_scheduler.step()

    @property
    def has_compute_only(self) -> bool:
        return self.job.compute_only and self.job.strategy in ("ddp", "fsdp")

    def mean_over_ranks(self, values: list[float]) -> list[float]:
        """Each step's loss averaged over the ranks (the global batch's loss); tensor-parallel
        ranks already hold it."""
        import torch

        if not self.distributed or self.job.strategy == "tp":
            return values
        t = torch.tensor(values, dtype=torch.float64)
        self._dist.all_reduce(t)
        return (t / self.place.world_size).tolist()

    def state_bytes(self) -> int:
        """Parameters, gradients and optimizer state this rank holds (its shards only)."""
        total = 0
        for p in self.model.parameters():
            total += _local_bytes(p)
            if p.grad is not None:
                total += _local_bytes(p.grad)
        for state in self.optimizer.state.values():
            total += sum(_local_bytes(v) for v in state.values() if hasattr(v, "element_size"))
        return total

    @property
    def has_grad_allreduce(self) -> bool:
        return self.distributed and self.job.strategy == "ddp"

    def grad_allreduce_op(self):
        """The step's gradient all-reduce alone, as a call to time, with the count of gradient
        arrays and their bytes: one all-reduce of them all, flattened (DDP sends the same bytes
        in buckets of up to 25 MB, overlapped with the backward pass)."""
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        flat = torch.zeros(sum(p.numel() for p in params), dtype=self.dtype)
        for _ in range(2):
            self._dist.all_reduce(flat)
        return (
            lambda: self._dist.all_reduce(flat),
            len(params),
            int(flat.numel() * flat.element_size()),
        )

    def allreduce_op(self, message_bytes: int):
        """One fp32 all-reduce of ``message_bytes``, warmed up, as a call to time."""
        import torch

        tensor = torch.ones(max(message_bytes // 4, 1), dtype=torch.float32)
        for _ in range(2):
            self._dist.all_reduce(tensor)
        return lambda: self._dist.all_reduce(tensor)

    def max_over_ranks(self, value: float) -> float:
        import torch

        t = torch.tensor([value], dtype=torch.float64)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX)
        return float(t.item())

    def close(self) -> None:
        if self.distributed:
            with contextlib.suppress(Exception):
                self._dist.destroy_process_group()
