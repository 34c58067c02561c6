"""Atomic, verified extraction: an interrupted extraction (kill -9) never leaves a truncated file that a
later run takes for complete; damaged files are detected by their recorded sizes and extracted again."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest

from tr.core.errors import DataError
from tr.data import CIFAR10
from tr.data.download import md5sum
from tr.data.extract import STAGING_PREFIX, extract_tar, manifest_path

NAMES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
D = "cifar-10-batches-py"


def _archive(path, seed=0):
    rng = np.random.default_rng(seed)
    buf, batches = io.BytesIO(), {}
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for n in NAMES:
            d = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [1, 2, 3, 4]}
            raw = pickle.dumps(d, protocol=2)
            batches[n] = raw
            info = tarfile.TarInfo(f"{D}/{n}")
            info.size = len(raw)
            tf.addfile(info, io.BytesIO(raw))
    path.write_bytes(buf.getvalue())
    return batches


def _dataset(root, arc, download=False):
    ds = CIFAR10(root, download=download, url=arc.as_uri())
    ds.md5 = md5sum(arc)
    return ds


def _expected(batches):
    return np.concatenate([pickle.loads(batches[n])[b"data"] for n in NAMES[:5]])


@pytest.fixture(autouse=True)
def _four_records_a_batch(cifar_records):
    cifar_records(CIFAR10, train=4, val=4)  # the archives below hold 4-record batches


@pytest.fixture
def setup(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    batches = _archive(root / "cifar-10-python.tar.gz")
    return root, root / "cifar-10-python.tar.gz", batches


def test_extraction_writes_a_manifest_and_no_staging(setup):
    root, arc, batches = setup
    sp = _dataset(root, arc).load("train")
    assert np.array_equal(sp.images.transpose(0, 3, 1, 2).reshape(-1, 3072), _expected(batches))
    assert manifest_path(root, arc.name).is_file()
    assert not list(root.glob(STAGING_PREFIX + "*")) and not list(root.rglob("*.tmp"))


def test_truncated_batch_from_an_old_interrupted_extraction_is_repaired(setup):
    # The reporter's state: all six files present (no manifest), data_batch_3 cut short by kill -9.
    root, arc, batches = setup
    with tarfile.open(arc) as tf:
        tf.extractall(root, filter="data")
    p = root / D / "data_batch_3"
    p.write_bytes(p.read_bytes()[:1000])
    sp = _dataset(root, arc).load("train")  # used to fail forever: "not a readable CIFAR python batch"
    assert p.read_bytes() == batches["data_batch_3"]
    assert np.array_equal(sp.images.transpose(0, 3, 1, 2).reshape(-1, 3072), _expected(batches))


def test_a_file_truncated_after_extraction_is_extracted_again(setup):
    root, arc, batches = setup
    ds = _dataset(root, arc)
    ds.load("val")
    p = root / D / "data_batch_5"
    p.write_bytes(p.read_bytes()[:-1])
    ds.load("train")
    assert p.read_bytes() == batches["data_batch_5"]


def test_damage_without_the_archive_is_a_data_error_naming_the_file(setup):
    root, arc, _ = setup
    ds = _dataset(root, arc)
    ds.load("train")
    p = root / D / "data_batch_2"
    size = p.stat().st_size
    p.write_bytes(p.read_bytes()[:10])
    arc.unlink()
    with pytest.raises(DataError, match=rf"data_batch_2 has 10 bytes, the archive holds {size} .*download=True"):
        ds.load("train")


def test_kill_9_during_extraction_leaves_no_partial_file(setup):
    root, arc, batches = setup
    child = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        import tr.data.extract as ex
        real, n = ex._write_member, [0]
        def dying(tf, m, out, archive):
            n[0] += 1
            if n[0] == 3:  # die with the third member half written
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(b"partial")
                os.kill(os.getpid(), signal.SIGKILL)
            return real(tf, m, out, archive)
        ex._write_member = dying
        ex.extract_tar(Path({str(arc)!r}), Path({str(root)!r}))
    """)
    r = subprocess.run([sys.executable, "-c", child], timeout=60)
    assert r.returncode == -signal.SIGKILL
    assert not (root / D).exists()  # nothing was moved into place
    assert len(list(root.glob(STAGING_PREFIX + "*"))) == 1
    sp = _dataset(root, arc).load("train")  # the archive is here: extracted again, the leftover removed
    assert len(sp) == 20 and not list(root.glob(STAGING_PREFIX + "*"))
    assert all((root / D / n).read_bytes() == batches[n] for n in NAMES)


def test_truncated_or_unsafe_archives_are_data_errors(tmp_path):
    arc = tmp_path / "a.tar.gz"
    _archive(arc)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(arc.read_bytes()[: arc.stat().st_size // 2])
    with pytest.raises(DataError, match="cut.tar.gz: "):
        extract_tar(cut, tmp_path / "out")
    assert not list((tmp_path / "out").iterdir())  # neither files nor staging left behind
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tf:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(DataError, match="would be extracted outside"):
        extract_tar(evil, tmp_path / "out")
    assert not (tmp_path / "escape").exists()


def test_live_staging_directories_are_kept(tmp_path):
    arc = tmp_path / "a.tar.gz"
    _archive(arc)
    out = tmp_path / "out"
    live = out / f"{STAGING_PREFIX}{os.getpid()}.keep"
    live.mkdir(parents=True)
    extract_tar(arc, out)
    assert live.is_dir() and (out / D / "test_batch").is_file()
