"""JAX's activation-memory planners on a Flax twin, each step measured as XLA plans its memory.

The methods a JAX user has, named beside PyTorch's in ``footprint``:

- ``jax_none``: the training step under ``jax.jit``, nothing recomputed;
- ``jax_remat_every_<k>`` and ``jax_remat_sqrt_n``: ``nnx.remat`` (``jax.checkpoint``) around
  every run of k consecutive blocks, nothing inside saved: the same segments as
  ``torch.utils.checkpoint``'s baselines (``footprint.checkpoint_segments``);
- ``jax_policy_<name>``: ``nnx.remat`` around every block with one of JAX's standard policies
  (``jax.checkpoint_policies``), which saves what the policy names and recomputes the rest:
  ``dots_saveable`` keeps every convolution's and matmul's output, and
  ``dots_with_no_batch_dims_saveable`` only the matmuls without a batch dimension;
- ``jax_budget@<share>``: ``nnx.remat`` around every block with ``save_only_these_names`` over
  the values the twin names, chosen to keep at most that share of their bytes
  (``jax_budget``): the budget-matched counterpart of fwbench's μ-TWO plan.

**Peak memory** is XLA's own accounting of the compiled step (``compiled.memory_analysis()``):
its arguments, plus its outputs, less the outputs that reuse a donated argument's buffer, plus
the temporaries of its buffer assignment. The temporaries are the activations and the backward
pass's working buffers; they are what a planner changes. This is what XLA allocates, exact, not a
sample: the analogue of PyTorch's "inputs + the allocator's peak" in ``footprint``.

The step is Adam (optax, torch's defaults) on the softmax cross-entropy, parameters and optimizer
state donated, BatchNorm in training mode: the same step ``footprint.EagerStep`` runs. For
``bert`` (``models/flax_bert.py``) the loss is the masked-language-model loss over the masked
positions and dropout is active; a recomputed segment replays its dropout masks from the same
random state (JAX's keys are inputs of the recomputation), which the float64 gate checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
from flax import nnx

from fwbench.families.memory import jax_budget
from fwbench.families.memory.footprint import checkpoint_sizes
from fwbench.measure.timing import StopRule, measure_latency
from fwbench.models import equivalence

PEAK_SOURCE = (
    "XLA memory_analysis of the compiled step (arguments + outputs - donated + temporaries)"
)
# JAX's standard policies, by the name they have in ``jax.checkpoint_policies``
POLICIES = ("dots_saveable", "dots_with_no_batch_dims_saveable", "nothing_saveable")


@dataclass
class _JaxMeasurement:
    method: str
    peak_bytes: int  # arguments + outputs - aliased + temporaries
    temp_bytes: int  # the temporaries: activations and working buffers
    argument_bytes: int
    iter_ms: list[float]
    summary: dict
    source: str = PEAK_SOURCE


def method_name(
    size: int | None = None, policy: str | None = None, budget: float | None = None
) -> str:
    """``jax_none``, ``jax_remat_every_<k>``, ``jax_remat_sqrt_n``, ``jax_policy_<name>`` or
    ``jax_budget@<share>``."""
    if budget is not None:
        return f"jax_budget@{budget:g}"
    if policy is not None:
        if policy not in POLICIES:
            raise ValueError(f"unknown JAX checkpoint policy {policy!r}; one of {POLICIES}")
        return f"jax_policy_{policy}"
    if size is None:
        return "jax_none"
    return f"jax_remat_{'sqrt_n' if size == -1 else f'every_{size}'}"


def forward(model, x, size: int = 0, policy: Callable | None = None):
    """``model(x)`` with its blocks (``model.blocks()``) run in remat segments of ``size``
    blocks (0: none), each segment under ``policy`` (None: save nothing inside it)."""
    x = model.stem(x)
    blocks = model.blocks()
    if size < 1:
        for block in blocks:
            x = block(x)
        return model.head(x)

    def run(segment: nnx.List, x):
        for block in segment:
            x = block(x)
        return x

    remat = nnx.remat(run, policy=policy) if policy is not None else nnx.remat(run)
    for start in range(0, len(blocks), size):
        x = remat(nnx.List(blocks[start : start + size]), x)
    return model.head(x)


def _cross_entropy(logits, y):
    """The mean softmax cross-entropy over the targets that are not negative: every image's
    label, a masked-LM batch's masked positions (``cases.IGNORE`` elsewhere), as torch's
    ``cross_entropy`` with ``ignore_index``."""
    counted = y >= 0
    each = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(counted, y, 0))
    return jnp.sum(jnp.where(counted, each, 0.0)) / jnp.sum(counted)


def loss_fn(model, x, y, size: int = 0, policy: Callable | None = None):
    return _cross_entropy(forward(model, x, size, policy), y)


def train_step(size: int = 0, policy: Callable | None = None, lr: float = 1e-3):
    """``(graphdef, params, rest, opt_state, x, y) -> (params, rest, opt_state, loss)``: one
    Adam step of the split model (``rest``: BatchNorm statistics), all three donated."""
    optimizer = optax.adam(lr)

    def step(graphdef, params, rest, opt_state, x, y):
        def loss_of(params):
            module = nnx.merge(graphdef, params, rest, copy=True)
            loss = loss_fn(module, x, y, size, policy)
            return loss, nnx.split(module, nnx.Param, ...)[2]

        (loss, rest_after), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), rest_after, opt_state, loss

    return optimizer, jax.jit(step, static_argnums=0, donate_argnums=(1, 2, 3))


def methods(n_blocks: int, checkpoint_every: list[int], sqrt_n: bool, policies: list[str]):
    """The JAX methods as ``(name, size, policy function)``: none, each segmenting, each
    policy on every block. Segment sizes follow PyTorch's baselines (``checkpoint_sizes``)."""
    out = [(method_name(), 0, None)]
    for size, torch_name in checkpoint_sizes([None] * n_blocks, checkpoint_every, sqrt_n):
        name = method_name(-1 if torch_name.endswith("sqrt_n") else size)
        out.append((name, size, None))
    for policy in policies:
        out.append((method_name(policy=policy), 1, getattr(jax.checkpoint_policies, policy)))
    return out


