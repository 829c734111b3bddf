"""ImageNet-100 from local files, through the shared preprocessing; nothing is downloaded.

Two layouts are read:

* ``ImageNet100``: the parquet shards of the Hugging Face dataset ``clane9/imagenet-100``
  (``train-00000-of-00017.parquet``, ``validation-00000-of-00001.parquet``, ... either directly under
  ``root`` or under ``root/data``), columns ``image`` = struct {bytes, path} and ``label``.
  Shards are read one row group at a time, so memory holds a row group and the shuffle buffer,
  never the dataset.
* ``ImageFolder``: ``root/<class_name>/<image>``, classes numbered in sorted order, as
  torchvision's ``ImageFolder`` does.

Both yield ``(images float32 NCHW, labels int64)`` from ``batches(batch_size, seed, shuffle)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fwbench.data.preprocess import preprocess

_SPLITS = ("train", "validation")
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def _batched(samples, batch_size: int, image_size: int, drop_last: bool):
    """Group (encoded image, label) pairs into preprocessed batches."""
    pending = []
    for sample in samples:
        pending.append(sample)
        if len(pending) == batch_size:
            yield _to_batch(pending, image_size)
            pending = []
    if pending and not drop_last:
        yield _to_batch(pending, image_size)


def _to_batch(samples, image_size: int):
    images = preprocess((source for source, _ in samples), image_size)
    return images, np.asarray([label for _, label in samples], np.int64)


class ImageNet100:
    """The ``clane9/imagenet-100`` parquet shards of one split."""

    def __init__(
        self, root, split: str = "train", image_size: int = 224, shuffle_buffer: int = 2048
    ):
        import pyarrow.parquet as pq

        if split not in _SPLITS:
            raise ValueError(f"split must be one of {_SPLITS}, got {split!r}")
        self.root, self.split, self.image_size = Path(root), split, image_size
        self.shuffle_buffer = shuffle_buffer
        self.shards = self._find_shards()
        # (shard, row group, rows) from the footers alone: no image data is read here
        self._row_groups = []
        for shard in self.shards:
            metadata = pq.ParquetFile(shard).metadata
            for i in range(metadata.num_row_groups):
                self._row_groups.append((shard, i, metadata.row_group(i).num_rows))

    def _find_shards(self) -> list[Path]:
        expected = (
            f"parquet shards named '{self.split}-*.parquet' (the layout of the Hugging Face "
            "dataset clane9/imagenet-100) directly under it or under its 'data' folder"
        )
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"{self.root} does not exist; expected a folder holding {expected}"
            )
        for folder in (self.root, self.root / "data"):
            shards = sorted(folder.glob(f"{self.split}-*.parquet"))
            if shards:
                return shards
        raise FileNotFoundError(f"no shards in {self.root}; expected {expected}")

    def __len__(self) -> int:
        return sum(rows for _, _, rows in self._row_groups)

    def _samples(self, seed: int, shuffle: bool) -> Iterator[tuple[bytes, int]]:
        """(JPEG bytes, label) pairs. Shuffled: row groups in random order, mixed in a buffer.

        Shards may be sorted by class; drawing row groups from all shards at random and then
        sampling from a buffer that spans many of them keeps classes mixed within a batch without
        reading the whole split into memory.
        """
        import pyarrow.parquet as pq

        rng = np.random.default_rng(seed)
        order = rng.permutation(len(self._row_groups)) if shuffle else range(len(self._row_groups))
        buffer: list[tuple[bytes, int]] = []
        for index in order:
            shard, group, _ = self._row_groups[index]
            table = pq.ParquetFile(shard).read_row_group(group, columns=["image", "label"])
            images = table.column("image").combine_chunks().field("bytes").to_pylist()
            labels = table.column("label").to_pylist()
            for sample in zip(images, labels, strict=True):
                if not shuffle:
                    yield sample
                    continue
                buffer.append(sample)
                if len(buffer) >= self.shuffle_buffer:
                    yield buffer.pop(int(rng.integers(len(buffer))))
        rng.shuffle(buffer)
        yield from buffer

    def batches(
        self, batch_size: int, seed: int = 0, shuffle: bool = True, drop_last: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """One pass over the split: (float32 NCHW images, int64 labels) per batch."""
        return _batched(self._samples(seed, shuffle), batch_size, self.image_size, drop_last)


class ImageFolder:
    """``root/<class_name>/<image>`` files; labels are the classes' indices in sorted order."""

    def __init__(self, root, image_size: int = 224):
        self.root, self.image_size = Path(root), image_size
        expected = "one sub-folder per class holding image files (root/<class_name>/<image>.jpg)"
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root} does not exist; expected {expected}")
        self.classes = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        self.samples = [
            (path, label)
            for label, name in enumerate(self.classes)
            for path in sorted((self.root / name).iterdir())
            if path.suffix.lower() in _IMAGE_SUFFIXES
        ]
        if not self.samples:
            raise FileNotFoundError(f"no images in {self.root}; expected {expected}")

    def __len__(self) -> int:
        return len(self.samples)

    def batches(
        self, batch_size: int, seed: int = 0, shuffle: bool = True, drop_last: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """One pass over the files: (float32 NCHW images, int64 labels) per batch."""
        order = np.random.default_rng(seed).permutation(len(self)) if shuffle else range(len(self))
        samples = (self.samples[i] for i in order)
        return _batched(samples, batch_size, self.image_size, drop_last)
