"""Weight porting between a torchvision ``state_dict`` and a Flax NNX model, both directions.

Each Flax model module lists its ``Link``s: which torch key feeds which Flax variable and how the
layout changes (conv OIHW -> HWIO, linear (out, in) -> (in, out), or a custom pair of functions).
Porting and exporting are then the same generic loop, so the round trip is lossless by construction
and checked by the tests: every torch key must be consumed exactly once and every shape must match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

# Keys torchvision stores that carry no weight: BatchNorm's step counter.
IGNORED_SUFFIXES = ("num_batches_tracked",)


def _identity(a: np.ndarray) -> np.ndarray:
    return a


def _conv_to_flax(w: np.ndarray) -> np.ndarray:
    return np.transpose(w, (2, 3, 1, 0))  # OIHW -> HWIO


def _conv_to_torch(w: np.ndarray) -> np.ndarray:
    return np.transpose(w, (3, 2, 0, 1))  # HWIO -> OIHW


def _linear_swap(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w.T)


@dataclass
class Link:
    key: str  # torch state_dict key
    variable: object  # the nnx.Variable it fills
    to_flax: Callable[[np.ndarray], np.ndarray] = _identity
    to_torch: Callable[[np.ndarray], np.ndarray] = _identity


def conv_links(conv, prefix: str) -> list[Link]:
    links = [Link(f"{prefix}.weight", conv.kernel, _conv_to_flax, _conv_to_torch)]
    if getattr(conv, "bias", None) is not None:
        links.append(Link(f"{prefix}.bias", conv.bias))
    return links


def linear_links(linear, prefix: str) -> list[Link]:
    links = [Link(f"{prefix}.weight", linear.kernel, _linear_swap, _linear_swap)]
    if getattr(linear, "bias", None) is not None:
        links.append(Link(f"{prefix}.bias", linear.bias))
    return links


def batchnorm_links(bn, prefix: str) -> list[Link]:
    return [
        Link(f"{prefix}.weight", bn.scale),
        Link(f"{prefix}.bias", bn.bias),
        Link(f"{prefix}.running_mean", bn.mean),
        Link(f"{prefix}.running_var", bn.var),
    ]


def layernorm_links(ln, prefix: str) -> list[Link]:
    return [Link(f"{prefix}.weight", ln.scale), Link(f"{prefix}.bias", ln.bias)]


def as_numpy(value) -> np.ndarray:
    # Always a copy: JAX on CPU may alias a numpy buffer, and torch updates its buffers in place.
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        return value.detach().cpu().numpy().copy()
    return np.array(value, copy=True)


def port_state_dict(links: list[Link], state_dict: Mapping) -> None:
    """Fill the linked Flax variables from ``state_dict``. Strict: no key missing, none left over."""
    import jax.numpy as jnp

    wanted = {link.key for link in links}
    if len(wanted) != len(links):
        raise ValueError("a torch key is linked twice; the port would not be a bijection")
    present = {k for k in state_dict if not k.endswith(IGNORED_SUFFIXES)}
    missing, unused = sorted(wanted - present), sorted(present - wanted)
    if missing or unused:
        raise KeyError(
            f"state_dict does not match the Flax model: missing {missing[:5]}, unused {unused[:5]}"
        )
    for link in links:
        value = link.to_flax(as_numpy(state_dict[link.key]))
        current = link.variable.get_value()
        if tuple(value.shape) != tuple(current.shape):
            raise ValueError(
                f"{link.key}: torch shape maps to {value.shape}, Flax expects {current.shape}"
            )
        link.variable.set_value(jnp.asarray(value, dtype=current.dtype))


def export_state_dict(links: list[Link]) -> dict[str, np.ndarray]:
    """The inverse of ``port_state_dict``: torch-layout numpy arrays keyed like torchvision."""
    return {link.key: link.to_torch(np.asarray(link.variable.get_value())) for link in links}


def load_torchvision_weights(path) -> dict:
    """Load torchvision weights cached on disk (e.g. ``~/.cache/torch/hub/checkpoints/resnet50-*.pth``).

    Nothing is downloaded: a study run offline must use exactly the file the user points at.
    """
    import torch

    state_dict = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state_dict, dict) and "state_dict" in state_dict:
        state_dict = state_dict["state_dict"]
    if not isinstance(state_dict, dict):
        raise ValueError(f"{path} does not hold a state_dict")
    return state_dict
