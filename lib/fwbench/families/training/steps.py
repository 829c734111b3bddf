"""One training step per framework, each at its own best practice, with the same arithmetic.

Both trainers take host batches as NCHW float32 numpy (the Flax side transposes to NHWC once,
on the way to the device) and labels as integers, minimise the mean cross-entropy computed in
fp32 (fp64 on the fp64 path), and apply the matched optimizers of ``fwbench.families.training.optim``.

``precision="fp64"`` is the proof path of the parity check, not a speed setting: weights,
optimizer state, inputs and the loss all in float64 (torch ``.double()``; JAX inside a scoped
``jax.enable_x64``, entered by every method that traces, places or runs arrays, so the rest of
the process keeps JAX's 32-bit default). The other precisions compute exactly as before.

- ``TorchTrainer``: eager or ``torch.compile`` of the model's forward (the backward and the
  optimizer stay eager, as the torch.compile tutorials train); ``bf16-mixed`` is
  ``torch.autocast(dtype=bfloat16)`` over fp32 master weights.
- ``JaxTrainer``: the whole step (forward, backward, optimizer) under one ``jax.jit``, with the
  model split into parameters and everything else (BatchNorm statistics, dropout RNG counters) so
  that state threads through the step and comes back updated, as torch's buffers are updated in
  place. ``bf16-mixed`` casts the fp32 parameters to bf16 inside the differentiated function,
  so gradients arrive in fp32 for the fp32 master copy; BatchNorm statistics stay fp32.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from collections.abc import Callable, Iterable

import numpy as np

from fwbench import vocab
from fwbench.families.training.optim import OptimConfig, optax_optimizer, torch_optimizer
from fwbench.measure import device as fw_device
from fwbench.measure import flops
from fwbench.measure import precision as fw_precision
from fwbench.measure.timing import first_call_overhead


def resolve_training_mode(framework: str, mode: str) -> str:
    """``default`` is each framework's out-of-the-box way to train (``vocab.DEFAULT_MODE``)."""
    return vocab.resolve_mode(framework, mode, vocab.TRAINING_MODES, "training mode")


def configure_precision(framework: str, precision: str) -> dict:
    """``precision.configure`` over the training precisions (bf16-mixed keeps TF32 off: whatever
    still runs in fp32, optimizer, losses and norms, runs in full fp32 on both sides)."""
    return fw_precision.configure(framework, precision, fw_precision.TRAINING_PRECISIONS)


def _check_precision(precision: str) -> str:
    return fw_precision.check(precision, fw_precision.TRAINING_PRECISIONS)


def torch_stochastic_layers(model) -> list:
    """The dropout and stochastic-depth modules of a torch model."""
    import torch
    from torchvision.ops import StochasticDepth

    return [m for m in model.modules() if isinstance(m, (torch.nn.Dropout, StochasticDepth))]


def disable_stochastic_layers(torch_model, flax_model) -> int:
    """Set every dropout and stochastic-depth rate to 0 on both sides; returns how many were set.

    The two frameworks draw different random masks, so a step-by-step comparison is only
    meaningful without them. BatchNorm keeps its training behaviour.
    """
    from flax import nnx

    changed = 0
    for module in torch_stochastic_layers(torch_model):
        if module.p > 0:
            module.p = 0.0
            changed += 1
    for _, node in nnx.iter_graph(flax_model):
        if isinstance(node, nnx.Module) and getattr(node, "rate", 0.0) > 0:
            node.rate = 0.0
            changed += 1
    return changed


