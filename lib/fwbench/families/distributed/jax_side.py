"""One JAX worker: the one-process reference, data parallel (``dp``), fully sharded (``fsdp``) or
tensor parallel (``tp``), over one CPU device per process joined by ``jax.distributed``.

The Flax twin is ported from the same torchvision model the PyTorch worker builds (same seed,
residual branches at zero on CNNs, dropout off), so the two frameworks start from one set of
weights. The model is split into parameters, BatchNorm statistics and the rest (random-number
state, unused with dropout off), which stays a constant of the traced step.

- ``none``: one process; each step runs the ``micro_batches`` shards one after the other inside
  one jit, each normalised by its own statistics, and averages their losses and gradients.
- ``dp``: ``shard_map`` over a ``data`` axis: each device runs its shard (its own BatchNorm
  statistics, as DDP's ranks do) against replicated parameters, then ``pmean`` averages the
  gradients, one collective per gradient array as the code is written (XLA combines them into
  variadic all-reduces, whose CPU runtime still pays per array carried), and the loss. Each device
  keeps its own running statistics (a leading axis of the world size), as DDP's ranks would
  without broadcasting buffers.
- ``dp_fused``: ``dp`` with the change a JAX user makes when the collectives' count costs more
  than their bytes: the gradients flattened into one vector (``ravel_pytree``), one ``pmean``,
  unflattened. PyTorch's DDP does the like by itself, in buckets of up to 25 MB.
- ``fsdp``: the same step with every parameter whose first axis divides by the world size stored
  sharded along it (others replicated): ``all_gather`` before the forward, ``psum_scatter`` of the
  gradients after it, the optimizer on the shards.
- ``tp``: the ViT's MLPs split by columns then rows along a ``model`` axis, the batch replicated,
  one jit whose partitioner inserts the all-reduce (no BatchNorm, so no shard-by-shard forward).

Compute-only steps (``dp``, ``dp_fused``, ``fsdp``) train a local replica on the process's own
shard and its own device: the same per-device work without a collective. For the data-parallel
strategies the gradients' all-reduce is also timed alone (``grad_allreduce_op``), the same
collectives on arrays of the gradients' shapes, so that a synced step parts into compute, that
all-reduce, and the rest.
"""

from __future__ import annotations

import numpy as np

from fwbench.families.distributed.job import Job, Place, global_batch, shard_rows
from fwbench.families.distributed.torch_side import optim_config

_AXIS = "data"
_TP_AXIS = "model"
_DATA_PARALLEL = ("dp", "dp_fused")


def _build_twin(job: Job):
    """The Flax twin with the weights ``torch_side.build_model`` gives PyTorch, in training mode."""
    from fwbench.families.training.parity import zero_init_residual_
    from fwbench.families.training.steps import disable_stochastic_layers
    from fwbench.models import build_pair, get_spec, porting

    torch_model, flax_model = build_pair(
        job.model, seed=job.seed, num_classes=job.num_classes, image_size=job.image_size
    )
    if get_spec(job.model).kind == "cnn" and zero_init_residual_(torch_model):
        porting.port_state_dict(
            get_spec(job.model).flax_impl().links(flax_model), torch_model.state_dict()
        )
    disable_stochastic_layers(torch_model, flax_model)
    flax_model.train()
    return flax_model


def _path_text(path) -> str:
    import jax

    return jax.tree_util.keystr(path)


def _tp_spec(path_text: str, ndim: int):
    """Where a ViT parameter lives on the ``model`` axis: MLP fc1 by columns, fc2 by rows."""
    from jax.sharding import PartitionSpec as P

    if "mlp" in path_text and "fc1" in path_text:
        return P(None, _TP_AXIS) if ndim == 2 else P(_TP_AXIS)
    if "mlp" in path_text and "fc2" in path_text and ndim == 2:
        return P(_TP_AXIS, None)
    return P()


def _global(host, sharding):
    """A global array from a host value every process holds whole."""
    import jax

    host = np.asarray(host)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _shard_bytes(tree) -> int:
    import jax

    return int(
        sum(
            sum(s.data.nbytes for s in leaf.addressable_shards)
            for leaf in jax.tree.leaves(tree)
            if hasattr(leaf, "addressable_shards")
        )
    )


