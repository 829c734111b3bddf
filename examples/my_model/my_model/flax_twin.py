"""TinyCNN's Flax NNX twin, layer for layer the PyTorch model's, and its weight map.

A twin module has two functions: ``build_flax(num_classes, *, rngs)`` and ``links(model)``, one
``porting.Link`` per key of the PyTorch ``state_dict``. fwbench ports the PyTorch weights through
the links and proves in float64 that both compute the same function (``01_validation``). The
twin takes images channels-last (batch, H, W, 3), as every JAX model in fwbench does.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from fwbench.models import porting
from fwbench.models.layers import TorchBatchNorm
from my_model.torch_side import WIDTHS


class TinyCNN(nnx.Module):
    def __init__(self, num_classes: int = 10, *, rngs: nnx.Rngs):
        cins = (3, *WIDTHS[:-1])
        self.convs = nnx.List(
            nnx.Conv(
                cin,
                cout,
                (3, 3),
                (1, 1) if i == 0 else (2, 2),
                padding=((1, 1), (1, 1)),
                use_bias=False,
                rngs=rngs,
            )
            for i, (cin, cout) in enumerate(zip(cins, WIDTHS, strict=True))
        )
        # torch's BatchNorm semantics (unbiased running variance, its momentum convention)
        self.norms = nnx.List(TorchBatchNorm(cout) for cout in WIDTHS)
        self.classifier = nnx.Linear(WIDTHS[-1], num_classes, rngs=rngs)

    def __call__(self, x):
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = jax.nn.relu(norm(conv(x)))
        return self.classifier(jnp.mean(x, axis=(1, 2)))


def build_flax(num_classes: int = 10, *, rngs: nnx.Rngs, image_size: int = 32) -> TinyCNN:
    del image_size  # a CNN takes any size
    return TinyCNN(num_classes, rngs=rngs)


def links(model: TinyCNN) -> list[porting.Link]:
    out = []
    for i, (conv, norm) in enumerate(zip(model.convs, model.norms, strict=True)):
        out += porting.conv_links(conv, f"features.{i}.0")
        out += porting.batchnorm_links(norm, f"features.{i}.1")
    return out + porting.linear_links(model.classifier, "classifier")
