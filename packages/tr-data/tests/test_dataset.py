"""Split and ArrayDataset: uniform and ragged in-memory samples."""

from __future__ import annotations

import numpy as np
import pytest

from tr.core.errors import ConfigError, DataError, DTypeError, ShapeError
from tr.data import ArrayDataset, Split, open_dataset


def test_uniform_split(rng):
    sp = Split(rng.integers(0, 256, (4, 5, 6), dtype=np.uint8), [1, 2, 3, 4])
    assert sp.images.shape == (4, 5, 6, 1) and sp.labels.dtype == np.int32 and sp.image_shape == (5, 6, 1)
    assert not sp.ragged and len(sp) == 4


def test_ragged_split(rng):
    imgs = [rng.integers(0, 256, s, dtype=np.uint8) for s in [(3, 4, 3), (5, 2, 3), (1, 1, 3)]]
    sp = Split.from_images(imgs, [0, 1, 2])
    assert sp.ragged and sp.image_shape is None and len(sp) == 3
    for i, a in enumerate(imgs):
        np.testing.assert_array_equal(sp.image(i), a)
    same = Split.from_images([imgs[0], imgs[0]], [0, 0])
    assert same.image_shape == (3, 4, 3)


def test_split_errors(rng):
    with pytest.raises(DataError, match="4 images but 3 labels"):
        Split(np.zeros((4, 2, 2, 1), np.uint8), [1, 2, 3])
    with pytest.raises(DTypeError, match="uint8 numpy array .*got float32"):
        Split(np.zeros((4, 2, 2, 1), np.float32), [1, 2, 3, 4])
    with pytest.raises(ShapeError, match="\\(h, w, c\\) or \\(h, w\\) array, got shape \\(2, 2, 2, 2\\)"):
        Split.from_images([np.zeros((2, 2, 2, 2), np.uint8)], [0])
    with pytest.raises(DataError, match="overrun"):
        Split(np.zeros(10, np.uint8), [0], offsets=np.array([4]), shapes=np.array([[2, 2, 2]]))


def test_array_dataset(rng):
    x = rng.integers(0, 256, (6, 4, 4, 3), dtype=np.uint8)
    ds = ArrayDataset((x, np.arange(6)))
    assert ds.image_shape == (4, 4, 3) and not ds.has_split("val")
    np.testing.assert_array_equal(ds.load("train").images, x)
    with pytest.raises(DataError, match="no val split"):
        ds.load("val")
    with pytest.raises(ConfigError, match="split must be 'train' or 'val'"):
        ds.load("dev")
    ragged = ArrayDataset(([x[0], x[1, :2]], [0, 1]))
    assert ragged.image_shape is None


def test_open_dataset_names(tmp_path):
    assert open_dataset("MNIST", tmp_path).name == "mnist"
    assert open_dataset("cifar-10", tmp_path).name == "cifar10"
    assert open_dataset("cifar100", tmp_path).num_classes == 100
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet2'"):
        open_dataset("imagenet2", tmp_path)