class TorchTrainer:
    framework = "torch"

    def __init__(
        self,
        model,
        config: OptimConfig,
        *,
        device: str = "cpu",
        precision: str = "fp32",
        mode: str = "eager",
        channels_last: bool = False,
    ):
        import torch

        mode = resolve_training_mode("torch", mode)
        self.device, self.precision, self.mode = device, _check_precision(precision), mode
        self.config, self.channels_last = config, channels_last
        # weights, inputs and the loss: float64 on the fp64 path, float32 otherwise
        self.dtype = torch.float64 if precision == "fp64" else torch.float32
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.model = model.to(
            device=device, dtype=self.dtype, memory_format=self.memory_format
        ).train()
        self.optimizer, self.scheduler = torch_optimizer(self.model.parameters(), config)
        if mode == "compile":
            torch._dynamo.reset()
            self.forward = torch.compile(self.model)
        else:
            self.forward = self.model

    def _autocast(self):
        import torch

        if self.precision != "bf16-mixed":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=torch.bfloat16)

    def put(self, images: np.ndarray, labels: np.ndarray):
        import torch

        host_dtype = np.float64 if self.dtype == torch.float64 else np.float32
        x = torch.from_numpy(np.ascontiguousarray(images, host_dtype)).to(self.device)
        y = torch.from_numpy(np.asarray(labels, np.int64)).to(self.device)
        return x.contiguous(memory_format=self.memory_format), y

    def step(self, batch):
        """One update on a device batch from ``put``; returns the loss before the update."""
        import torch.nn.functional as F

        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            logits = self.forward(x)
        loss = F.cross_entropy(logits.to(self.dtype), y)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()

    def sync(self, _output=None) -> None:
        fw_device.torch_sync(self.device)

    def loss_value(self, output) -> float:
        return float(output)

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Class predictions in eval mode (running statistics, no dropout), then back to training."""
        import torch

        x, _ = self.put(images, np.zeros(len(images), np.int64))
        self.model.eval()
        try:
            with torch.no_grad(), self._autocast():
                return self.model(x).argmax(dim=1).cpu().numpy()
        finally:
            self.model.train()

    def recalibrate_bn(self, images: Iterable[np.ndarray]) -> int:
        """Replace every BatchNorm's running statistics by their plain average over ``images``.

        The forward passes run in training mode at the final weights, with dropout and stochastic
        depth off; torch's ``momentum=None`` (a cumulative average), as
        ``torch.optim.swa_utils.update_bn`` does. Returns how many BatchNorms were recalibrated.
        """
        import torch

        norms = [
            m for m in self.model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
        ]
        if not norms:
            return 0
        momenta = [m.momentum for m in norms]
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None
        for module in torch_stochastic_layers(self.model):
            module.eval()
        try:
            with torch.no_grad():
                for batch in images:
                    x, _ = self.put(batch, np.zeros(len(batch), np.int64))
                    self.model(x)
        finally:
            for norm, momentum in zip(norms, momenta, strict=True):
                norm.momentum = momentum
            self.model.train()
        return len(norms)

    def warm_start(self, batch) -> float:
        """Seconds the first step costs beyond a steady step: torch.compile's compile time."""
        if self.mode == "eager":
            return 0.0
        return first_call_overhead(lambda: self.step(batch), self.sync)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Floating-point weights and statistics as float64 numpy (exact for an fp32 model)."""
        import torch

        return {
            k: v.detach().to(torch.float64).cpu().numpy()
            for k, v in self.model.state_dict().items()
            if v.is_floating_point()
        }

    def grad_norms(self) -> dict[str, float]:
        """The L2 norm of every parameter's gradient from the last ``step``, torch keys."""
        return {
            name: float(p.grad.detach().to(self.dtype).norm()) if p.grad is not None else 0.0
            for name, p in self.model.named_parameters()
        }

    flop_counter = "torch.utils.flop_counter.FlopCounterMode over one eager step"

    def step_flops(self, batch) -> float:
        """FLOPs of one whole step (forward, backward, optimizer) as torch's FlopCounterMode counts.

        The step runs eagerly (the counter cannot see inside a torch.compile'd graph) on a copy
        of the model and its optimizer, so counting moves neither weights nor BatchNorm
        statistics. The counter sees matmuls and convolutions, forward and backward; the
        optimizer's elementwise updates count zero, as they do on the JAX side.
        """
        self.optimizer.zero_grad(set_to_none=True)  # the next step would; the copy needs room
        shadow = TorchTrainer(
            copy.deepcopy(self.model),
            self.config,
            device=self.device,
            precision=self.precision,
            mode="eager",
            channels_last=self.channels_last,
        )
        return float(flops.torch_flops(lambda: shadow.step(batch)))


def _in_precision_scope(method: Callable) -> Callable:
    """Run a ``JaxTrainer`` method inside the trainer's precision scope (x64 for fp64)."""

    @functools.wraps(method)
    def scoped(self, *args, **kwargs):
        with self.precision_scope():
            return method(self, *args, **kwargs)

    return scoped


def _batch_stats(graphdef, params, stats, other, x):
    """One training-mode forward's BatchNorm statistics (``JaxTrainer.recalibrate_bn``)."""
    from flax import nnx

    module = nnx.merge(graphdef, params, stats, other, copy=True)
    module(x)
    return nnx.split(module, nnx.Param, nnx.BatchStat, ...)[2]


@functools.cache
def _jitted_batch_stats():
    """Jitted once per process with the graph static, so that an evaluation reuses the program
    compiled at the last one instead of compiling its own (seconds per evaluation)."""
    import jax

    return jax.jit(_batch_stats, static_argnums=0)


