"""Fuzzing every file parser of tr.data (idx / MNIST, CIFAR python batches, CIFAR binary): seeded
mutations of small valid files; each case loads or is a DataError naming the file, never another
exception, a crash or a hang. tools/asan_test.sh runs this file too."""

from __future__ import annotations

import gzip
import pickle

import numpy as np
import pytest
from parser_fuzz import one_process, print_total

from tr.data import CIFAR10, CIFAR100, MNIST, read_idx

PLANNED = {"idx": 500, "idx.gz": 200, "idx float": 100, "cifar10 py": 500, "cifar10 bin": 250, "cifar100 bin": 250}
TOTAL = sum(PLANNED.values())
_counts: dict[str, int] = {}


def _idx(arr: np.ndarray, code: int) -> bytes:
    head = bytes([0, 0, code, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def _mnist_root(root, rng, gz: bool):
    root.mkdir()
    imgs = _idx(rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), 0x08)
    labs = _idx(rng.integers(0, 10, 5).astype(np.uint8), 0x08)
    seeds = []
    for name, raw in (("t10k-images-idx3-ubyte", imgs), ("t10k-labels-idx1-ubyte", labs)):
        if gz:
            name, raw = name + ".gz", gzip.compress(raw, mtime=0)
        (root / name).write_bytes(raw)
        seeds.append((root / name, raw))
    return seeds


@pytest.mark.parametrize("gz", [False, True])
def test_fuzz_idx_mnist(tmp_path, rng, fuzz, gz):
    seeds = _mnist_root(tmp_path / "m", rng, gz)
    label = "idx.gz" if gz else "idx"
    out = fuzz(label, seeds, lambda p: MNIST(p.parent).load("val"), PLANNED[label], seed=11 + gz, header=24)
    assert out.rejected > 0.2 * out.cases
    _counts[label] = out.cases


def test_fuzz_idx_other_types(tmp_path, rng, fuzz):
    p = tmp_path / "f.idx"
    raw = _idx(rng.standard_normal((3, 4)).astype(np.float32), 0x0D)
    p.write_bytes(raw)
    _counts["idx float"] = fuzz("idx float", [(p, raw)], read_idx, PLANNED["idx float"], seed=13, header=16).cases


def _py_batch(rng, n: int, key: bytes = b"labels") -> bytes:
    d = {b"batch_label": b"x", b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), key: [1, 2, 3][:n]}
    return pickle.dumps(d, protocol=2)


def _names(p):
    return (str(p), str(p.parent))


def test_fuzz_cifar_python_batches(tmp_path, rng, fuzz, cifar_records):
    cifar_records(CIFAR10, train=2, val=2)
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    seeds = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        raw = _py_batch(rng, 2)
        (d / name).write_bytes(raw)
        seeds.append((d / name, raw))
    ds = CIFAR10(tmp_path)

    def load(p):
        ds.load("val" if p.name == "test_batch" else "train")

    out = fuzz("cifar10 py", seeds, load, PLANNED["cifar10 py"], seed=17, names=_names, header=128)
    assert out.rejected > 0.2 * out.cases
    _counts["cifar10 py"] = out.cases


@pytest.mark.parametrize("cls, dirname, files, label_bytes", [
    (CIFAR10, "cifar-10-batches-bin", [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"], 1),
    (CIFAR100, "cifar-100-binary", ["train.bin", "test.bin"], 2),
])
def test_fuzz_cifar_binary(tmp_path, rng, fuzz, cifar_records, cls, dirname, files, label_bytes):
    cifar_records(cls, train=2, val=2)
    d = tmp_path / dirname
    d.mkdir()
    seeds = []
    for name in files:
        recs = np.concatenate(
            [rng.integers(0, 10, (2, label_bytes), dtype=np.uint8), rng.integers(0, 256, (2, 3072), dtype=np.uint8)], 1
        )
        (d / name).write_bytes(recs.tobytes())
        seeds.append((d / name, recs.tobytes()))
    ds = cls(tmp_path)

    def load(p):
        ds.load("val" if p.name.startswith("test") else "train")

    label = f"{cls.name} bin"
    out = fuzz(label, seeds, load, PLANNED[label], seed=19 + label_bytes, names=_names)
    assert out.rejected > 0.2 * out.cases
    _counts[label] = out.cases


@one_process
def test_fuzz_files_ran_every_planned_case():
    # after the suites above (pytest runs a file's tests in order)
    total = print_total("tr.data file parsers", _counts)
    assert _counts == PLANNED and total >= TOTAL
