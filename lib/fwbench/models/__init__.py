"""The model zoo: torchvision references, native Flax NNX twins and the weight porting between them."""

from fwbench.models.registry import MODELS, ModelSpec, build_pair, build_torch, get_spec

__all__ = ["MODELS", "ModelSpec", "build_pair", "build_torch", "get_spec"]
