"""Matched optimizers: one description, built as ``torch.optim`` and as an optax chain.

The two libraries phrase the same algorithms differently, so each pairing is spelled out:

- SGD with momentum. torch adds ``weight_decay * w`` to the gradient *before* the momentum buffer
  (coupled L2), keeps ``buf = momentum * buf + g`` with no dampening and ``nesterov=False``, and
  steps ``w -= lr * buf``; its first step sets ``buf = g``, which equals the recursion started from
  zero. optax's ``add_decayed_weights`` followed by ``sgd(momentum=m)`` (``trace``: ``t = g + m*t``,
  also started from zero, then ``-lr * t``) is the same update, term for term.
- AdamW. torch decays decoupled, ``w *= 1 - lr * wd``, then applies the bias-corrected Adam step
  ``lr * m_hat / (sqrt(v_hat) + eps)``. optax's ``adamw`` adds ``wd * w`` to the Adam direction
  and scales the sum by ``-lr``: expanded, the same expression with the pre-step ``w``.
- Schedule. Both evaluate one Python function of the number of updates already applied (torch's
  ``LambdaLR`` before its first ``step()`` is at 0; optax's schedule sees count 0 on the first
  update), so the learning rate of step k is identical on both sides.

Weight decay applies to every trainable tensor on both sides (BatchNorm scales and biases
included), as plain ``torch.optim`` does when handed ``model.parameters()``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

_OPTIMIZERS = ("sgd", "adamw")
_SCHEDULES = ("constant", "cosine")

# Defaults that train the registry's CNNs from scratch at small batch sizes and keep fp32 training
# close enough to deterministic for the parity check (at SGD 0.02, batch 8, ResNet-50's BatchNorm
# biases drift 12% apart between the frameworks while the losses still agree to 4e-4); the
# notebooks expose ``lr`` so a campaign can override it.
_DEFAULT_LR = {"sgd": 0.005, "adamw": 1e-3}
_DEFAULT_WEIGHT_DECAY = {"sgd": 1e-4, "adamw": 0.05}


@dataclass(frozen=True)
class OptimConfig:
    name: str = "sgd"
    lr: float | None = None  # None: _DEFAULT_LR[name]
    weight_decay: float | None = None  # None: _DEFAULT_WEIGHT_DECAY[name]
    momentum: float = 0.9  # sgd
    betas: tuple[float, float] = (0.9, 0.999)  # adamw
    eps: float = 1e-8  # adamw
    schedule: str = "cosine"
    total_steps: int = 1000  # length of the cosine schedule

    def __post_init__(self):
        if self.name not in _OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {_OPTIMIZERS}, got {self.name!r}")
        if self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {_SCHEDULES}, got {self.schedule!r}")
        if self.lr is None:
            object.__setattr__(self, "lr", _DEFAULT_LR[self.name])
        if self.weight_decay is None:
            object.__setattr__(self, "weight_decay", _DEFAULT_WEIGHT_DECAY[self.name])
        if self.total_steps < 1:
            raise ValueError("total_steps must be at least 1")

    def lr_factor(self, step: int) -> float:
        """Multiplier of the base learning rate for the update that follows ``step`` updates."""
        if self.schedule == "constant":
            return 1.0
        progress = min(step, self.total_steps) / self.total_steps
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def describe(self) -> dict:
        return asdict(self)


def torch_optimizer(params, config: OptimConfig, *, foreach: bool | None = None):
    """``(optimizer, scheduler)``; call ``scheduler.step()`` after every ``optimizer.step()``.

    ``foreach=False`` updates one tensor at a time: needed where some parameters are DTensors
    and others plain tensors (tensor parallelism), which one fused update cannot mix."""
    import torch

    params = list(params)
    if config.name == "sgd":
        opt = torch.optim.SGD(
            params,
            lr=config.lr,
            momentum=config.momentum,
            dampening=0.0,
            weight_decay=config.weight_decay,
            nesterov=False,
            foreach=foreach,
        )
    else:
        opt = torch.optim.AdamW(
            params,
            lr=config.lr,
            betas=config.betas,
            eps=config.eps,
            weight_decay=config.weight_decay,
            amsgrad=False,
            foreach=foreach,
        )
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, config.lr_factor)
    return opt, scheduler


def optax_schedule(config: OptimConfig):
    """``lr * lr_factor(count)`` written with jnp, so it can run inside the jitted step.

    The rate is JAX's default float where the step is traced: float32 normally, float64 under
    ``jax.enable_x64`` (the fp64 parity path), where an fp32-rounded rate alone would move every
    update by up to 6e-8 relative.
    """
    import jax
    import jax.numpy as jnp

    def schedule(count):
        dtype = jax.dtypes.canonicalize_dtype(jnp.float64)  # float32 unless x64 is on
        if config.schedule == "constant":
            return jnp.asarray(config.lr, dtype)
        progress = jnp.minimum(count, config.total_steps).astype(dtype) / config.total_steps
        return (config.lr * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))).astype(dtype)

    return schedule


def optax_optimizer(config: OptimConfig):
    """The optax ``GradientTransformation`` equal to ``torch_optimizer(config)``, schedule included."""
    import optax

    schedule = optax_schedule(config)
    if config.name == "sgd":
        return optax.chain(
            optax.add_decayed_weights(config.weight_decay),
            optax.sgd(schedule, momentum=config.momentum, nesterov=False),
        )
    b1, b2 = config.betas
    return optax.adamw(schedule, b1=b1, b2=b2, eps=config.eps, weight_decay=config.weight_decay)
