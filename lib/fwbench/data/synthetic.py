"""Data that needs no download: seeded random batches, and scikit-learn's bundled digits.

Benchmarks use normal noise rather than zeros: constant inputs let a backend skip work (or hit
special-cased kernels) that real images would not, which would flatter whichever framework does so.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from fwbench.data.preprocess import normalize


def synthetic_batch(
    batch_size: int, image_size: int, seed: int, num_classes: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """(float32 NCHW standard-normal images, int64 labels in [0, num_classes)), fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch_size, 3, image_size, image_size), dtype=np.float32)
    labels = rng.integers(0, num_classes, size=batch_size, dtype=np.int64)
    return images, labels


# token ids are drawn below this: a valid id in any text model's vocabulary (BERT's has 30,522)
_TOKEN_IDS = 1000
_INPUT_KINDS = ("image", "tokens", "audio")


def synthetic_input(inputs: str, batch_size: int, size: int, seed: int) -> np.ndarray:
    """One seeded batch of a model's input kind: float32 NCHW images of ``size`` pixels a side,
    int64 token ids of ``size`` tokens, or float32 audio of ``size`` samples."""
    if inputs == "image":
        return synthetic_batch(batch_size, size, seed)[0]
    rng = np.random.default_rng(seed)
    if inputs == "tokens":
        return rng.integers(0, _TOKEN_IDS, size=(batch_size, size), dtype=np.int64)
    if inputs == "audio":
        return rng.standard_normal((batch_size, size), dtype=np.float32)
    raise ValueError(f"inputs must be one of {_INPUT_KINDS}, got {inputs!r}")


def rotating_batches(
    n: int, batch_size: int, image_size: int, seed: int = 0, num_classes: int = 1000
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` distinct batches to cycle through, so no call can reuse a cached result of the last.

    Each batch has its own seed spawned from ``seed``, so batch i is the same whatever ``n`` is.
    """
    children = np.random.SeedSequence(seed).spawn(n)
    return [
        synthetic_batch(batch_size, image_size, int(child.generate_state(1)[0]), num_classes)
        for child in children
    ]


def digits_dataset(
    image_size: int, split: str = "train", seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits (1,797 images, 10 classes) as ImageNet-style inputs.

    Each digit is scaled to 0-255, upsampled to ``image_size`` with PIL's bilinear resize, repeated
    to three channels and normalised like every other input. There is no centre crop: the digits
    fill their 8x8 frame and a crop would cut strokes. The 80/20 train/val split is a permutation
    fixed by ``seed``. Returns float32 NCHW images and int64 labels.
    """
    from sklearn.datasets import load_digits

    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    n_train = int(round(0.8 * len(order)))
    chosen = order[:n_train] if split == "train" else order[n_train:]
    grey = np.rint(digits.images[chosen] * (255 / 16)).astype(np.uint8)  # values are 0..16
    upsampled = np.stack(
        [
            np.asarray(
                Image.fromarray(img).resize((image_size, image_size), Image.Resampling.BILINEAR)
            )
            for img in grey
        ]
    )
    rgb = np.repeat(upsampled[..., None], 3, axis=-1)
    return normalize(rgb), digits.target[chosen].astype(np.int64)
