"""Inputs for both frameworks: one preprocessing definition, synthetic batches, local datasets.

Every loader returns float32 NCHW numpy batches; torch takes them as they are and JAX takes
``to_nhwc(batch)``, so the two frameworks always see bit-identical inputs.
"""

from fwbench.data.imagenet100 import ImageFolder, ImageNet100
from fwbench.data.preprocess import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    decode,
    normalize,
    preprocess,
    resize_center_crop,
    resize_size_for,
    to_nhwc,
)
from fwbench.data.synthetic import (
    digits_dataset,
    rotating_batches,
    synthetic_batch,
    synthetic_input,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageFolder",
    "ImageNet100",
    "decode",
    "digits_dataset",
    "normalize",
    "preprocess",
    "resize_center_crop",
    "resize_size_for",
    "rotating_batches",
    "synthetic_batch",
    "synthetic_input",
    "to_nhwc",
]
