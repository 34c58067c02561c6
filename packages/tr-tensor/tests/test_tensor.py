import numpy as np
import pytest

from tr.core import DType, Region, Role, Shape
from tr.core.errors import DataError, DTypeError, ShapeError
from tr.core.memory import dtype_group
from tr.tensor import DTensor, Tensor, slot_bytes_for


def test_roundtrip_trt(tmp_path):
    rng = np.random.default_rng(0)
    for dt in (DType.FP32, DType.FP16, DType.INT8, DType.INT32):
        t = Tensor((rng.standard_normal((2, 3, 4, 5)) * 10).astype(dt.np_dtype), name=f"w_{dt.value}")
        back = Tensor.load(t.save(tmp_path / f"{dt.value}.trt"))
        assert back.dtype is dt and back.name == t.name and back.shape == Shape(2, 3, 4, 5)
        assert np.array_equal(back.data, t.data)


def test_right_aligned_construction():
    assert Tensor(np.zeros(10, np.float32)).shape == Shape(1, 1, 1, 10)
    with pytest.raises(ShapeError, match="1 to 4 dimensions"):
        Tensor(np.zeros((1, 2, 3, 4, 5), np.float32))
    with pytest.raises(DTypeError):
        Tensor(np.zeros(3, np.float64))


def test_npy_and_safetensors_interop(tmp_path):
    t = Tensor(np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4), name="x")
    assert np.array_equal(Tensor.load(t.save(tmp_path / "x.npy")).data, t.data)
    pytest.importorskip("safetensors")
    assert np.array_equal(Tensor.load(t.save(tmp_path / "x.safetensors")).data, t.data)


def test_corrupt_files_are_named(tmp_path):
    p = Tensor(np.ones((1, 1, 2, 2), np.float32)).save(tmp_path / "a.trt")
    raw = bytearray(p.read_bytes())
    (tmp_path / "trunc.trt").write_bytes(raw[:-3])
    with pytest.raises(DataError, match=r"trunc.trt: file has .* \(truncated"):
        Tensor.load(tmp_path / "trunc.trt")
    bad = bytearray(raw)
    bad[-1] ^= 0xFF
    (tmp_path / "crc.trt").write_bytes(bad)
    with pytest.raises(DataError, match="CRC mismatch"):
        Tensor.load(tmp_path / "crc.trt")
    (tmp_path / "magic.trt").write_bytes(b"NOTATENS" + raw[8:])
    with pytest.raises(DataError, match="bad magic"):
        Tensor.load(tmp_path / "magic.trt")
    with pytest.raises(DataError, match="does not exist"):
        Tensor.load(tmp_path / "missing.trt")


def test_slot_bytes_fp32_is_twice_fp16():
    for s in (Shape(1, 1, 1, 1), Shape(200, 1, 1, 1024), Shape(7, 13, 13, 3)):
        assert slot_bytes_for(s, DType.FP32) == 2 * slot_bytes_for(s, DType.FP16)
        assert slot_bytes_for(s, DType.FP16) % 256 == 0
    assert slot_bytes_for(Shape(1, 2, 2, 3), DType.FP16, pad_c=8) == 256


def test_dtensor_strides_and_checks():
    t = DTensor(0, "x", Region(Role.ACTIVATION, dtype_group(DType.FP16)), Shape(2, 3, 4, 5), DType.FP16,
                slot_bytes_for(Shape(2, 3, 4, 5), DType.FP16, 8), pad_c=8)
    assert t.cpu_strides == (60, 20, 5, 1) and t.device_strides == (96, 32, 8, 1)
    assert t.at(512).offset == 512 and not t.placed
    with pytest.raises(ShapeError, match="not 256-byte aligned"):
        t.at(100)
    with pytest.raises(ShapeError, match="cannot hold"):
        DTensor(1, "y", Region(Role.TEMP, dtype_group(DType.FP32)), Shape(1, 1, 1, 1000), DType.FP32, 256)
