"""MNIST from the real idx files in data/mnist, and the failures a broken copy must report."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest

from tr.core.errors import DataError
from tr.data import MNIST


def test_real_mnist_loads_fully_in_memory(mnist_dir, mnist_val):
    assert mnist_val.images.shape == (10000, 28, 28, 1) and mnist_val.images.dtype == np.uint8
    assert mnist_val.labels.dtype == np.int32 and mnist_val.labels.shape == (10000,)
    assert np.bincount(mnist_val.labels).tolist()[:3] == [980, 1135, 1032]  # the known class counts
    assert mnist_val.labels[:5].tolist() == [7, 2, 1, 0, 4]
    train = MNIST(mnist_dir, load_workers=2).load("train")
    assert train.images.shape == (60000, 28, 28, 1) and train.labels[:3].tolist() == [5, 0, 4]
    assert MNIST(mnist_dir).load("test").images.shape[0] == 10000  # alias of val


def test_uncompressed_files_and_torchvision_layout(tmp_path, mnist_dir, mnist_val):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (raw / stem).write_bytes(gzip.decompress((mnist_dir / f"{stem}.gz").read_bytes()))
    sp = MNIST(tmp_path).load("val")
    np.testing.assert_array_equal(sp.images, mnist_val.images)


def _copy_val(tmp_path, mnist_dir):
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        shutil.copy(mnist_dir / f"{stem}.gz", tmp_path / f"{stem}.gz")


def test_label_count_disagreeing_with_images(tmp_path, mnist_dir):
    _copy_val(tmp_path, mnist_dir)
    labels = gzip.decompress((tmp_path / "t10k-labels-idx1-ubyte.gz").read_bytes())
    short = labels[:4] + (9999).to_bytes(4, "big") + labels[8:-1]
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(short)
    with pytest.raises(DataError, match=r"holds 10000 images but .*t10k-labels-idx1-ubyte holds 9999 labels"):
        MNIST(tmp_path).load("val")


def test_truncated_images_file(tmp_path, mnist_dir):
    _copy_val(tmp_path, mnist_dir)
    data = gzip.decompress((tmp_path / "t10k-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(data[:-784]))
    with pytest.raises(
        DataError, match=r"t10k-images-idx3-ubyte.gz: truncated idx file.*7840016 bytes are expected, got 7839232"
    ):
        MNIST(tmp_path).load("val")


def test_wrong_magic_in_labels(tmp_path, mnist_dir):
    _copy_val(tmp_path, mnist_dir)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x03" + b"\x00" * 12))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: idx file has 3 dimensions"):
        MNIST(tmp_path).load("val")


def test_missing_files_name_the_directory_and_the_files(tmp_path):
    with pytest.raises(DataError) as e:
        MNIST(tmp_path).load("train")
    msg = str(e.value)
    assert str(tmp_path) in msg and "train-images-idx3-ubyte" in msg and "train-labels-idx1-ubyte" in msg
    assert "download=True" in msg
