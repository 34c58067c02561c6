"""The seed's TSR-V4.20 tensor files (built here from the seed's layout, python/scripts/tsr_v4.py): RAW and
ZLIB files of every dtype read back exactly; damaged files refused by name."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from tsr_files import tsr_bytes

from tr.core import DType
from tr.core.errors import DataError
from tr.tensor import Tensor, load_tsr


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [rng.standard_normal((2, 3, 5, 4)).astype(np.float32),
            rng.standard_normal((1, 7, 3, 2)).astype(np.float16),
            rng.integers(-128, 128, (3, 2, 2, 5)).astype(np.int8),
            rng.integers(-2**31, 2**31, (1, 1, 9, 1)).astype(np.int32)]


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "zlib"])
def test_every_dtype_reads_back_exactly(tmp_path, compress):
    arrays = _arrays()
    p = tmp_path / "ref.tsr"
    p.write_bytes(tsr_bytes(arrays, compress))
    got = load_tsr(p)
    assert list(got) == ["0", "1", "2", "3"]
    for t, a, dt in zip(got.values(), arrays, (DType.FP32, DType.FP16, DType.INT8, DType.INT32)):
        assert t.dtype is dt and t.data.shape == a.shape
        np.testing.assert_array_equal(t.data, a)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "zlib"])
def test_tensor_load_reads_a_one_tensor_file_by_its_magic(tmp_path, compress):
    a = _arrays()[0]
    p = tmp_path / "conv_weight.tsr"
    p.write_bytes(tsr_bytes([a], compress))
    t = Tensor.load(p)
    assert t.name == "conv_weight" and t.dtype is DType.FP32
    np.testing.assert_array_equal(t.data, a)
    p2 = tmp_path / "two.tsr"
    p2.write_bytes(tsr_bytes(_arrays()[:2], compress))
    with pytest.raises(DataError, match="holds 2 tensors; use load_tsr"):
        Tensor.load(p2)


def _fix_header_crc(raw: bytearray) -> bytearray:
    struct.pack_into("<I", raw, 40, 0)
    struct.pack_into("<I", raw, 40, zlib.crc32(raw[:128]))
    return raw


def _damaged(name: str) -> tuple[bytearray, str]:
    arrays = _arrays()
    raw = tsr_bytes(arrays, compress=name.startswith("zlib"))
    entry1 = 128 + 64
    if name == "bad magic":
        raw[:4] = b"TSR3"
        return raw, r"bad magic b'TSR3', expected b'TSR4'"
    if name == "wrong version":
        struct.pack_into("<HH", raw, 4, 4, 21)
        return raw, r"TSR version 4\.21 \(bytes 4-7\) is not supported"
    if name == "header crc":
        raw[16] = 3  # tensor_count, not re-summed
        return raw, r"header CRC mismatch"
    if name == "truncated":
        return raw[:-10], r"tensor 3 .*: its data \(bytes \d+-\d+\) runs past the end .* \(truncated\)"
    if name == "entry past the end":
        struct.pack_into("<I", raw, 16, 200)
        return _fix_header_crc(raw), r"directory entry \d+ \(bytes \d+-\d+\) of 200 runs past the end"
    if name == "unknown dtype":
        raw[entry1] = 7
        return raw, r"tensor 1 \(entry at byte 192\): unknown dtype code 7"
    if name == "numel":
        struct.pack_into("<q", raw, entry1 + 20, 43)
        return raw, r"tensor 1 .*: numel 43 \(byte 212\) is not that of shape \(1, 7, 3, 2\)"
    if name == "shape":
        struct.pack_into("<i", raw, entry1 + 8, 0)
        return raw, r"tensor 1 .*: corrupt shape"
    if name == "data offset":
        struct.pack_into("<Q", raw, entry1 + 44, 1 << 40)
        return raw, r"tensor 1 .*: data_offset 1099511627776 \(byte 236\) is not \d+"
    if name == "payload crc":
        raw[-3] ^= 0x10
        return raw, r"tensor 3 .*: data CRC mismatch"
    if name == "trailing":
        return raw + b"\0", r"the last tensor's payload ends at byte \d+ \(trailing bytes\)"
    if name == "zlib error":
        at = struct.unpack_from("<Q", raw, entry1 + 44)[0]
        raw[at + 2:at + 6] = b"\xff\xff\xff\xff"
        return raw, r"tensor 1 .*: zlib error in its compressed data"
    if name == "zlib short":
        at, size = struct.unpack_from("<QQ", raw, entry1 + 44)
        short = zlib.compress(bytes(10))
        raw[at:at + size] = short + bytes(size - len(short))
        return raw, r"tensor 1 .*: its zlib stream (has bytes after the end|decompresses to 10 bytes)"
    raise AssertionError(name)


DAMAGE = ["bad magic", "wrong version", "header crc", "truncated", "entry past the end", "unknown dtype", "numel",
          "shape", "data offset", "payload crc", "trailing", "zlib error", "zlib short"]


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_file_is_refused_by_name(tmp_path, name):
    raw, message = _damaged(name)
    p = tmp_path / "bad.tsr"
    p.write_bytes(raw)
    with pytest.raises(DataError, match=message) as e:
        load_tsr(p)
    assert str(p) in str(e.value)


def test_zlib_stream_longer_than_its_tensor_is_refused(tmp_path):
    raw = tsr_bytes([np.zeros((1, 1, 2, 2), np.float32)], compress=True)
    at = struct.unpack_from("<Q", raw, 128 + 44)[0]
    big = zlib.compress(bytes(1 << 20))  # 1 MiB of zeros where 16 bytes belong
    raw = raw[:at] + big
    struct.pack_into("<Q", raw, 128 + 52, len(big))
    p = tmp_path / "bomb.tsr"
    p.write_bytes(raw)
    with pytest.raises(DataError, match="decompresses to more than 16 bytes"):
        load_tsr(p)


def test_a_short_file_is_truncated(tmp_path):
    p = tmp_path / "short.tsr"
    p.write_bytes(b"TSR4" + bytes(20))
    with pytest.raises(DataError, match="shorter than the 128-byte TSR4 header"):
        load_tsr(p)
