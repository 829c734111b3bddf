"""The one image preprocessing both frameworks see.

Decode, resize and crop happen once with PIL, normalisation once with numpy; the result is a float32
NCHW numpy batch handed unchanged to torch (``torch.from_numpy(batch)``) and, transposed, to JAX
(``jnp.asarray(to_nhwc(batch))``). Neither framework re-implements any step, so their inputs are
bit-identical by construction.

The steps are torchvision's ImageNet evaluation transform (``Resize(256)``, ``CenterCrop(224)``,
``ToTensor()``, ``Normalize(mean, std)``) with the same geometry and arithmetic: pixels are scaled
to [0, 1] *before* the ImageNet mean/std (which are 0-1 statistics) are applied.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from os import PathLike

import numpy as np
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_ImageSource = Image.Image | bytes | str | PathLike


def resize_size_for(crop_size: int) -> int:
    """Shorter-side size before the centre crop: 256 for a 224 crop, the same ratio otherwise."""
    return round(crop_size * 256 / 224)


def decode(source: _ImageSource) -> Image.Image:
    """An RGB PIL image from encoded bytes, a file path or an image (grey/CMYK/alpha converted)."""
    if isinstance(source, Image.Image):
        image = source
    elif isinstance(source, bytes | bytearray | memoryview):
        image = Image.open(io.BytesIO(source))
    else:
        image = Image.open(source)
    return image if image.mode == "RGB" else image.convert("RGB")


def resize_center_crop(image: Image.Image, crop_size: int) -> np.ndarray:
    """uint8 HWC pixels: shorter side to ``resize_size_for(crop_size)``, then the centre crop.

    Output sizes and crop offsets follow torchvision's rules (long side truncated, offsets rounded)
    so that the same PIL bilinear (antialiased) resize sees the same target.
    """
    short_target = resize_size_for(crop_size)
    width, height = image.size
    if width <= height:
        size = (short_target, int(short_target * height / width))
    else:
        size = (int(short_target * width / height), short_target)
    image = image.resize(size, Image.Resampling.BILINEAR)
    top = int(round((size[1] - crop_size) / 2.0))
    left = int(round((size[0] - crop_size) / 2.0))
    return np.asarray(image.crop((left, top, left + crop_size, top + crop_size)), dtype=np.uint8)


def normalize(pixels: np.ndarray) -> np.ndarray:
    """uint8 NHWC (or one HWC image) -> float32 NCHW: ``(x / 255 - mean) / std`` per channel."""
    pixels = np.asarray(pixels)
    if pixels.dtype != np.uint8:
        raise TypeError(f"expected uint8 pixels in [0, 255], got {pixels.dtype}")
    if pixels.ndim == 3:
        pixels = pixels[None]
    if pixels.ndim != 4 or pixels.shape[-1] != 3:
        raise ValueError(f"expected NHWC pixels with 3 channels, got shape {pixels.shape}")
    scaled = pixels.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255)
    mean = np.asarray(IMAGENET_MEAN, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(IMAGENET_STD, np.float32).reshape(1, 3, 1, 1)
    return np.ascontiguousarray((scaled - mean) / std)


def preprocess(sources: Iterable[_ImageSource], image_size: int = 224) -> np.ndarray:
    """Decoded, resized, centre-cropped and normalised images as one float32 NCHW batch."""
    crops = [resize_center_crop(decode(source), image_size) for source in sources]
    if not crops:
        return np.zeros((0, 3, image_size, image_size), np.float32)
    return normalize(np.stack(crops))


def to_nhwc(batch: np.ndarray) -> np.ndarray:
    """The NCHW batch in JAX's (and Flax convolutions') channels-last layout."""
    return np.ascontiguousarray(np.asarray(batch).transpose(0, 2, 3, 1))
