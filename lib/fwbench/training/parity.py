"""Loss-curve parity: K training steps on both frameworks from the same weights and batches.

Run in fp32 with TF32 off, dropout and stochastic depth off (the frameworks would draw different
masks) and BatchNorm in training mode, so the two sides compute the same function step after
step; what remains is floating-point reassociation, which a correct port keeps far below the
tolerances. Torch runs eager, JAX jitted: the reference is torch as users write it.

The check is only meaningful where training is not chaotic, i.e. where rounding differences of
1e-7 stay that small over K steps. Two things make ResNet-50 chaotic, both measured:

- torchvision's default initialisation: torch fp32 and torch fp64 differ by 18% in the loss
  within a few steps, so every residual branch starts at zero here (``zero_init_residual_``),
  after which fp32 and fp64 agree to 3e-7;
- the digits images (8x8 upsampled, large flat regions): torch and JAX agree to 1e-7 for three
  steps, then drift apart by 1e-2, at any learning rate tried (1e-3 to 2e-2). On standard-normal
  noise the same model, optimizer and step count agree to 2e-7. Parity therefore runs on seeded
  noise batches (``fwbench.data.rotating_batches``) whatever dataset the notebook trains on;
  convergence on real data is checked separately, as curves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fwbench.models.parity import max_rel_err
from fwbench.training.optim import OptimConfig
from fwbench.training.steps import JaxTrainer, TorchTrainer, configure_precision

LOSS_TOLERANCE = 1e-3  # per-step |loss_jax - loss_torch| / |loss_torch|
# Per tensor max|delta| / max|torch| after the K steps: a sanity bound, as the loss is the sharp
# test. BatchNorm biases are sums of gradients that nearly cancel, and reach 7e-3 even when every
# loss agrees to 2e-7; a missed or mis-scaled update moves whole tensors by far more.
PARAM_TOLERANCE = 2e-2
# Some tensors stay at rounding level, e.g. the bias of a BatchNorm followed by another
# BatchNorm (its gradient is zero in exact arithmetic): values of 1e-12 on both sides that share
# no digits. Below this scale a tensor is compared absolutely instead of relatively.
NOISE_FLOOR = 1e-6


@dataclass
class ParityResult:
    model: str
    optimizer: dict
    torch_losses: list[float]
    jax_losses: list[float]
    loss_rel: list[float]  # per step
    param_errors: dict[str, float]  # per trainable tensor, torch keys
    buffer_errors: dict[str, float]  # BatchNorm running statistics
    stochastic_layers_disabled: int
    residual_branches_zeroed: int
    settings: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.torch_losses)

    @property
    def loss_max_rel(self) -> float:
        return float(max(self.loss_rel))

    @staticmethod
    def _worst(errors: dict[str, float]) -> tuple[str | None, float]:
        if not errors:
            return None, 0.0
        key = max(errors, key=errors.get)
        return key, float(errors[key])

    @property
    def worst_param(self) -> tuple[str | None, float]:
        return self._worst(self.param_errors)

    @property
    def worst_buffer(self) -> tuple[str | None, float]:
        return self._worst(self.buffer_errors)

    def failures(self) -> list[str]:
        """Human-readable reasons the check fails; empty when it passes."""
        problems = []
        if not np.isfinite(self.torch_losses).all() or not np.isfinite(self.jax_losses).all():
            problems.append("a loss is not finite")
        if self.loss_max_rel > LOSS_TOLERANCE:
            step = int(np.argmax(self.loss_rel))
            problems.append(
                f"loss differs by {self.loss_max_rel:.2e} (> {LOSS_TOLERANCE:g}) at step {step}"
            )
        for label, (key, err) in (
            ("parameter", self.worst_param),
            ("statistic", self.worst_buffer),
        ):
            if err > PARAM_TOLERANCE:
                problems.append(f"{label} {key} differs by {err:.2e} (> {PARAM_TOLERANCE:g})")
        return problems

    @property
    def passed(self) -> bool:
        return not self.failures()


def run_parity(
    model: str,
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    config: OptimConfig,
    *,
    seed: int = 0,
    num_classes: int = 10,
    image_size: int = 224,
    devices: dict[str, str] | None = None,
    zero_init: bool = True,
) -> ParityResult:
    """Train a fresh pair for ``len(batches)`` steps, one batch per step, and compare them.

    ``zero_init`` starts every residual branch at zero (``zero_init_residual_``) on both sides.
    """
    from fwbench.models import build_pair, get_spec, porting
    from fwbench.training.steps import disable_stochastic_layers

    if len(batches) < 1:
        raise ValueError("parity needs at least one batch")
    settings = {
        "torch": configure_precision("torch", "fp32"),
        "jax": configure_precision("jax", "fp32"),
    }
    torch_model, flax_model = build_pair(
        model, seed=seed, num_classes=num_classes, image_size=image_size
    )
    zeroed = zero_init_residual_(torch_model) if zero_init else 0
    if zeroed:
        porting.port_state_dict(
            get_spec(model).flax_impl().links(flax_model), torch_model.state_dict()
        )
    disabled = disable_stochastic_layers(torch_model, flax_model)
    devices = devices or {"torch": "cpu", "jax": "cpu"}
    torch_side = TorchTrainer(torch_model, config, device=devices["torch"], mode="eager")
    jax_side = JaxTrainer(flax_model, config, device=devices["jax"], mode="jit")

    losses = {"torch": [], "jax": []}
    for trainer in (torch_side, jax_side):
        for images, labels in batches:
            loss = trainer.step(trainer.put(images, labels))
            losses[trainer.framework].append(trainer.loss_value(loss))
    torch_losses = np.asarray(losses["torch"], np.float64)
    jax_losses = np.asarray(losses["jax"], np.float64)
    loss_rel = np.abs(jax_losses - torch_losses) / np.maximum(np.abs(torch_losses), 1e-12)

    reference = torch_side.state_dict()
    exported = jax_side.state_dict(get_spec(model).flax_impl().links)
    if reference.keys() != exported.keys():
        missing = sorted(reference.keys() - exported.keys())[:5]
        extra = sorted(exported.keys() - reference.keys())[:5]
        raise KeyError(f"state dicts differ: missing {missing}, extra {extra}")
    trainable = {name for name, _ in torch_model.named_parameters()}
    errors = {
        key: _running_mean_error(exported[key], reference[key], reference[_var_key(key)])
        if key.endswith("running_mean")
        else _tensor_error(exported[key], reference[key])
        for key in reference
    }
    return ParityResult(
        model=model,
        optimizer=config.describe(),
        torch_losses=torch_losses.tolist(),
        jax_losses=jax_losses.tolist(),
        loss_rel=loss_rel.tolist(),
        param_errors={k: v for k, v in errors.items() if k in trainable},
        buffer_errors={k: v for k, v in errors.items() if k not in trainable},
        stochastic_layers_disabled=disabled,
        residual_branches_zeroed=zeroed,
        settings=settings,
    )


def _tensor_error(actual: np.ndarray, reference: np.ndarray) -> float:
    """``max_rel_err``, with the scale floored at ``NOISE_FLOOR``."""
    scale = float(np.abs(reference).max()) if reference.size else 0.0
    if scale >= NOISE_FLOOR:
        return max_rel_err(actual, reference)
    return float(np.abs(np.asarray(actual, np.float64) - reference).max() / NOISE_FLOOR)


def _var_key(mean_key: str) -> str:
    return mean_key[: -len("running_mean")] + "running_var"


def _running_mean_error(actual, reference, reference_var, eps: float = 1e-5) -> float:
    """Largest shift of a channel's running mean in units of that channel's running std.

    A BatchNorm after a batch-centred input (e.g. a 1x1 conv after another BatchNorm) has a
    running mean that is near zero by construction, computed from activations of order one; its
    rounding is large relative to its own size but tiny relative to the std it is divided by,
    which is the only scale on which the mean acts.
    """
    shift = np.abs(np.asarray(actual, np.float64) - reference)
    return float((shift / np.sqrt(np.asarray(reference_var, np.float64) + eps)).max())


def zero_init_residual_(torch_model) -> int:
    """Zero the scale of the last BatchNorm of every residual branch; returns how many.

    torchvision's ``zero_init_residual`` (Goyal et al., 2017) generalised to every residual block
    of the registry. At torchvision's default initialisation, training-mode BatchNorm makes deep
    residual nets chaotic: ResNet-50's backward pass amplifies rounding so much that torch in fp32
    differs from torch in fp64 by 10% in the loss after two steps, so no fp32 comparison could
    agree to 1e-3. With every block starting as the identity the same comparison agrees to 1e-7,
    and all parameters still train (the zeroed scales get gradients on the first step).
    """
    import torch
    from torchvision.models.resnet import BasicBlock, Bottleneck

    count = 0
    with torch.no_grad():
        for module in torch_model.modules():
            if isinstance(module, Bottleneck):
                module.bn3.weight.zero_()
            elif isinstance(module, BasicBlock):
                module.bn2.weight.zero_()
            elif getattr(module, "use_res_connect", False):  # MobileNetV3, EfficientNet blocks
                norms = [m for m in module.block.modules() if isinstance(m, torch.nn.BatchNorm2d)]
                norms[-1].weight.zero_()
            else:
                continue
            count += 1
    return count
