"""Training data for both frameworks from one seeded sampler.

Whatever the dataset, batches come out as host numpy (float32 NCHW images, int64 labels) and both
trainers consume the very same arrays in the very same order; augmentation is off. Incomplete
last batches are dropped so every step has one shape (a new shape would recompile the JAX step
and torch.compile's graph, and would weigh samples differently in the mean loss).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

_DATASETS = ("synthetic", "digits", "imagenet100")
_NUM_CLASSES = {"synthetic": 1000, "digits": 10, "imagenet100": 100}
SYNTHETIC_BATCHES_PER_EPOCH = 50  # an "epoch" of noise only sets how often the sampler reseeds

Batch = tuple[np.ndarray, np.ndarray]


def _epoch_seed(seed: int, epoch: int) -> int:
    """A seed per (run seed, epoch) so every epoch has its own order and runs can be repeated."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def _array_batches(
    images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int, epoch: int
) -> Iterator[Batch]:
    """One shuffled pass over in-memory arrays, full batches only."""
    order = np.random.default_rng(_epoch_seed(seed, epoch)).permutation(len(labels))
    for start in range(0, len(order) - batch_size + 1, batch_size):
        index = np.sort(order[start : start + batch_size])  # sorted: contiguous-ish reads
        yield images[index], labels[index]


@dataclass
class TrainingData:
    """A dataset as the training notebook sees it: seeded training epochs and a validation pass."""

    name: str
    image_size: int
    num_classes: int
    train_source: object = None  # (images, labels) arrays or an ImageNet100 split
    val_source: object = None

    @property
    def has_labels(self) -> bool:
        return self.name != "synthetic"

    def train_batches(self, batch_size: int, seed: int, epoch: int) -> Iterator[Batch]:
        if self.name == "synthetic":
            from fwbench.data import rotating_batches

            yield from rotating_batches(
                SYNTHETIC_BATCHES_PER_EPOCH,
                batch_size,
                self.image_size,
                _epoch_seed(seed, epoch),
                self.num_classes,
            )
        elif self.name == "digits":
            yield from _array_batches(*self.train_source, batch_size, seed, epoch)
        else:
            yield from self.train_source.batches(
                batch_size, seed=_epoch_seed(seed, epoch), shuffle=True, drop_last=True
            )

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        if self.name == "synthetic":
            raise ValueError("synthetic data has random labels; there is nothing to validate")
        if self.name == "digits":
            images, labels = self.val_source
            for start in range(0, len(labels), batch_size):
                yield images[start : start + batch_size], labels[start : start + batch_size]
        else:
            yield from self.val_source.batches(batch_size, shuffle=False, drop_last=False)

    def stream(self, batch_size: int, seed: int) -> Iterator[Batch]:
        """Training batches epoch after epoch, without end: what a training loop consumes."""
        for epoch in itertools.count():
            yield from self.train_batches(batch_size, seed, epoch)


def load(dataset: str, image_size: int, *, path: str = "") -> TrainingData:
    """The named dataset at ``image_size``; imagenet100 reads the parquet shards under ``path``."""
    if dataset not in _DATASETS:
        raise ValueError(f"dataset must be one of {_DATASETS}, got {dataset!r}")
    if dataset == "synthetic":
        return TrainingData(dataset, image_size, _NUM_CLASSES[dataset])
    if dataset == "digits":
        from fwbench.data import digits_dataset

        # the split stays the loader's fixed one; ``seed`` only orders the batches
        return TrainingData(
            dataset,
            image_size,
            _NUM_CLASSES[dataset],
            digits_dataset(image_size, "train"),
            digits_dataset(image_size, "val"),
        )
    if not path:
        raise FileNotFoundError(
            "dataset='imagenet100' needs dataset_path: the folder holding the parquet shards of "
            "the Hugging Face dataset clane9/imagenet-100 (train-*.parquet, validation-*.parquet)"
        )
    from fwbench.data import ImageNet100

    return TrainingData(
        dataset,
        image_size,
        _NUM_CLASSES[dataset],
        ImageNet100(path, "train", image_size),
        ImageNet100(path, "validation", image_size),
    )
