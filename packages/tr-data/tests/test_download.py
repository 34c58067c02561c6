"""download(True) fetches missing files from mirrors (here file:// mirrors: no network in tests), and
without files and without a working mirror the DataError names the path and the expected files."""

from __future__ import annotations

import io
import pickle
import shutil
import tarfile

import numpy as np
import pytest

from tr.core.errors import DataError
from tr.data import CIFAR10, MNIST
from tr.data.download import md5sum


def test_mnist_download_from_a_mirror(tmp_path, mnist_dir):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        shutil.copy(mnist_dir / f"{stem}.gz", mirror)
    root = tmp_path / "root"
    ds = MNIST(root, download=True, mirrors=("file:///nonexistent/", mirror.as_uri() + "/"))
    sp = ds.load("val")
    assert len(sp) == 10000 and (root / "t10k-images-idx3-ubyte.gz").exists()
    assert not list(root.glob("*.part"))


def test_mnist_download_failure_names_path_files_and_mirrors(tmp_path):
    ds = MNIST(tmp_path / "root", download=True, mirrors=("file:///nonexistent/mirror/",))
    with pytest.raises(DataError) as e:
        ds.load("train")
    msg = str(e.value)
    assert str(tmp_path / "root") in msg and "train-images-idx3-ubyte" in msg
    assert "download failed" in msg and "file:///nonexistent/mirror/train-images-idx3-ubyte.gz" in msg


def test_offline_switch_blocks_network(tmp_path, monkeypatch):
    monkeypatch.setenv("TR_DATA_OFFLINE", "1")
    with pytest.raises(DataError, match="TR_DATA_OFFLINE"):
        MNIST(tmp_path, download=True).load("val")


def _cifar_archive(path, rng):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
        for n in names:
            d = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [1, 2, 3, 4]}
            raw = pickle.dumps(d, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{n}")
            info.size = len(raw)
            tf.addfile(info, io.BytesIO(raw))
    path.write_bytes(buf.getvalue())


def test_cifar_download_and_extract(tmp_path, rng, cifar_records):
    cifar_records(CIFAR10, train=4, val=4)
    arc = tmp_path / "cifar-10-python.tar.gz"
    _cifar_archive(arc, rng)
    root = tmp_path / "root"
    ds = CIFAR10(root, download=True, url=arc.as_uri())
    ds.md5 = md5sum(arc)
    assert len(ds.load("train")) == 20 and len(ds.load("val")) == 4


def test_cifar_download_checks_md5(tmp_path, rng):
    arc = tmp_path / "cifar-10-python.tar.gz"
    _cifar_archive(arc, rng)
    with pytest.raises(DataError, match="md5"):
        CIFAR10(tmp_path / "root", download=True, url=arc.as_uri()).load("train")  # the real archive's md5


def test_cifar_without_files_or_network(tmp_path):
    with pytest.raises(DataError) as e:
        CIFAR10(tmp_path, download=True, url="file:///nonexistent/cifar-10-python.tar.gz").load("train")
    msg = str(e.value)
    assert str(tmp_path) in msg and "cifar-10-batches-py/data_batch_1" in msg and "download failed" in msg
