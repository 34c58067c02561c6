"""Files that do not hold what they claim are refused, naming the file and the count or value (never loaded as a
smaller or relabelled data set), and what tr writes gets the mode a plain open()/mkdir gives, never the 0600/0700
of a temporary that was renamed into place; an unpack never replaces or deletes the user's files."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import numpy as np
import pytest
from dts_mutations import fake_jpeg_pack

from tr.core.errors import ConfigError, DataError
from tr.data import CIFAR10, CIFAR100, MNIST, DtsImages
from tr.data.dts import DtsDataset, DtsFile, DtsWriter, pack, raw_header, unpack
from tr.data.dts.cli import main as cli

PIXELS = 3072


# --- CIFAR: no header, so each file must hold the count the data set defines ---------------------------------

def _py_batch(path: Path, n: int, labels=None, **extra) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    d = {b"data": np.zeros((n, PIXELS), np.uint8), b"labels": list(range(n)) if labels is None else labels}
    d.update({k.encode(): v for k, v in extra.items()})
    path.write_bytes(pickle.dumps(d, protocol=2))


def _bin_batch(path: Path, n: int, label_bytes: int = 1, first: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    recs = np.zeros((n, label_bytes + PIXELS), np.uint8)
    recs[:, 0] = first
    path.write_bytes(recs.tobytes())


def test_a_cifar_binary_file_cut_at_a_record_boundary_is_refused(tmp_path):
    # 2 whole records: a file cut short at a record boundary used to load as a 2-image validation set
    _bin_batch(tmp_path / "cifar-10-batches-bin" / "test_batch.bin", 2)
    with pytest.raises(DataError, match=r"test_batch\.bin: 2 records, but a CIFAR10 'test_batch\.bin' file holds "
                                        r"10000 \(a truncated or foreign file"):
        CIFAR10(tmp_path).load("val")
    _bin_batch(tmp_path / "cifar-10-batches-bin" / "test_batch.bin", 10000)  # the real count loads
    assert len(CIFAR10(tmp_path).load("val")) == 10000


def test_a_cifar_python_batch_with_another_count_is_refused(tmp_path, cifar_records):
    cifar_records(CIFAR10, train=3, val=2)
    _py_batch(tmp_path / "cifar-10-batches-py" / "test_batch", 1, labels=[4])
    with pytest.raises(DataError, match=r"test_batch: 1 records, but a CIFAR10 'test_batch' file holds 2"):
        CIFAR10(tmp_path).load("val")


@pytest.mark.parametrize("labels, extra, message", [
    ([0.0, 2.5], {}, r"'labels' must be a flat list of integer class indices, got float64 of shape \(2,\)"),
    (["1", "2"], {}, r"'labels' must be a flat list of integer class indices, got <U1 of shape \(2,\)"),
    ([True, False], {}, r"'labels' must be a flat list of integer class indices, got bool"),
    ([[1], [2]], {}, r"'labels' must be a flat list of integer class indices, got int64 of shape \(2, 1\)"),
    ("12", {}, r"'labels' must be a flat list of integer class indices, got str"),
    ([-1, 2], {}, r"'labels'\[0\] is -1, outside \[0, 10\)"),
    ([1, 2, 3], {}, r"2 images but 3 'labels'"),
    ([1, 2], {"filenames": [b"a.png"]}, r"2 images but 1 'filenames'"),
])
def test_cifar_python_labels_are_integers_one_a_record(tmp_path, cifar_records, labels, extra, message):
    cifar_records(CIFAR10, train=2, val=2)
    _py_batch(tmp_path / "cifar-10-batches-py" / "test_batch", 2, labels=labels, **extra)
    with pytest.raises(DataError, match=r"test_batch: " + message):
        CIFAR10(tmp_path).load("val")


def test_cifar100_coarse_labels_are_checked_too(tmp_path, cifar_records):
    cifar_records(CIFAR100, train=2, val=2)
    d = tmp_path / "py" / "cifar-100-python"
    _py_batch(d / "test", 2, labels=None, fine_labels=[99, 0], coarse_labels=[19, 25])
    with pytest.raises(DataError, match=r"test: 'coarse_labels'\[1\] is 25, outside \[0, 20\)"):
        CIFAR100(tmp_path / "py").load("val")
    _py_batch(d / "test", 2, labels=None, fine_labels=[99, 0], coarse_labels=[19, 0])
    assert CIFAR100(tmp_path / "py").load("val").labels.tolist() == [99, 0]
    # a CIFAR-10 binary file read as CIFAR-100: its label byte lands where the coarse label is, its first pixel
    # where the fine label is
    _bin_batch(tmp_path / "bin" / "cifar-100-binary" / "test.bin", 2, label_bytes=2, first=30)
    with pytest.raises(DataError, match=r"test\.bin: record 0 has coarse label 30, outside \[0, 20\): not a CIFAR100"):
        CIFAR100(tmp_path / "bin").load("val")


# --- MNIST: the header's count and shape ------------------------------------------------------------------------

def _idx(path: Path, arr: np.ndarray) -> None:
    path.write_bytes(bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
                     + arr.astype(np.uint8).tobytes())


@pytest.mark.parametrize("images, labels, message", [
    (np.zeros((3, 32, 32)), np.zeros(3), r"t10k-images-idx3-ubyte: the header gives 32x32 images; MNIST's are 28x28"),
    (np.zeros((0, 28, 28)), np.zeros(0), r"t10k-images-idx3-ubyte: the header gives 0 images: an empty val split"),
    (np.zeros((3, 28, 28)), np.zeros(2), r"holds 3 images but .*t10k-labels-idx1-ubyte holds 2 labels"),
    (np.zeros((2, 28, 28)), np.array([1, 10]), r"t10k-labels-idx1-ubyte: label 10 is out of range for 10 classes"),
])
def test_mnist_files_must_agree_with_their_header_and_each_other(tmp_path, images, labels, message):
    _idx(tmp_path / "t10k-images-idx3-ubyte", images)
    _idx(tmp_path / "t10k-labels-idx1-ubyte", labels)
    with pytest.raises(DataError, match=message):
        MNIST(tmp_path).load("val")


# --- DTS packs: the header's count, classes and split -------------------------------------------------------------

def _rewrite_header(path: Path, **fields) -> None:
    """Change header fields and store the header with a matching checksum (a consistent, wrong header)."""
    with DtsFile(path) as f:
        h = f.header
    for k, v in fields.items():
        setattr(h, k, v)
    raw = bytearray(path.read_bytes())
    raw[:h.header_bytes] = h.pack()
    path.write_bytes(bytes(raw))


def test_a_jpeg_pack_whose_header_count_disagrees_with_its_blocks(tmp_path):
    path = fake_jpeg_pack(tmp_path / "train.dts")
    _rewrite_header(path, num_samples=6)
    with pytest.raises(DataError, match=r"train\.dts: the blocks hold 5 samples, the header says 6"):
        DtsImages(tmp_path).load("train")  # used to load the 5 as the whole split
    with pytest.raises(DataError, match="the blocks hold 5 samples, the header says 6"):
        unpack(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert cli(["info", str(path)]) == 1  # its per-class counts come from the same blocks
    _rewrite_header(path, num_samples=5)
    assert len(DtsImages(tmp_path).load("train")) == 5


def test_dts_headers_without_classes_or_of_the_other_split(tmp_path):
    path = fake_jpeg_pack(tmp_path / "train.dts")
    _rewrite_header(path, num_classes=0)  # no label bound: every label used to pass
    with pytest.raises(DataError, match=r"train\.dts: the header says 0 classes"):
        DtsFile(path)
    with pytest.raises(ConfigError, match=r"a DTS needs a class count >= 1 .*got 0"):
        DtsWriter(tmp_path / "x.dts", raw_header("T", "train", (2, 2, 1), 0))
    fake_jpeg_pack(tmp_path / "val.dts", "val", classes=3)
    fake_jpeg_pack(tmp_path / "train.dts")
    (tmp_path / "val.dts").rename(tmp_path / "train.dts")  # a renamed pack
    with pytest.raises(DataError, match=r"train\.dts: the header says it holds the val split"):
        DtsImages(tmp_path).load("train")


def test_the_writer_takes_pixels_and_class_indices_only(tmp_path):
    h = raw_header("T", "train", (2, 2, 1), 3, {"classes": ["a", "b", "c"]}, 1 << 14)
    with pytest.raises(DataError, match=r"sample 0: a label is an integer class index, got 2\.7"), \
            DtsWriter(tmp_path / "t.dts", h) as w:
        w.add(np.zeros((2, 2, 1), np.uint8), 2.7)  # was written as class 2
    with pytest.raises(DataError, match=r"sample 0: a sample array must be uint8, got float32"), \
            DtsWriter(tmp_path / "t.dts", raw_header("T", "train", (1, 2, 2), 3)) as w:
        w.add(np.zeros((1, 1, 1), np.float32), 1)  # its 4 bytes used to pass as a 1x2x2 sample
    assert not (tmp_path / "t.dts").exists()
    with DtsWriter(tmp_path / "t.dts", raw_header("T", "train", (2, 2, 1), 3)) as w:
        w.add(np.zeros((2, 2, 1), np.uint8), np.int64(2))
        w.add(bytes(4), 0)
    assert len(DtsFile(tmp_path / "t.dts")) == 2


def test_split_offsets_and_shapes_are_integers_that_fit(tmp_path):
    from tr.core.errors import DTypeError, ShapeError
    from tr.data import Split

    buf = np.zeros(64, np.uint8)
    with pytest.raises(DTypeError, match=r"offsets must be integers, got float64"):
        Split(buf, [0], offsets=np.array([2.5]), shapes=np.array([[2, 2, 1]]))
    with pytest.raises(ShapeError, match=r"shapes must fit int32, got values from 1 to 4294967298"):
        Split(buf, [0], offsets=np.array([0]), shapes=np.array([[2**32 + 2, 1, 1]]))  # wrapped to 2 before
    with pytest.raises(DTypeError, match=r"sizes must be integers, got bool"):
        Split(buf, [0], offsets=np.array([0]), sizes=np.array([True]))
    assert Split(buf, [0], offsets=np.array([3], np.uint8), shapes=np.array([[2, 2, 1]], np.int64)).image(0).shape \
        == (2, 2, 1)


def _raw(path: Path, split: str, classes: int, names: list[str]) -> None:
    with DtsWriter(path, raw_header("T", split, (2, 2, 1), classes, {"classes": names}, 1 << 14)) as w:
        for i in range(4):
            w.add(np.full((2, 2, 1), i, np.uint8), i % classes)


def test_a_raw_val_pack_of_other_classes_is_refused(tmp_path):
    _raw(tmp_path / "train.dts", "train", 2, ["a", "b"])
    _raw(tmp_path / "val.dts", "val", 3, ["a", "b", "c"])
    ds = DtsDataset(tmp_path)
    assert len(ds.load("train")) == 4
    with pytest.raises(DataError, match=r"val\.dts: 3 classes \['a', 'b', 'c'\]\.\.\., the train pack's are 2"):
        ds.load("val")


# --- modes of what tr writes; the user's files are never replaced -------------------------------------------------

@pytest.fixture
def umask():
    old = os.umask(0o022)

    def use(mask: int) -> None:
        os.umask(mask)

    yield use
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_unpack_creates_out_as_mkdir_would(tmp_path, umask, mask):
    # tempfile.mkdtemp's 0700 used to become OUT's mode through the rename
    path = fake_jpeg_pack(tmp_path / "p" / "train.dts")
    umask(mask)
    assert unpack(path, tmp_path / "out") == 5
    assert _mode(tmp_path / "out") == 0o777 & ~mask
    assert _mode(tmp_path / "out" / "c0") == 0o777 & ~mask
    assert {_mode(p) for p in (tmp_path / "out").rglob("*.JPEG")} == {0o666 & ~mask}
    _raw(tmp_path / "p" / "r.dts", "val", 2, ["a", "b"])
    unpack(tmp_path / "p" / "r.dts", tmp_path / "npz")
    assert (_mode(tmp_path / "npz"), _mode(tmp_path / "npz" / "val.npz")) == (0o777 & ~mask, 0o666 & ~mask)


def test_unpack_into_an_existing_empty_folder_keeps_its_mode(tmp_path, umask):
    path = fake_jpeg_pack(tmp_path / "p" / "train.dts")
    (tmp_path / "mine").mkdir()
    os.chmod(tmp_path / "mine", 0o751)
    unpack(path, tmp_path / "mine")
    assert _mode(tmp_path / "mine") == 0o751 and len(list((tmp_path / "mine").rglob("*.JPEG"))) == 5


def test_unpack_never_replaces_files_that_appear_in_out_meanwhile(tmp_path, monkeypatch):
    path = fake_jpeg_pack(tmp_path / "p" / "train.dts")
    out = tmp_path / "out"
    out.mkdir()
    real = os.replace

    def user_writes_first(src, dst):
        if Path(dst) == out:
            (out / "notes.txt").write_text("mine")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", user_writes_first)
    with pytest.raises(DataError, match=r"out: something was written there during the unpack; left as it is"):
        unpack(path, out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # its own temporary is gone
    (out / "notes.txt").unlink()
    monkeypatch.setattr(os, "replace", real)
    with pytest.raises(DataError, match="exists and is not an empty directory"):
        unpack(path, tmp_path / "p")  # a non-empty folder: refused before anything is written
    (tmp_path / "link").symlink_to(out)
    with pytest.raises(DataError, match="link: exists and is not an empty directory"):
        unpack(path, tmp_path / "link")


def test_pack_download_and_extract_write_with_the_umask(tmp_path, umask, rng):
    from tr.data.download import fetch
    from tr.data.extract import extract_tar, manifest_path

    umask(0o022)
    # pack: the output folder and its files
    _idx_dir = tmp_path / "mnist"
    _idx_dir.mkdir()
    for split, n in (("train", 4), ("t10k", 2)):
        _idx(_idx_dir / f"{split}-images-idx3-ubyte", np.zeros((n, 28, 28)))
        _idx(_idx_dir / f"{split}-labels-idx1-ubyte", np.arange(n))
    pack(_idx_dir, tmp_path / "packed")
    assert _mode(tmp_path / "packed") == 0o755 and _mode(tmp_path / "packed" / "train.dts") == 0o644
    # a download (mkstemp's 0600 used to stay on the dataset file)
    src = tmp_path / "src.bin"
    src.write_bytes(b"data")
    got = fetch([src.as_uri()], tmp_path / "dl" / "file.gz")
    assert got.read_bytes() == b"data" and _mode(got) == 0o644
    # an extraction: the files and the manifest
    import tarfile

    with tarfile.open(tmp_path / "a.tar", "w") as tf:
        tf.add(src, "d/src.bin")
    extract_tar(tmp_path / "a.tar", tmp_path / "x")
    # the files are written with open() in a private staging folder (removed after) and renamed into place, so
    # their mode holds whatever that folder's is; only the manifest's (a temporary renamed into place) guards
    # against a mkstemp 0600
    assert _mode(tmp_path / "x" / "d" / "src.bin") == 0o644
    assert _mode(manifest_path(tmp_path / "x", "a.tar")) == 0o644