def _peak_of(compiled) -> tuple[int, int, int]:
    """(peak, temporaries, arguments) in bytes from XLA's memory analysis of ``compiled``."""
    found = compiled.memory_analysis()
    peak = (
        found.argument_size_in_bytes
        + found.output_size_in_bytes
        - found.alias_size_in_bytes
        + found.temp_size_in_bytes
    )
    return int(peak), int(found.temp_size_in_bytes), int(found.argument_size_in_bytes)


def measure(
    model, x, y, name: str, size: int, policy, rule: StopRule, warmup: int = 1
) -> _JaxMeasurement:
    """Compile one method's step, read its memory, and time it (each call synced)."""
    optimizer, step = train_step(size, policy)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    held = [jax.tree.map(jnp.copy, params), jax.tree.map(jnp.copy, rest)]
    held.append(optimizer.init(held[0]))
    compiled = step.lower(graphdef, *held, x, y).compile()
    peak, temp, arguments = _peak_of(compiled)

    def call(_):
        out = compiled(*held, x, y)
        held[:] = out[:3]  # the donated buffers are gone: the next call takes the new ones
        return out[3]

    timing = measure_latency(call, [None], jax.block_until_ready, rule, warmup=warmup,
                             max_warmup=warmup)  # fmt: skip
    samples = [float(s) for s in timing.samples_ms()]
    return _JaxMeasurement(name, peak, temp, arguments, samples, timing.summary_ms())


