"""Training parity: K steps on both frameworks from the same weights and batches, compared.

The proof runs in float64 on both sides (torch ``.double()``, JAX under ``jax.enable_x64``): the
same ported weights, the same batches, one optimizer description (``OptimConfig``) built as
``torch.optim`` and as optax, dropout and stochastic depth off (the frameworks would draw
different masks), BatchNorm in training mode. Torch runs eager, JAX jitted: the reference is
torch as users write it. The gate:

- every step's loss agrees to ``LOSS_TOLERANCE`` relative;
- every parameter and BatchNorm statistic after the last step agrees to ``PARAM_TOLERANCE``
  (max|delta| / max|torch| per tensor; running means in units of their channel's std).

In float64 rounding starts nine orders of magnitude below fp32's, which leaves room for a net
that amplifies it a millionfold over the run, but not for training that is chaotic, where two
runs of ONE framework whose weights start 1e-14 apart end up 1e-1 apart. The notebook's parity
setup avoids the three chaotic regimes measured that way: CNNs at 32 px, where the last maps are
1x1 (``parity_image_size``); torchvision's initialisation of residual nets
(``zero_init_residual_``); the upsampled digits (noise batches instead).

The same run in fp32 is a measurement, not a gate: on an ill-conditioned net (ResNet-50 at
torchvision's initialisation, BatchNorm in training mode) fp32 agreement measures how the CPU's
kernels round, 3e-7 after 16 steps on one Intel Xeon and 4.7e-3 on an AMD EPYC. Its curves are
kept, with the first step at which the losses differ by more than ``FP32_DIVERGENCE``.

Tensors whose exact gradient is zero are skipped by the parameter gate, by a stated rule. A
BatchNorm bias followed by a 1x1 convolution and a training-mode BatchNorm (EfficientNet-B0's
and MobileNetV3's projection layers) only adds a per-channel constant that the next BatchNorm
subtracts, so the loss does not depend on it; its computed gradient is rounding noise, which
Adam-type optimizers divide by its own size (bounded below only by ``eps``) into steps that
share nothing between the two sides, in fp64 too (EfficientNet-B0, AdamW 1e-4, 20 steps: those
biases differ by up to 1e-3 of the noise floor while every other tensor agrees to 2e-10). The
rule: a parameter is skipped when its fp64 gradient norm stays below ``ZERO_GRADIENT_RATIO`` of
the step's largest at every step, on both sides. The running means those tensors shift (the
BatchNorms whose input mean moves when the skipped tensors are moved, found by perturbing them
on a copy of the torch model) are skipped with them; the loss gate covers everything.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fwbench.families.training.optim import OptimConfig
from fwbench.families.training.steps import JaxTrainer, TorchTrainer, configure_precision
from fwbench.models.equivalence import max_rel_err

_PARITY_PRECISIONS = ("fp64", "fp32")
LOSS_TOLERANCE = 1e-9  # fp64: per-step |loss_jax - loss_torch| / |loss_torch|
PARAM_TOLERANCE = 1e-8  # fp64: per tensor after the K steps
# fp32 is measured, not gated: the first step whose losses differ by more than this is reported
FP32_DIVERGENCE = 1e-3
# A gradient this far below the step's largest is rounding of an exact zero: fp64 rounding sits
# near 1e-16 of the largest, and the smallest genuine gradient in the registry's nets near 1e-7.
ZERO_GRADIENT_RATIO = 1e-12
# A tensor this small is compared absolutely (divided by this floor) rather than by its own size:
# values at rounding level on both sides share no digits however exact the port.
NOISE_FLOOR = 1e-6
# Training-mode BatchNorm over a handful of values per channel is a degenerate function: with two
# it outputs about +-1 whatever its input, and its gradient is so ill-conditioned that two torch
# fp64 runs whose weights differ by 1e-14 differ by 1e-6 in the loss one step later, even at
# SGD 1e-6 (EfficientNet-B0 at 32 px, batch 2, where the last maps are 1x1). With the last
# feature map 3x3 the same probe ends 20 steps at 3e-10 (SGD 0.005), so the registry's stride-32
# CNNs train for parity at no less than 96 px.
_CNN_STRIDE = 32
MIN_FEATURE_MAP = 3
# A BatchNorm's running mean counts as shifted by the skipped tensors when moving them by one
# moves its input's batch mean by more than this many channel standard deviations.
SHIFT_THRESHOLD = 1e-6


@dataclass
class ParityResult:
    model: str
    precision: str
    optimizer: dict
    torch_losses: list[float]
    jax_losses: list[float]
    loss_rel: list[float]  # per step
    param_errors: dict[str, float]  # per trainable tensor, torch keys
    buffer_errors: dict[str, float]  # BatchNorm running statistics
    stochastic_layers_disabled: int
    residual_branches_zeroed: int
    # parameters whose exact gradient is zero: name -> largest gradient-norm ratio over the
    # steps, per framework; and the running statistics they shift
    skipped_params: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped_statistics: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    image_size: int | None = None

    @property
    def steps(self) -> int:
        return len(self.torch_losses)

    @property
    def gated(self) -> bool:
        """Whether this run is the proof (fp64) rather than a measurement (fp32)."""
        return self.precision == "fp64"

    @property
    def loss_max_rel(self) -> float:
        return float(max(self.loss_rel))

    def divergence_step(self, threshold: float = FP32_DIVERGENCE) -> int | None:
        """The first step whose losses differ by more than ``threshold``; None if none does."""
        above = np.flatnonzero(np.asarray(self.loss_rel) > threshold)
        return int(above[0]) if above.size else None

    @staticmethod
    def _worst(errors: dict[str, float]) -> tuple[str | None, float]:
        if not errors:
            return None, 0.0
        key = max(errors, key=errors.get)
        return key, float(errors[key])

    @property
    def gated_param_errors(self) -> dict[str, float]:
        return {k: v for k, v in self.param_errors.items() if k not in self.skipped_params}

    @property
    def gated_buffer_errors(self) -> dict[str, float]:
        skipped = set(self.skipped_statistics)
        return {k: v for k, v in self.buffer_errors.items() if k not in skipped}

    @property
    def worst_param(self) -> tuple[str | None, float]:
        """The worst parameter the gate compares (skipped tensors left out)."""
        return self._worst(self.gated_param_errors)

    @property
    def worst_buffer(self) -> tuple[str | None, float]:
        return self._worst(self.gated_buffer_errors)

    def failures(self) -> list[str]:
        """Why the fp64 gate fails; empty when it passes, and always for an fp32 measurement."""
        if not self.gated:
            return []
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
    precision: str = "fp64",
    seed: int = 0,
    num_classes: int = 10,
    image_size: int = 224,
    devices: dict[str, str] | None = None,
    zero_init: bool = True,
) -> ParityResult:
    """Train a fresh registry pair in ``precision``, one batch per step, and compare the sides.

    ``zero_init`` starts every residual branch at zero (``zero_init_residual_``) on both sides.
    """
    from fwbench.families.training.steps import disable_stochastic_layers
    from fwbench.models import build_pair, get_spec, porting

    _check_parity_input(batches, precision)
    torch_model, flax_model = build_pair(
        model, seed=seed, num_classes=num_classes, image_size=image_size
    )
    links_fn = get_spec(model).flax_impl().links
    zeroed = zero_init_residual_(torch_model) if zero_init else 0
    if zeroed:
        porting.port_state_dict(links_fn(flax_model), torch_model.state_dict())
    disabled = disable_stochastic_layers(torch_model, flax_model)
    result = compare_training(
        torch_model,
        flax_model,
        links_fn,
        batches,
        config,
        precision=precision,
        devices=devices,
        name=model,
    )
    result.stochastic_layers_disabled = disabled
    result.residual_branches_zeroed = zeroed
    result.image_size = image_size
    return result


def parity_image_size(model: str, image_size: int) -> int:
    """The input size parity trains at: ``image_size``, raised for a CNN until its last feature
    map is ``MIN_FEATURE_MAP`` wide (a ViT's architecture depends on its size, and has no
    BatchNorm)."""
    from fwbench.models import get_spec

    if get_spec(model).kind != "cnn":
        return image_size
    return max(image_size, _CNN_STRIDE * MIN_FEATURE_MAP)


def _check_parity_input(batches: Sequence[tuple[np.ndarray, np.ndarray]], precision: str) -> None:
    if precision not in _PARITY_PRECISIONS:
        raise ValueError(f"parity precision must be one of {_PARITY_PRECISIONS}, got {precision!r}")
    if len(batches) < 1:
        raise ValueError("parity needs at least one batch")
    if min(len(labels) for _, labels in batches) < 2:
        raise ValueError("parity needs batches of at least 2: training-mode BatchNorm needs two")


def compare_training(
    torch_model,
    flax_model,
    links_fn,
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    config: OptimConfig,
    *,
    precision: str = "fp64",
    devices: dict[str, str] | None = None,
    name: str = "",
) -> ParityResult:
    """Train a torch model and its Flax twin (holding the same weights, linked by ``links_fn``)
    side by side, one batch per step, and compare losses, gradients and final state."""
    _check_parity_input(batches, precision)
    settings = {
        "torch": configure_precision("torch", precision),
        "jax": configure_precision("jax", precision),
    }
    devices = devices or {"torch": "cpu", "jax": "cpu"}
    torch_side = TorchTrainer(
        torch_model, config, device=devices["torch"], precision=precision, mode="eager"
    )
    jax_side = JaxTrainer(
        flax_model,
        config,
        device=devices["jax"],
        precision=precision,
        mode="jit",
        record_grad_norms=True,
    )

    losses = {"torch": [], "jax": []}
    grad_norms = {"torch": [], "jax": []}
    for images, labels in batches:
        for trainer in (torch_side, jax_side):
            loss = trainer.step(trainer.put(images, labels))
            losses[trainer.framework].append(trainer.loss_value(loss))
        grad_norms["torch"].append(torch_side.grad_norms())
        grad_norms["jax"].append(jax_side.grad_norms(links_fn))
    torch_losses = np.asarray(losses["torch"], np.float64)
    jax_losses = np.asarray(losses["jax"], np.float64)
    loss_rel = np.abs(jax_losses - torch_losses) / np.maximum(np.abs(torch_losses), 1e-12)

    reference = torch_side.state_dict()
    exported = jax_side.state_dict(links_fn)
    if reference.keys() != exported.keys():
        missing = sorted(reference.keys() - exported.keys())[:5]
        extra = sorted(exported.keys() - reference.keys())[:5]
        raise KeyError(f"state dicts differ: missing {missing}, extra {extra}")
    trainable = {key for key, _ in torch_model.named_parameters()}
    errors = {
        key: _running_mean_error(exported[key], reference[key], reference[_var_key(key)])
        if key.endswith("running_mean")
        else _tensor_error(exported[key], reference[key])
        for key in reference
    }
    skipped = zero_gradient_params(grad_norms["torch"], grad_norms["jax"])
    shifted = statistics_shifted_by(torch_side, sorted(skipped), batches[0][0]) if skipped else []
    return ParityResult(
        model=name,
        precision=precision,
        optimizer=config.describe(),
        torch_losses=torch_losses.tolist(),
        jax_losses=jax_losses.tolist(),
        loss_rel=loss_rel.tolist(),
        param_errors={k: v for k, v in errors.items() if k in trainable},
        buffer_errors={k: v for k, v in errors.items() if k not in trainable},
        stochastic_layers_disabled=0,
        residual_branches_zeroed=0,
        skipped_params=skipped,
        skipped_statistics=shifted,
        settings=settings,
    )


def zero_gradient_params(
    torch_norms: Sequence[dict[str, float]], jax_norms: Sequence[dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Parameters whose gradient norm stays below ``ZERO_GRADIENT_RATIO`` of the step's largest
    at every step, on both sides; each with its largest ratio over the steps per framework.

    Every step, not only the first: a net whose head starts at zero (torchvision's ViT) has
    exactly zero gradients everywhere else on its first step, and real ones after.
    """
    ratios = {}
    for framework, per_step in (("torch", torch_norms), ("jax", jax_norms)):
        if not per_step:
            raise ValueError("no gradient norms to judge")
        worst = {}
        for norms in per_step:
            largest = max(norms.values())
            for name, norm in norms.items():
                ratio = norm / largest if largest > 0 else 0.0
                worst[name] = max(worst.get(name, 0.0), ratio)
        ratios[framework] = worst
    if ratios["torch"].keys() != ratios["jax"].keys():
        raise KeyError("the two sides report gradients for different parameters")
    return {
        name: {fw: float(f"{ratios[fw][name]:.3e}") for fw in ("torch", "jax")}
        for name in sorted(ratios["torch"])
        if ratios["torch"][name] < ZERO_GRADIENT_RATIO and ratios["jax"][name] < ZERO_GRADIENT_RATIO
    }


