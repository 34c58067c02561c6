"""Host Tensor: an NHWC numpy container with a documented file format (TRT, see FORMAT below).

TRT file format, version 1 (all integers little-endian):

    offset size  field
    0      8     magic b"TRTENSOR"
    8      4     u32 format version (1)
    12     4     u32 dtype code: 0 FP32, 1 FP16, 2 INT8, 3 INT32, 4 BF16 (stored as raw 16-bit patterns)
    16     16    u32[4] shape N, H, W, C
    32     8     u64 payload bytes (= N*H*W*C*itemsize)
    40     4     u32 CRC-32 (zlib) of the payload
    44     4     u32 name length L (bytes of UTF-8)
    48     16    reserved, zero
    64     L     name, UTF-8
    64+L   ...   zero padding up to the next multiple of 64
    ...          payload: the elements in compact NHWC order

Load checks the magic, version, dtype code, sizes and CRC and raises DataError naming the file and the
problem. ``.npy`` files (numpy's format) and safetensors files (when the ``safetensors`` package is
installed) are read and written too.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import DataError, ShapeError
from tr.core.shape import Shape

MAGIC = b"TRTENSOR"
VERSION = 1
_HEADER = struct.Struct("<8sII4IQII16s")
assert _HEADER.size == 64
_CODES = {DType.FP32: 0, DType.FP16: 1, DType.INT8: 2, DType.INT32: 3, DType.BF16: 4}
_FROM_CODE = {v: k for k, v in _CODES.items()}


class Tensor:
    """A 4-D NHWC host tensor. ``data`` is a C-contiguous numpy array of shape (N, H, W, C)."""

    __slots__ = ("data", "dtype", "name")

    def __init__(self, data: np.ndarray, dtype: DType | str | None = None, name: str = "") -> None:
        arr = np.asarray(data)
        dt = DType.parse(dtype) if dtype is not None else DType.parse(arr.dtype)
        if arr.ndim > 4 or arr.ndim == 0:
            raise ShapeError(f"Tensor needs 1 to 4 dimensions (NHWC, right-aligned), got shape {arr.shape}")
        shape = Shape.of(*arr.shape)
        self.data = np.ascontiguousarray(arr.reshape(shape.dims), dtype=dt.np_dtype)
        self.dtype = dt
        self.name = name

    # --- construction -----------------------------------------------------------------------------
    @classmethod
    def zeros(cls, shape: Shape | tuple[int, ...], dtype: DType | str = DType.FP32, name: str = "") -> Tensor:
        s = shape if isinstance(shape, Shape) else Shape.of(*shape)
        dt = DType.parse(dtype)
        return cls(np.zeros(s.dims, dt.np_dtype), dt, name)

    @property
    def shape(self) -> Shape:
        return Shape(*self.data.shape)

    def numpy(self) -> np.ndarray:
        return self.data

    def is_close(self, other: Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
        if self.shape != other.shape:
            return False
        return bool(np.allclose(self.data.astype(np.float64), other.data.astype(np.float64), rtol=rtol, atol=atol))

    def __repr__(self) -> str:
        nm = f"{self.name!r}, " if self.name else ""
        return f"Tensor({nm}{self.shape}, {self.dtype.name})"

    # --- TRT files -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.suffix == ".npy":
            np.save(path, self.data)
            return path
        if path.suffix == ".safetensors":
            save_safetensors(path, {self.name or "tensor": self})
            return path
        payload = self.data.tobytes()
        name = self.name.encode("utf-8")
        header = _HEADER.pack(MAGIC, VERSION, _CODES[self.dtype], *self.shape.dims, len(payload),
                              zlib.crc32(payload) & 0xFFFFFFFF, len(name), b"\0" * 16)
        pad = (-(len(header) + len(name))) % 64
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:  # write then rename: an interrupted save never leaves a torn file
            f.write(header + name + b"\0" * pad + payload)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Tensor:
        path = Path(path)
        if not path.exists():
            raise DataError(f"tensor file {path} does not exist")
        if path.suffix == ".npy":
            return cls(np.load(path, allow_pickle=False), name=path.stem)
        if path.suffix == ".safetensors":
            tensors = load_safetensors(path)
            if len(tensors) != 1:
                raise DataError(f"{path} holds {len(tensors)} tensors; use load_safetensors() for several")
            return next(iter(tensors.values()))
        raw = path.read_bytes()
        if len(raw) < _HEADER.size:
            raise DataError(f"{path}: {len(raw)} bytes is shorter than the 64-byte TRT header")
        magic, ver, code, n, h, w, c, nbytes, crc, nlen, _ = _HEADER.unpack_from(raw)
        if magic != MAGIC:
            raise DataError(f"{path}: bad magic {magic!r}, expected {MAGIC!r} (not a TRT tensor file)")
        if ver != VERSION:
            raise DataError(f"{path}: TRT version {ver} is not supported (this build reads version {VERSION})")
        if code not in _FROM_CODE:
            raise DataError(f"{path}: unknown dtype code {code}")
        dt = _FROM_CODE[code]
        try:
            shape = Shape(n, h, w, c)
        except ShapeError as e:
            raise DataError(f"{path}: corrupt shape: {e}") from None
        if nbytes != shape.numel() * dt.itemsize:
            raise DataError(f"{path}: payload size {nbytes} disagrees with shape {shape} of {dt.name}")
        start = _HEADER.size + nlen + (-(_HEADER.size + nlen)) % 64
        if len(raw) != start + nbytes:
            raise DataError(f"{path}: file has {len(raw)} bytes, expected {start + nbytes} (truncated or padded)")
        payload = raw[start:]
        if zlib.crc32(payload) & 0xFFFFFFFF != crc:
            raise DataError(f"{path}: CRC mismatch, the payload is corrupt")
        name = raw[_HEADER.size:_HEADER.size + nlen].decode("utf-8", errors="replace")
        arr = np.frombuffer(payload, dtype=dt.np_dtype).reshape(shape.dims).copy()
        return cls(arr, dt, name)


def save_safetensors(path: str | Path, tensors: dict[str, Tensor]) -> None:
    try:
        from safetensors.numpy import save_file
    except ImportError as e:  # optional interop
        raise DataError("saving .safetensors needs the 'safetensors' package (pip install safetensors)") from e
    save_file({k: t.data for k, t in tensors.items() if t.dtype is not DType.BF16}, str(path))


def load_safetensors(path: str | Path) -> dict[str, Tensor]:
    try:
        from safetensors.numpy import load_file
    except ImportError as e:
        raise DataError("reading .safetensors needs the 'safetensors' package (pip install safetensors)") from e
    return {k: Tensor(v, name=k) for k, v in load_file(str(path)).items()}
