"""The idx reader: plain and gzipped files, magic and size checks with messages naming the file."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tr.core.errors import DataError
from tr.data import read_idx


def idx_bytes(a: np.ndarray) -> bytes:
    code = {np.uint8: 0x08, np.int32: 0x0C, np.float32: 0x0D}[a.dtype.type]
    head = bytes([0, 0, code, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


def test_reads_plain_and_gzipped(tmp_path, rng):
    a = rng.integers(0, 256, (5, 4, 3), dtype=np.uint8)
    (tmp_path / "a").write_bytes(idx_bytes(a))
    (tmp_path / "b.gz").write_bytes(gzip.compress(idx_bytes(a)))
    np.testing.assert_array_equal(read_idx(tmp_path / "a", 3), a)
    np.testing.assert_array_equal(read_idx(tmp_path / "b.gz", 3), a)
    f = rng.normal(size=(3, 2)).astype(np.float32)
    (tmp_path / "f").write_bytes(idx_bytes(f))
    np.testing.assert_array_equal(read_idx(tmp_path / "f"), f)


def test_truncated_file_names_path_and_sizes(tmp_path, rng):
    a = rng.integers(0, 256, (10, 28, 28), dtype=np.uint8)
    p = tmp_path / "train-images-idx3-ubyte"
    p.write_bytes(idx_bytes(a)[:-100])
    with pytest.raises(
        DataError,
        match=rf"{p}: truncated idx file: header says shape \(10, 28, 28\) so 7856 bytes are expected, got 7756",
    ):
        read_idx(p, 3)
    p.write_bytes(idx_bytes(a) + b"xx")
    with pytest.raises(DataError, match="oversized idx file"):
        read_idx(p, 3)
    p.write_bytes(b"\x00\x00")
    with pytest.raises(DataError, match="shorter than the 4-byte magic"):
        read_idx(p)


def test_truncated_gzip(tmp_path, rng):
    p = tmp_path / "x.gz"
    p.write_bytes(gzip.compress(idx_bytes(rng.integers(0, 256, (100, 10), dtype=np.uint8)))[:-20])
    with pytest.raises(DataError, match=rf"{p}: corrupt or truncated gzip"):
        read_idx(p)


def test_wrong_magic(tmp_path):
    p = tmp_path / "bad"
    p.write_bytes(b"\x12\x34\x08\x03" + b"\x00" * 20)
    with pytest.raises(DataError, match=rf"{p}: not an idx file: magic number 0x12340803 \(expected 0x00000803\)"):
        read_idx(p, 3)
    p.write_bytes(idx_bytes(np.zeros(4, np.uint8)))
    with pytest.raises(DataError, match=r"has 1 dimensions \(magic 0x00000801\), expected 3 \(magic 0x00000803\)"):
        read_idx(p, 3)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        read_idx(tmp_path / "nope")