def statistics_shifted_by(torch_side: TorchTrainer, names: list[str], images) -> list[str]:
    """Running means (torch keys) of the BatchNorms whose input mean moves when the parameters
    ``names`` are moved by one: the statistics a zero-gradient tensor's drift shifts.

    Measured on a copy of the trained torch model in training mode, so each BatchNorm removes
    the shift from what follows it and only the BatchNorms right after the moved tensors see it.
    """
    import torch

    probe = copy.deepcopy(torch_side.model).train()
    norms = {
        name: module
        for name, module in probe.named_modules()
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
    }
    seen = {}

    def recorder(name):
        def record(_module, inputs, _output):
            x = inputs[0]
            dims = [d for d in range(x.ndim) if d != 1]
            seen[name] = (x.mean(dims), x.var(dims))

        return record

    handles = [module.register_forward_hook(recorder(name)) for name, module in norms.items()]
    x, _ = torch_side.put(images, np.zeros(len(images), np.int64))
    try:
        with torch.no_grad():
            probe(x)
            before = dict(seen)
            params = dict(probe.named_parameters())
            for name in names:
                params[name].add_(1.0)
            probe(x)
    finally:
        for handle in handles:
            handle.remove()
    shifted = []
    for name, module in norms.items():
        mean, var = before[name]
        shift = (seen[name][0] - mean).abs() / (var + module.eps).sqrt()
        if float(shift.max()) > SHIFT_THRESHOLD:
            shifted.append(f"{name}.running_mean")
    return shifted


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
    residual nets chaotic: two float64 torch runs of ResNet-50 whose weights start 1e-14 apart
    differ by 1e-1 in the loss within 20 steps (at 32 px and at 96 px), so no two implementations
    can agree there. With every block starting as the identity the same runs stay within 7e-12
    (32 px, batch 4) and 2e-14 (64 px, batch 2), and all parameters still train (the zeroed
    scales get gradients on the first step).
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