class JaxWorker:
    def __init__(self, job: Job, place: Place):
        import jax

        self.job, self.place = job, place
        if job.precision == "fp64":
            jax.config.update("jax_enable_x64", True)
        self.distributed = place.world_size > 1
        if self.distributed:
            jax.distributed.initialize(place.coordinator, place.world_size, place.rank)
        self._build()

    # --- the model and the steps -------------------------------------------------------------
    def _build(self) -> None:
        import jax
        import jax.numpy as jnp
        import optax
        from flax import nnx
        from jax.flatten_util import ravel_pytree
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        from fwbench.families.training.optim import optax_optimizer
        from fwbench.measure.precision import cast_floating

        job = self.job
        self.dtype = jnp.float64 if job.precision == "fp64" else jnp.float32
        model = _build_twin(job)
        graphdef, params, stats, other = nnx.split(model, nnx.Param, nnx.BatchStat, ...)
        params = jax.tree.map(np.asarray, cast_floating(params, self.dtype))
        stats = jax.tree.map(np.asarray, cast_floating(stats, self.dtype))
        self.host_params, self.host_stats = params, stats
        self.tx = optax_optimizer(optim_config(job))
        tx, dtype = self.tx, self.dtype

        def shard_loss(params, stats, x, y):
            module = nnx.merge(graphdef, params, stats, other, copy=True)
            logits = module(x).astype(dtype)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
            return loss, nnx.split(module, nnx.Param, nnx.BatchStat, ...)[2]

        grad_fn = jax.value_and_grad(shard_loss, has_aux=True)
        self._grad_fn = grad_fn

        def apply(params, grads, opt_state):
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        self._apply = apply
        n, shards, b = self.place.world_size, job.shards, job.batch_per_worker
        devices = np.array(jax.devices())
        local = jax.local_devices()[0]
        self.local_device = local

        if job.strategy == "none":

            def step(params, stats, opt_state, x, y):
                total_loss, total_grads, new_stats = 0.0, None, stats
                for i in range(shards):
                    (loss, s), g = grad_fn(
                        params, stats, x[i * b : (i + 1) * b], y[i * b : (i + 1) * b]
                    )
                    new_stats = s if i == 0 else new_stats
                    total_loss = total_loss + loss
                    total_grads = (
                        g if total_grads is None else jax.tree.map(jnp.add, total_grads, g)
                    )
                grads = jax.tree.map(lambda g: g / shards, total_grads)
                params, opt_state = apply(params, grads, opt_state)
                return params, new_stats, opt_state, total_loss / shards

            self._step = jax.jit(step, donate_argnums=(0, 1, 2))
            self.params = jax.device_put(params, local)
            self.stats = jax.device_put(stats, local)
            self._batch_sharding = None
        elif job.strategy in _DATA_PARALLEL + ("fsdp",):
            mesh = Mesh(devices, (_AXIS,))
            self.mesh = mesh
            if job.strategy == "fsdp":
                mask = jax.tree.map(lambda a: a.ndim >= 1 and a.shape[0] % n == 0, params)
            else:
                mask = jax.tree.map(lambda a: False, params)
            param_specs = jax.tree.map(lambda m: P(_AXIS) if m else P(), mask)
            stat_specs = jax.tree.map(lambda a: P(_AXIS), stats)

            def gather(p):
                return jax.tree.map(
                    lambda a, m: jax.lax.all_gather(a, _AXIS, axis=0, tiled=True) if m else a,
                    p,
                    mask,
                )

            def reduce(g):
                if job.strategy == "dp_fused":
                    flat, unflatten = ravel_pytree(g)
                    return unflatten(jax.lax.pmean(flat, _AXIS))
                return jax.tree.map(
                    lambda a, m: (
                        (jax.lax.psum_scatter(a, _AXIS, scatter_dimension=0, tiled=True) / n)
                        if m
                        else jax.lax.pmean(a, _AXIS)
                    ),
                    g,
                    mask,
                )

            self._reduce = reduce

            def on_shard(p, s, x, y):
                own_stats = jax.tree.map(lambda a: a[0], s)
                (loss, new_stats), g = grad_fn(gather(p), own_stats, x, y)
                return (
                    jax.lax.pmean(loss, _AXIS),
                    jax.tree.map(lambda a: a[None], new_stats),
                    reduce(g),
                )

            # check_vma off: every gradient is the device's own, and each collective is the one
            # written here (with it on, the gradient of a replicated parameter would come back
            # already summed over the devices, an all-reduce the code never shows)
            mapped = jax.shard_map(
                on_shard,
                mesh=mesh,
                in_specs=(param_specs, stat_specs, P(_AXIS), P(_AXIS)),
                out_specs=(P(), stat_specs, param_specs),
                check_vma=False,
            )

            def step(params, stats, opt_state, x, y):
                loss, stats, grads = mapped(params, stats, x, y)
                params, opt_state = apply(params, grads, opt_state)
                return params, stats, opt_state, loss

            self._step = jax.jit(step, donate_argnums=(0, 1, 2))
            self.params = jax.tree.map(
                lambda a, spec: _global(a, NamedSharding(mesh, spec)), params, param_specs
            )
            self.stats = jax.tree.map(
                lambda a: _global(np.stack([a] * n), NamedSharding(mesh, P(_AXIS))), stats
            )
            self._batch_sharding = NamedSharding(mesh, P(_AXIS))
        else:  # tp
            mesh = Mesh(devices, (_TP_AXIS,))
            self.mesh = mesh
            specs = jax.tree_util.tree_map_with_path(
                lambda path, a: _tp_spec(_path_text(path), a.ndim), params
            )
            shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs)

            def step(params, stats, opt_state, x, y):
                (loss, new_stats), grads = grad_fn(params, stats, x, y)
                params, opt_state = apply(params, grads, opt_state)
                params = jax.lax.with_sharding_constraint(params, shardings)
                return params, new_stats, opt_state, loss

            self._step = jax.jit(step, donate_argnums=(0, 1, 2))
            self.params = jax.tree.map(_global, params, shardings)
            replicated = NamedSharding(mesh, P())
            self.stats = jax.tree.map(lambda a: _global(a, replicated), stats)
            self._batch_sharding = replicated
        self.opt_state = jax.jit(tx.init)(self.params)
        self.replica = None

    def _batch(self, step: int, rows: slice | None = None):
        import jax

        images, labels = global_batch(self.job, step)
        if rows is not None:
            images, labels = images[rows], labels[rows]
        x = np.ascontiguousarray(images.transpose(0, 2, 3, 1), dtype=self.dtype)
        y = np.asarray(labels, np.int32)
        if self._batch_sharding is None or rows is not None:
            return jax.device_put(x, self.local_device), jax.device_put(y, self.local_device)
        return _global(x, self._batch_sharding), _global(y, self._batch_sharding)

    def step(self, step: int) -> float:
        import jax

        x, y = self._batch(step)
        self.params, self.stats, self.opt_state, loss = self._step(
            self.params, self.stats, self.opt_state, x, y
        )
        jax.block_until_ready((self.params, self.stats, self.opt_state))
        return float(np.asarray(loss.addressable_data(0)))

    @property
    def has_compute_only(self) -> bool:
        return self.job.compute_only and self.job.strategy in _DATA_PARALLEL + ("fsdp",)

    @property
    def has_grad_allreduce(self) -> bool:
        return self.distributed and self.job.strategy in _DATA_PARALLEL

    def grad_allreduce_op(self):
        """The step's gradient all-reduce alone (``reduce`` on arrays of the gradients' shapes),
        compiled and warmed up, as a call to time; with the count of arrays and their bytes."""
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        replicated = NamedSharding(self.mesh, P())
        grads = jax.tree.map(lambda a: _global(np.zeros_like(a), replicated), self.host_params)
        fn = jax.jit(
            jax.shard_map(
                self._reduce, mesh=self.mesh, in_specs=(P(),), out_specs=P(), check_vma=False
            )
        )
        for _ in range(2):
            jax.block_until_ready(fn(grads))
        leaves = jax.tree.leaves(self.host_params)
        return (
            lambda: jax.block_until_ready(fn(grads)),
            len(leaves),
            int(sum(np.asarray(a).nbytes for a in leaves)),
        )

    def compute_only_step(self, step: int) -> None:
        """The process's shard on a local replica: the per-device work with no collective."""
        import jax

        if self.replica is None:
            grad_fn, apply = self._grad_fn, self._apply

            def local_step(params, stats, opt_state, x, y):
                (_, stats), grads = grad_fn(params, stats, x, y)
                params, opt_state = apply(params, grads, opt_state)
                return params, stats, opt_state

            params = jax.device_put(self.host_params, self.local_device)
            self.replica = [
                jax.jit(local_step, donate_argnums=(0, 1, 2)),
                params,
                jax.device_put(self.host_stats, self.local_device),
                jax.jit(self.tx.init)(params),
            ]
        fn, params, stats, opt_state = self.replica
        x, y = self._batch(step, shard_rows(self.job, self.place.rank))
        out = fn(params, stats, opt_state, x, y)
        jax.block_until_ready(out)
        self.replica[1:] = out

    def barrier(self) -> None:
        if self.distributed:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("fwbench-step")

    def mean_over_ranks(self, values: list[float]) -> list[float]:
        return values  # every strategy's loss is already the global batch's (pmean or whole)

    def state_bytes(self) -> int:
        """Parameters, BatchNorm statistics and optimizer state on this process's device (JAX
        keeps no gradients between steps)."""
        return _shard_bytes((self.params, self.stats, self.opt_state))

    def allreduce_op(self, message_bytes: int):
        """One fp32 ``psum`` over the devices of ``message_bytes`` each, compiled and warmed up,
        as a call to time."""
        import jax
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        n = self.place.world_size
        elems = max(message_bytes // 4, 1)
        mesh = Mesh(np.array(jax.devices()), (_AXIS,))
        x = _global(np.ones(n * elems, np.float32), NamedSharding(mesh, P(_AXIS)))
        psum = jax.jit(
            jax.shard_map(
                lambda a: jax.lax.psum(a, _AXIS),
                mesh=mesh,
                in_specs=P(_AXIS),
                out_specs=P(),
                check_vma=False,
            )
        )
        for _ in range(2):
            jax.block_until_ready(psum(x))
        return lambda: jax.block_until_ready(psum(x))

    def max_over_ranks(self, value: float) -> float:
        from jax.experimental import multihost_utils

        return float(np.max(multihost_utils.process_allgather(np.array([value]))))

    def close(self) -> None:
        if self.distributed:
            import jax

            jax.distributed.shutdown()