class JaxTrainer:
    framework = "jax"
    flop_counter = "convolutions and dot products of the jitted step's StableHLO"

    def __init__(
        self,
        model,
        config: OptimConfig,
        *,
        device: str = "cpu",
        precision: str = "fp32",
        mode: str = "jit",
        record_grad_norms: bool = False,
    ):
        """``record_grad_norms`` makes every step also return each parameter's gradient norm
        (read with ``grad_norms``); the parity check needs them, the timed step does not."""
        from fwbench.models import conv

        mode = resolve_training_mode("jax", mode)
        self.device, self.precision, self.mode = device, _check_precision(precision), mode
        self.record_grad_norms = record_grad_norms
        self.jax_device = fw_device.jax_device(device)
        # jit-expert trains the twin's expert form (models/conv.py): the same function and
        # gradients (tests/test_models_expert.py), the convolutions written for the device
        self.model = conv.use_implementation(model, vocab.twin_layers(mode))
        self._last_grad_norms = None
        with self.precision_scope():
            self._build(model, config)

    @property
    def layers(self) -> str:
        """The form of the twin this trainer trains, read off its convolutions: ``expert`` where
        they run the expert implementations (models/conv.py), else ``stock``."""
        from flax import nnx

        from fwbench.models import conv

        found = {
            m.implementation for _, m in nnx.iter_graph(self.model) if isinstance(m, conv.Conv)
        }
        return conv.EXPERT if conv.EXPERT in found else conv.STOCK

    def precision_scope(self):
        """x64 enabled for the fp64 path, scoped so the rest of the process keeps 32-bit JAX."""
        import jax

        return jax.enable_x64(True) if self.precision == "fp64" else contextlib.nullcontext()

    def _build(self, model, config: OptimConfig) -> None:
        import jax
        import jax.numpy as jnp
        import optax
        from flax import nnx

        from fwbench.measure.precision import cast_floating

        model.eval()
        eval_graphdef, _, _ = nnx.split(model, nnx.Param, ...)
        model.train()
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        # weights, statistics, inputs and the loss: float64 on the fp64 path, float32 otherwise
        self.dtype = jnp.float64 if self.precision == "fp64" else jnp.float32
        if self.precision == "fp64":
            params, rest = cast_floating(params, self.dtype), cast_floating(rest, self.dtype)
        self.tx = optax_optimizer(config)
        # copies, never aliases: the step donates its inputs, and the module must stay readable
        self.params = jax.device_put(params, self.jax_device, may_alias=False)
        self.rest = jax.device_put(rest, self.jax_device, may_alias=False)
        self.opt_state = jax.device_put(self.tx.init(self.params), self.jax_device, may_alias=False)
        compute_dtype = jnp.bfloat16 if self.precision == "bf16-mixed" else self.dtype
        loss_dtype = self.dtype
        record_grad_norms = self.record_grad_norms

        def cast(tree):
            if compute_dtype == self.dtype:
                return tree
            return cast_floating(tree, compute_dtype)

        def train_step(params, rest, opt_state, x, y):
            def loss_fn(params, rest):
                # fresh Variables (copy=True) belong to this trace, so BatchNorm may update them
                # here; merging without a copy reuses ones owned by the outer jit trace
                module = nnx.merge(graphdef, cast(params), rest, copy=True)
                logits = module(x.astype(compute_dtype)).astype(loss_dtype)
                loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
                _, _, new_rest = nnx.split(module, nnx.Param, ...)
                return loss, new_rest

            (loss, new_rest), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rest)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            outputs = (optax.apply_updates(params, updates), new_rest, opt_state, loss)
            if record_grad_norms:
                outputs += (jax.tree.map(lambda g: jnp.sqrt(jnp.sum(jnp.square(g))), grads),)
            return outputs

        def predict(params, rest, x):
            logits = nnx.merge(eval_graphdef, cast(params), rest)(x.astype(compute_dtype))
            return jnp.argmax(logits, axis=-1)

        # donation lets XLA update parameters and optimizer state in place, as torch does
        self._jitted = jax.jit(train_step, donate_argnums=(0, 1, 2))
        self._predict = jax.jit(predict)
        self._compiled = {}
        self._step_flops = {}

    @_in_precision_scope
    def put(self, images: np.ndarray, labels: np.ndarray):
        import jax

        host_dtype = np.float64 if self.precision == "fp64" else np.float32
        x = np.ascontiguousarray(np.asarray(images, host_dtype).transpose(0, 2, 3, 1))
        y = np.asarray(labels, np.int32)
        return jax.device_put(x, self.jax_device), jax.device_put(y, self.jax_device)

    @_in_precision_scope
    def compile(self, batch) -> tuple[float, float]:
        """AOT-compile the step for this batch shape; returns (lowering s, XLA compile s).

        The program's FLOPs are read from the same lowering (after the timed part), for
        ``step_flops``.
        """
        x, y = batch
        t0 = time.perf_counter()
        lowered = self._jitted.lower(self.params, self.rest, self.opt_state, x, y)
        t1 = time.perf_counter()
        self._compiled[(x.shape, x.dtype)] = lowered.compile()
        t2 = time.perf_counter()
        self._step_flops[(x.shape, x.dtype)] = flops.xla_matmul_conv_flops(lowered.as_text())
        return t1 - t0, t2 - t1

    @_in_precision_scope
    def step_flops(self, batch) -> float:
        """FLOPs of one whole step (forward, backward, optimizer): the convolutions and dot
        products of the XLA program, the op class torch's FlopCounterMode counts."""
        x, y = batch
        key = (x.shape, x.dtype)
        if key not in self._step_flops:
            lowered = self._jitted.lower(self.params, self.rest, self.opt_state, x, y)
            self._step_flops[key] = flops.xla_matmul_conv_flops(lowered.as_text())
        return self._step_flops[key]

    @_in_precision_scope
    def step(self, batch):
        x, y = batch
        fn = self._compiled.get((x.shape, x.dtype), self._jitted)
        outputs = fn(self.params, self.rest, self.opt_state, x, y)
        self.params, self.rest, self.opt_state, loss = outputs[:4]
        if self.record_grad_norms:
            self._last_grad_norms = outputs[4]
        return loss

    def sync(self, _output=None) -> None:
        # every output of the step, not only the loss: an update still in flight is unfinished work
        fw_device.jax_sync((self.params, self.rest, self.opt_state))

    def loss_value(self, output) -> float:
        return float(output)

    def grad_norms(self, links_fn) -> dict[str, float]:
        """The L2 norm of every parameter's gradient from the last ``step``, torch keys (through
        the model's weight links); needs ``record_grad_norms``."""
        from flax import nnx

        if self._last_grad_norms is None:
            raise RuntimeError("grad_norms needs record_grad_norms=True and one step taken")
        norm_by_path = {
            path: float(np.asarray(v.get_value()))
            for path, v in nnx.to_flat_state(self._last_grad_norms)
        }
        path_by_var = {
            id(node): path
            for path, node in nnx.iter_graph(self.model)
            if isinstance(node, nnx.Param)
        }
        return {
            link.key: norm_by_path[path_by_var[id(link.variable)]]
            for link in links_fn(self.model)
            if isinstance(link.variable, nnx.Param)
        }

    @_in_precision_scope
    def predict(self, images: np.ndarray) -> np.ndarray:
        x, _ = self.put(images, np.zeros(len(images), np.int32))
        return np.asarray(self._predict(self.params, self.rest, x))

    @_in_precision_scope
    def recalibrate_bn(self, images: Iterable[np.ndarray]) -> int:
        """``TorchTrainer.recalibrate_bn`` for the Flax twin: the same plain average.

        With momentum 1 a training-mode forward leaves each batch's own mean and unbiased
        variance in the running statistics; averaging those over the batches is what torch's
        cumulative average computes (in training mode the batch statistics, not the running ones,
        normalise, so the batches do not depend on each other).
        """
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from fwbench.models.layers import TorchBatchNorm

        model = self.sync_model()
        norms = [n for _, n in nnx.iter_graph(model) if isinstance(n, TorchBatchNorm)]
        if not norms:
            return 0
        stochastic = [
            n
            for _, n in nnx.iter_graph(model)
            if isinstance(n, nnx.Module) and getattr(n, "deterministic", None) is False
        ]
        momenta = [n.momentum for n in norms]
        for norm in norms:
            norm.momentum = 1.0
        for module in stochastic:
            module.deterministic = True
        try:
            graphdef, params, stats, other = nnx.split(model, nnx.Param, nnx.BatchStat, ...)
            batch_stats = _jitted_batch_stats()
            total, count = None, 0
            for batch in images:
                x, _ = self.put(batch, np.zeros(len(batch), np.int32))
                new = batch_stats(graphdef, params, stats, other, x)
                total = new if total is None else jax.tree.map(jnp.add, total, new)
                count += 1
            nnx.update(model, jax.tree.map(lambda a: a / count, total))
        finally:
            for norm, momentum in zip(norms, momenta, strict=True):
                norm.momentum = momentum
            for module in stochastic:
                module.deterministic = False
        _, params, rest = nnx.split(model, nnx.Param, ...)
        self.params = jax.device_put(params, self.jax_device, may_alias=False)
        self.rest = jax.device_put(rest, self.jax_device, may_alias=False)
        return len(norms)

    @_in_precision_scope
    def sync_model(self):
        """Write the trained parameters and statistics back into the Flax module."""
        from flax import nnx

        nnx.update(self.model, self.params, self.rest)
        return self.model

    def state_dict(self, links_fn) -> dict[str, np.ndarray]:
        """Torch-layout arrays keyed like torchvision, through the model's weight links."""
        from fwbench.models import porting

        return porting.export_state_dict(links_fn(self.sync_model()))
