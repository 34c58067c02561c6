"""The TRT format, version 2: the header (shape, dtype, sizes, name) is under its own CRC."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from tr.core import DType, Shape
from tr.core.errors import DataError
from tr.tensor import Tensor, trt


def _file(tmp_path, name="w", shape=(2, 3, 4, 5), dtype=np.float32):
    rng = np.random.default_rng(3)
    t = Tensor((rng.standard_normal(shape) * 10).astype(dtype), name=name)
    return t, t.save(tmp_path / f"{name}.trt")


def test_writes_version_2_and_round_trips_every_dtype(tmp_path):
    rng = np.random.default_rng(0)
    for dt in DType:
        data = rng.integers(0, 2**15, (2, 3, 4, 5)).astype(dt.np_dtype)
        t = Tensor(data, dt, name=f"t_{dt.value}")
        p = t.save(tmp_path / f"{dt.value}.trt")
        assert struct.unpack_from("<I", p.read_bytes(), 8)[0] == 2
        back = Tensor.load(p)
        assert back.dtype is dt and back.name == t.name and back.shape == Shape(2, 3, 4, 5)
        assert np.array_equal(back.data, t.data)


def test_permuted_shape_is_detected(tmp_path):
    # The reporter's case: H and W swapped keeps the payload size and CRC; version 1 loaded it.
    _, p = _file(tmp_path)
    raw = bytearray(p.read_bytes())
    h, w = struct.unpack_from("<2I", raw, 20)
    struct.pack_into("<2I", raw, 20, w, h)
    p.write_bytes(raw)
    with pytest.raises(DataError, match=r"w.trt: header CRC mismatch"):
        Tensor.load(p)


@pytest.mark.parametrize("offset", [12, 16, 28, 44, 64])  # dtype code, N, C, name length, name
def test_any_header_or_name_change_is_detected(tmp_path, offset):
    _, p = _file(tmp_path, shape=(2, 2, 2, 2), dtype=np.int32)
    raw = bytearray(p.read_bytes())
    raw[offset] ^= 0x01
    p.write_bytes(raw)
    with pytest.raises(DataError, match=str(p)):
        Tensor.load(p)


def _v1(data: np.ndarray, code: int, name: bytes, reserved: bytes = b"\0" * 16) -> bytes:
    payload = data.tobytes()
    head = struct.pack("<8sII4IQII16s", b"TRTENSOR", 1, code, *data.shape, len(payload),
                       zlib.crc32(payload) & 0xFFFFFFFF, len(name), reserved)
    return head + name + b"\0" * ((-(64 + len(name))) % 64) + payload


def test_version_1_files_are_still_read(tmp_path):
    data = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    (tmp_path / "old.trt").write_bytes(_v1(data, 0, b"old"))
    t = Tensor.load(tmp_path / "old.trt")
    assert t.name == "old" and np.array_equal(t.data, data)
    # a version-2 header whose version field flipped to 1 still carries its CRC in the reserved bytes
    (tmp_path / "flip.trt").write_bytes(_v1(data, 0, b"x", reserved=b"\x01" + b"\0" * 15))
    with pytest.raises(DataError, match="flip.trt: version-1 header has non-zero reserved bytes"):
        Tensor.load(tmp_path / "flip.trt")


def test_unknown_versions_are_refused(tmp_path):
    _, p = _file(tmp_path)
    raw = bytearray(p.read_bytes())
    struct.pack_into("<I", raw, 8, 3)
    p.write_bytes(raw)
    with pytest.raises(DataError, match="TRT version 3 is not supported"):
        Tensor.load(p)


def test_decode_names_the_file_for_short_input(tmp_path):
    with pytest.raises(DataError, match=r"x.trt: 10 bytes is shorter than the 64-byte TRT header"):
        trt.decode(b"TRTENSOR\0\0", tmp_path / "x.trt")