def gradients(model, x, y, run: Callable | None = None) -> dict:
    """Every parameter's gradient of one step's loss, as numpy, keyed by its path; ``run(model,
    x)`` gives the logits (default: ``forward`` as written)."""
    run = run or forward
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_of(params):
        return _cross_entropy(run(nnx.merge(graphdef, params, rest, copy=True), x), y)

    flat = jax.tree_util.tree_flatten_with_path(jax.grad(loss_of)(params))[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


def gate(
    model, x, y, tolerance: float, size: int = 0, policy=None, run: Callable | None = None,
    plain: Callable | dict | None = None,
) -> dict:  # fmt: skip
    """One step's gradients under a plan (segments of ``size`` blocks under ``policy``, or any
    ``run(model, x)``) against the plain step's (``plain``: its forward, or its gradients
    already computed): the largest absolute difference, the tensor it is on, and whether it is
    within ``tolerance``. Run it on a float64 model and batch (inside
    ``equivalence.float64_on_cpu()``)."""
    planned = gradients(model, x, y, run or functools.partial(forward, size=size, policy=policy))
    worst, where = 0.0, ""
    reference = plain if isinstance(plain, dict) else gradients(model, x, y, plain)
    for key, value in reference.items():
        diff = float(np.max(np.abs(value - planned[key]))) if value.size else 0.0
        if diff > worst:
            worst, where = diff, key
    return {"exact_max_abs_diff": worst, "worst_tensor": where, "passed": worst <= tolerance}


@dataclass(frozen=True)
class Inputs:
    """What a model's batch is made of: images (``image_size``, ``num_classes``) or, for
    ``bert``, token sequences (``seq_len``, ``encoder_size`` as in ``cases.ENCODER_CONFIGS``)."""

    image_size: int = 224
    num_classes: int = 1000
    seq_len: int = 128
    encoder_size: str = "base"


def twin(model: str, inputs: Inputs, seed: int = 0):
    """The Flax twin of ``model``, weights ported from torch's seeded ones: the registry's for an
    image model, ``flax_bert``'s for ``bert`` (the memory family's masked-LM BERT, dropout
    active). A planner needs its ``stem``, ``blocks()`` and ``head``."""
    if model == "bert":
        from fwbench.families.memory import cases
        from fwbench.models import flax_bert

        case = cases.build_case(
            "bert", 1, seq_len=inputs.seq_len, encoder_size=inputs.encoder_size, seed=seed
        )
        return flax_bert.from_torch(case.model, seed=seed)
    from fwbench.models import build_pair

    _, flax_model = build_pair(
        model, seed=seed, num_classes=inputs.num_classes, image_size=inputs.image_size
    )
    if not all(hasattr(flax_model, part) for part in ("stem", "blocks", "head")):
        raise ValueError(f"{model}'s Flax twin has no blocks to plan over (ResNets and bert have)")
    return flax_model


def batch(model: str, batch_size: int, inputs: Inputs, seed: int = 0, dtype=np.float32):
    """One batch and its targets as numpy: the masked-LM batch torch's ``cases.build_case``
    draws from the same seed for ``bert`` (token ids and mask, ``cases.IGNORE`` where no
    target), else random images (NHWC, ``dtype``) and labels."""
    if model == "bert":
        import torch

        from fwbench.families.memory import cases

        vocab = cases.ENCODER_CONFIGS[inputs.encoder_size][-1]
        gen = torch.Generator().manual_seed(seed)
        tokens, targets = cases.masked_lm_batch(batch_size, inputs.seq_len, vocab, gen)
        return tokens.numpy().astype(np.int32), targets.numpy().astype(np.int32)
    rng = np.random.default_rng(seed)
    size = inputs.image_size
    x = rng.standard_normal((batch_size, size, size, 3)).astype(dtype)
    return x, rng.integers(0, inputs.num_classes, batch_size).astype(np.int32)


def run_batch(
    model: str,
    batch_size: int,
    *,
    inputs: Inputs,
    rule: StopRule,
    checkpoint_every: list[int] = (1,),
    sqrt_n: bool = True,
    policies: list[str] = POLICIES,
    budgets: list[float] = (),
    exact_check: bool = True,
    tolerance: float = 1e-10,
    rotation: int = 0,
    seed: int = 0,
) -> pd.DataFrame:
    """Every JAX method on ``model``'s twin at one batch size, measured in turn from position
    ``rotation``: a frame shaped like ``memory_records.summary_frame`` (savings and overheads against
    ``jax_none``), with each plan's float64 gate where ``exact_check``. ``budgets`` adds a
    policy per budget that saves the twin's named activations a knapsack picks (``jax_budget``)."""
    from fwbench.families.memory.footprint import rotated

    flax_model = twin(model, inputs, seed)
    found = methods(len(flax_model.blocks()), list(checkpoint_every), sqrt_n, list(policies))
    x, y = (jnp.asarray(a) for a in batch(model, batch_size, inputs, seed))
    saved = {}  # a budget policy's names, chosen on this batch's sizes
    if budgets:
        named = _named_activations(flax_model, x)
        for budget in budgets:
            name = method_name(budget=budget)
            saved[name] = jax_budget.choose(named, budget)
            found.append((name, 1, jax_budget.policy(saved[name])))
    measured = {
        name: measure(flax_model, x, y, name, size, policy, rule)
        for name, size, policy in rotated(found, rotation)
    }
    gates = {}
    if exact_check:
        with equivalence.float64_on_cpu():
            model64 = equivalence.flax_float64(flax_model)
            x64, y64 = (jnp.asarray(a) for a in batch(model, 2, inputs, seed, np.float64))
            plain = gradients(model64, x64, y64)  # once, for every plan
            for name, size, policy in found[1:]:
                gates[name] = gate(model64, x64, y64, tolerance, size, policy, plain=plain)
    ref = measured[method_name()]
    rows = []
    for name, _, _ in found:
        m = measured[name]
        rows.append({
            "batch_size": batch_size, "method": name, "kind": _kind(name),
            "budget": float(name.split("@")[1]) if name in saved else None,
            "saved_names": saved.get(name),
            "peak_bytes": m.peak_bytes, "xla_temp_bytes": m.temp_bytes,
            "iter_time_ms": m.summary["p50"], "n": len(m.iter_ms),
            "iter_ci_low_ms": m.summary["median_ci_low"],
            "iter_ci_high_ms": m.summary["median_ci_high"],
            "memory_saved_pct": 100.0 * (ref.peak_bytes - m.peak_bytes) / ref.peak_bytes,
            "activation_saved_pct": 100.0 * (ref.temp_bytes - m.temp_bytes) / ref.temp_bytes,
            "overhead_pct": 100.0 * (m.summary["p50"] / ref.summary["p50"] - 1),
            "exact_max_abs_diff": gates.get(name, {}).get("exact_max_abs_diff"),
            # a gate that failed names the tensor furthest off (memory_records.add_records keeps it)
            "exact_worst": None if gates.get(name, {}).get("passed", True)
            else gates[name]["worst_tensor"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def use_compile_cache() -> str:
    """Keep XLA's compiled steps on disk (JAX's persistent compilation cache, in the system's
    temporary folder): a campaign's later trials, each a fresh process, then load the programs
    the first compiled instead of compiling ResNet-152's step again for every method. The
    program is the same; only the compile is saved. Returns the folder."""
    import os
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), "fwbench-jax-compile-cache")
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return folder


def _named_activations(model, x) -> list:
    """The values the twin's blocks name (``checkpoint_name``) in one forward pass of ``x``."""
    graphdef, state = nnx.split(model)
    return jax_budget.named_activations(
        lambda state, x: forward(nnx.merge(graphdef, state), x), state, x
    )


def _kind(name: str) -> str:
    """A method's line on the memory-time curve, as ``study.method_kind`` names PyTorch's:
    ``jax_remat`` for the segmentings, ``jax_policy`` for the policies, ``jax_budget`` for the
    budget policies, ``jax_none``."""
    if name.startswith("jax_budget@"):
        return "jax_budget"
    for kind in ("jax_remat", "jax_policy"):
        if name.startswith(kind + "_"):
            return kind
    return name
