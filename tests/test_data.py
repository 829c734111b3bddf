"""fwbench.data: one preprocessing for both frameworks, synthetic batches, local datasets."""

import io

import numpy as np
import pytest
from PIL import Image

from fwbench import data

# (width, height) of the test images: landscape, portrait, square, and smaller than the crop
SIZES = [(300, 200), (180, 260), (96, 96), (40, 70)]


def _photo(width, height, seed):
    """A JPEG-encoded image with smooth structure and noise, like a photograph's statistics."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack(
        [
            128 + 100 * np.sin(xx / (7 + seed)),
            128 + 100 * np.cos(yy / 11),
            255 * (xx + yy) / (width + height),
        ],
        axis=-1,
    )
    pixels = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_resize_size_keeps_torchvisions_ratio():
    assert data.resize_size_for(224) == 256
    assert data.resize_size_for(64) == 73  # 64 * 256 / 224 = 73.14


def test_torch_and_jax_receive_bit_identical_inputs():
    import jax.numpy as jnp
    import torch

    batch = data.preprocess([_photo(300, 200, 0), _photo(180, 260, 1)], image_size=64)
    as_torch = torch.from_numpy(batch)
    as_jax = jnp.asarray(data.to_nhwc(batch))
    assert batch.dtype == np.float32 and batch.shape == (2, 3, 64, 64)
    assert as_jax.shape == (2, 64, 64, 3)
    torch_bits = as_torch.numpy().view(np.uint32)
    jax_bits = np.asarray(as_jax).transpose(0, 3, 1, 2).view(np.uint32)
    assert np.array_equal(torch_bits, jax_bits)


@pytest.mark.parametrize("size", SIZES)
def test_matches_torchvisions_imagenet_transform(size):
    import torch
    from torchvision import transforms

    jpeg = _photo(*size, seed=3)
    geometry = [transforms.Resize(256), transforms.CenterCrop(224)]
    scale = [transforms.Normalize(data.IMAGENET_MEAN, data.IMAGENET_STD)]
    pil_image = Image.open(io.BytesIO(jpeg)).convert("RGB")
    on_pil = transforms.Compose([*geometry, transforms.ToTensor(), *scale])(pil_image)
    as_tensor = torch.from_numpy(np.array(pil_image)).permute(2, 0, 1)
    on_tensor = transforms.Compose([*geometry, lambda t: t.float() / 255, *scale])(as_tensor)
    ours = data.preprocess([jpeg], image_size=224)[0]
    # torchvision's PIL path uses the same resize, crop offsets and fp32 arithmetic (identical
    # today); its tensor path resizes with its own kernel and lands up to one grey level away,
    # 1/255/0.225 ~ 0.018 after normalisation. The bound admits either backend, nothing looser.
    for reference in (on_pil, on_tensor):
        assert np.abs(ours - reference.numpy()).max() <= 0.04
    # normalised, not 0-255 scaled: ImageNet statistics put [0, 1] pixels in [-2.12, 2.64]
    assert ours.min() >= -2.2 and ours.max() <= 2.7
    assert np.abs(ours).max() > 1.0


def test_normalisation_uses_zero_one_pixels():
    white_black = np.zeros((1, 2, 2, 3), np.uint8)
    white_black[0, 0] = 255
    out = data.normalize(white_black)
    mean, std = np.array(data.IMAGENET_MEAN), np.array(data.IMAGENET_STD)
    np.testing.assert_allclose(out[0, :, 0, 0], (1 - mean) / std, rtol=1e-6)
    np.testing.assert_allclose(out[0, :, 1, 1], -mean / std, rtol=1e-6)
    with pytest.raises(TypeError):
        data.normalize(white_black.astype(np.float32))


def test_synthetic_batches_are_seeded_random_and_distinct():
    images, labels = data.synthetic_batch(4, 32, seed=7, num_classes=10)
    again, again_labels = data.synthetic_batch(4, 32, seed=7, num_classes=10)
    assert images.shape == (4, 3, 32, 32) and images.dtype == np.float32
    assert labels.dtype == np.int64 and labels.min() >= 0 and labels.max() < 10
    assert np.array_equal(images, again) and np.array_equal(labels, again_labels)
    assert abs(images.mean()) < 0.1 and abs(images.std() - 1) < 0.1 and np.all(images != 0)

    rotation = data.rotating_batches(3, 4, 32, seed=7)
    assert len(rotation) == 3
    for i in range(3):
        for j in range(i + 1, 3):
            assert not np.array_equal(rotation[i][0], rotation[j][0])
    # batch i does not depend on how many batches were asked for
    assert np.array_equal(data.rotating_batches(2, 4, 32, seed=7)[1][0], rotation[1][0])


def _write_parquet_shard(path, samples, row_group_size):
    import pyarrow as pa
    import pyarrow.parquet as pq

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array(
                [{"bytes": jpeg, "path": f"img_{i}.jpg"} for i, (jpeg, _) in enumerate(samples)],
                type=image_type,
            ),
            "label": pa.array([label for _, label in samples], type=pa.int64()),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)


def _samples(n=12, classes=3):
    # sorted by class, as some real shards are, so the shuffle has something to mix
    return [(_photo(*SIZES[i % len(SIZES)], seed=i), i * classes // n) for i in range(n)]


def test_imagenet100_reads_parquet_shards_through_the_shared_preprocessing(tmp_path):
    samples = _samples()
    (tmp_path / "data").mkdir()
    _write_parquet_shard(tmp_path / "data" / "train-00000-of-00002.parquet", samples[:8], 3)
    _write_parquet_shard(tmp_path / "data" / "train-00001-of-00002.parquet", samples[8:], 3)
    _write_parquet_shard(tmp_path / "data" / "validation-00000-of-00001.parquet", samples[:2], 2)

    train = data.ImageNet100(tmp_path, split="train", image_size=32)
    assert len(train) == 12 and len(data.ImageNet100(tmp_path, "validation", 32)) == 2

    in_order = list(train.batches(5, shuffle=False))
    assert [len(labels) for _, labels in in_order] == [5, 5, 2]
    images = np.concatenate([b for b, _ in in_order])
    labels = np.concatenate([lab for _, lab in in_order])
    assert images.dtype == np.float32 and images.shape == (12, 3, 32, 32)
    assert labels.dtype == np.int64 and labels.tolist() == [lab for _, lab in samples]
    assert np.array_equal(images, data.preprocess([jpeg for jpeg, _ in samples], 32))

    shuffled = list(train.batches(4, seed=1, shuffle=True, drop_last=True))
    shuffled_labels = np.concatenate([lab for _, lab in shuffled])
    assert sorted(shuffled_labels.tolist()) == sorted(labels.tolist())
    assert shuffled_labels.tolist() != labels.tolist()
    repeat = np.concatenate([lab for _, lab in train.batches(4, seed=1, shuffle=True)])
    assert np.array_equal(repeat, shuffled_labels)
    # each image still carries its own label through the shuffle
    by_image = {img.tobytes(): lab for img, lab in zip(images, labels, strict=True)}
    for batch, batch_labels in shuffled:
        for img, lab in zip(batch, batch_labels, strict=True):
            assert by_image[img.tobytes()] == lab


def test_missing_or_empty_dataset_paths_say_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*clane9/imagenet-100"):
        data.ImageNet100(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"no shards.*train-\*\.parquet"):
        data.ImageNet100(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist.*class_name"):
        data.ImageFolder(tmp_path / "nowhere")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(FileNotFoundError, match="no images"):
        data.ImageFolder(tmp_path)
    with pytest.raises(ValueError, match="split"):
        data.ImageNet100(tmp_path, split="test")


def test_image_folder_numbers_sorted_classes(tmp_path):
    samples = _samples(n=6, classes=3)
    names = ["zebra", "apple", "mango"]  # sorted: apple=0, mango=1, zebra=2
    expected = {}
    for i, (jpeg, label) in enumerate(samples):
        folder = tmp_path / names[label]
        folder.mkdir(exist_ok=True)
        (folder / f"{i}.jpg").write_bytes(jpeg)
        expected[data.preprocess([jpeg], 32)[0].tobytes()] = sorted(names).index(names[label])
    (tmp_path / "apple" / "notes.txt").write_text("not an image")

    folder = data.ImageFolder(tmp_path, image_size=32)
    assert folder.classes == ["apple", "mango", "zebra"] and len(folder) == 6
    seen = 0
    for images, labels in folder.batches(4, seed=0):
        assert images.dtype == np.float32 and labels.dtype == np.int64
        for img, lab in zip(images, labels, strict=True):
            assert expected[img.tobytes()] == lab
            seen += 1
    assert seen == 6


def test_digits_dataset_split_shapes_and_labels():
    train_x, train_y = data.digits_dataset(16, "train", seed=0)
    val_x, val_y = data.digits_dataset(16, "val", seed=0)
    assert train_x.shape == (1438, 3, 16, 16) and val_x.shape == (359, 3, 16, 16)
    assert train_x.dtype == val_x.dtype == np.float32
    assert train_y.dtype == np.int64 and set(train_y.tolist()) == set(range(10))
    assert set(val_y.tolist()) <= set(range(10))
    # channels repeat one grey image, normalised with each channel's own statistics
    grey = train_x[:, 0] * data.IMAGENET_STD[0] + data.IMAGENET_MEAN[0]
    np.testing.assert_allclose(
        train_x[:, 1] * data.IMAGENET_STD[1] + data.IMAGENET_MEAN[1], grey, atol=1e-6
    )
    assert grey.min() >= -1e-6 and grey.max() <= 1 + 1e-6 and grey.max() > 0.9
    # the split is fixed by the seed and disjoint: together the 1797 distinct digits
    again_x, _ = data.digits_dataset(16, "val", seed=0)
    assert np.array_equal(again_x, val_x)
    other_x, _ = data.digits_dataset(16, "val", seed=1)
    assert not np.array_equal(other_x, val_x)
    assert len({x.tobytes() for x in np.concatenate([train_x, val_x])}) == 1797
    with pytest.raises(ValueError):
        data.digits_dataset(16, "test")
