"""Adam written as plain per-tensor in-place ops, so a traced training step contains the update.

torch.optim.Adam hides its update behind foreach/fused kernels and reads the step count with
``.item()``, which a fake-tensor trace cannot follow. This is the same arithmetic as torch's
single-tensor "capturable" path (the step count stays a tensor), so one step matches
``torch.optim.Adam`` to float rounding; a test holds it to that.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AdamConfig:
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


@dataclass
class AdamState:
    exp_avg: list[torch.Tensor]
    exp_avg_sq: list[torch.Tensor]
    step: torch.Tensor  # one shared float scalar; every parameter is stepped together

    def tensors(self) -> list[torch.Tensor]:
        return [*self.exp_avg, *self.exp_avg_sq, self.step]


def init_adam_state(params: list[torch.Tensor]) -> AdamState:
    device = params[0].device if params else "cpu"
    return AdamState(
        exp_avg=[torch.zeros_like(p) for p in params],
        exp_avg_sq=[torch.zeros_like(p) for p in params],
        step=torch.zeros((), dtype=torch.float32, device=device),
    )


def adam_step_(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    state: AdamState,
    config: AdamConfig,
) -> None:
    """One Adam update of ``params`` and ``state`` in place."""
    state.step.add_(1)
    bias_correction1 = 1 - torch.pow(config.beta1, state.step)
    bias_correction2 = 1 - torch.pow(config.beta2, state.step)
    step_size_neg = (config.lr / bias_correction1).neg()
    bias_correction2_sqrt = bias_correction2.sqrt()
    for param, grad, exp_avg, exp_avg_sq in zip(
        params, grads, state.exp_avg, state.exp_avg_sq, strict=True
    ):
        exp_avg.lerp_(grad, 1 - config.beta1)
        exp_avg_sq.mul_(config.beta2).addcmul_(grad, grad, value=1 - config.beta2)
        denom = (exp_avg_sq.sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(
            config.eps / step_size_neg
        )
        param.addcdiv_(exp_avg, denom)
