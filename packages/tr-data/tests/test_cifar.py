"""CIFAR-10/100 from tiny files in both formats (python pickles and binary), NHWC uint8 + int32."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tr.core.errors import DataError
from tr.data import CIFAR10, CIFAR100


def planar(images: np.ndarray) -> np.ndarray:
    return images.transpose(0, 3, 1, 2).reshape(len(images), 3072)


def write_py(d, name, images, labels, key=b"labels", extra=None):
    d.mkdir(parents=True, exist_ok=True)
    obj = {b"batch_label": b"x", b"data": planar(images), key: list(map(int, labels)), **(extra or {})}
    (d / name).write_bytes(pickle.dumps(obj, protocol=2))


@pytest.fixture
def cifar10_py(tmp_path, rng, cifar_records):
    cifar_records(CIFAR10, train=3, val=2)
    d = tmp_path / "cifar-10-batches-py"
    parts = []
    for i in range(1, 6):
        imgs = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
        labs = rng.integers(0, 10, 3)
        write_py(d, f"data_batch_{i}", imgs, labs)
        parts.append((imgs, labs))
    test = (rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8), np.array([9, 0]))
    write_py(d, "test_batch", *test)
    return tmp_path, parts, test


def test_cifar10_python_batches(cifar10_py):
    root, parts, test = cifar10_py
    for r in (root, root / "cifar-10-batches-py"):
        for workers in (1, 3):
            sp = CIFAR10(r, load_workers=workers).load("train")
            assert sp.images.shape == (15, 32, 32, 3) and sp.images.dtype == np.uint8 and sp.labels.dtype == np.int32
            np.testing.assert_array_equal(sp.images, np.concatenate([p[0] for p in parts]))
            np.testing.assert_array_equal(sp.labels, np.concatenate([p[1] for p in parts]))
    val = CIFAR10(root).load("val")
    np.testing.assert_array_equal(val.images, test[0])
    assert val.labels.tolist() == [9, 0]


def test_cifar10_binary(tmp_path, rng, cifar_records):
    cifar_records(CIFAR10, train=2, val=2)
    d = tmp_path / "cifar-10-batches-bin"
    d.mkdir()
    all_imgs, all_labs = [], []
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        imgs = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
        labs = rng.integers(0, 10, 2).astype(np.uint8)
        recs = np.concatenate([labs[:, None], planar(imgs)], axis=1)
        (d / name).write_bytes(recs.tobytes())
        all_imgs.append(imgs)
        all_labs.append(labs)
    sp = CIFAR10(tmp_path).load("train")
    np.testing.assert_array_equal(sp.images, np.concatenate(all_imgs[:5]))
    np.testing.assert_array_equal(sp.labels, np.concatenate(all_labs[:5]))
    np.testing.assert_array_equal(CIFAR10(tmp_path).load("val").images, all_imgs[5])


def test_cifar100_both_formats(tmp_path, rng, cifar_records):
    cifar_records(CIFAR100, train=4, val=4)
    imgs = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    fine, coarse = np.array([99, 3, 50, 0]), np.array([19, 1, 2, 0])
    d = tmp_path / "py" / "cifar-100-python"
    for name in ("train", "test"):
        write_py(d, name, imgs, fine, key=b"fine_labels", extra={b"coarse_labels": list(map(int, coarse))})
    sp = CIFAR100(tmp_path / "py").load("train")
    np.testing.assert_array_equal(sp.images, imgs)
    assert sp.labels.tolist() == [99, 3, 50, 0]
    b = tmp_path / "bin" / "cifar-100-binary"
    b.mkdir(parents=True)
    recs = np.concatenate([coarse[:, None].astype(np.uint8), fine[:, None].astype(np.uint8), planar(imgs)], axis=1)
    for name in ("train.bin", "test.bin"):
        (b / name).write_bytes(recs.tobytes())
    sp = CIFAR100(tmp_path / "bin").load("val")
    np.testing.assert_array_equal(sp.images, imgs)
    assert sp.labels.tolist() == [99, 3, 50, 0]


def test_truncated_binary_batch(tmp_path, rng, cifar_records):
    cifar_records(CIFAR10, train=2, val=2)
    d = tmp_path / "cifar-10-batches-bin"
    d.mkdir()
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (d / name).write_bytes(rng.integers(0, 10, 3073 * 2, dtype=np.uint8).tobytes())
    (d / "data_batch_3.bin").write_bytes(rng.integers(0, 10, 3073 * 2 - 5, dtype=np.uint8).tobytes())
    with pytest.raises(
        DataError, match=r"data_batch_3.bin: truncated CIFAR binary file: 6141 bytes.*3073-byte records"
    ):
        CIFAR10(tmp_path).load("train")


def test_bad_python_batches(cifar10_py, rng):
    root, _, _ = cifar10_py
    d = root / "cifar-10-batches-py"
    write_py(d, "test_batch", rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8), [1, 2, 3])
    with pytest.raises(DataError, match=r"test_batch: 2 images but 3 'labels'"):
        CIFAR10(root).load("val")
    write_py(d, "test_batch", rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8), [1, 12])
    with pytest.raises(DataError, match=r"test_batch: 'labels'\[1\] is 12, outside \[0, 10\)"):
        CIFAR10(root).load("val")
    (d / "test_batch").write_bytes(pickle.dumps({b"data": b"x"}, protocol=2)[:-3])
    with pytest.raises(DataError, match=r"test_batch: not a readable CIFAR python batch"):
        CIFAR10(root).load("val")


def test_pickles_cannot_run_code(cifar10_py):
    root, _, _ = cifar10_py

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (root / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    with pytest.raises(DataError, match=r"refusing to load .*print"):
        CIFAR10(root).load("val")


def test_missing_cifar(tmp_path):
    with pytest.raises(DataError, match=r"CIFAR100 files missing in .*cifar-100-python/train"):
        CIFAR100(tmp_path).load("train")


def test_a_corrupt_memo_index_is_refused_before_unpickling(tmp_path, rng, cifar_records):
    cifar_records(CIFAR10, train=2, val=2)
    # Found by the fuzzer: LONG_BINPUT with a huge index made the C unpickler grow its memo to it
    # (seconds and gigabytes) before failing.
    import pickletools

    d = tmp_path / "cifar-10-batches-py"
    write_py(d, "test_batch", rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8), [1, 2])
    raw = (d / "test_batch").read_bytes()
    pos = next(p for op, _, p in pickletools.genops(raw) if op.name == "BINPUT")
    (d / "test_batch").write_bytes(raw[:pos] + b"r" + (0xFFFFFFF0).to_bytes(4, "little") + raw[pos + 2 :])
    with pytest.raises(DataError, match=r"test_batch: corrupt CIFAR python batch: memo index 4294967280"):
        CIFAR10(tmp_path).load("val")
