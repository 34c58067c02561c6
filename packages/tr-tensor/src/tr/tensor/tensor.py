"""Host Tensor: an NHWC numpy container, saved and loaded as TRT (tr.tensor.trt documents the format),
``.npy`` (numpy's format) or safetensors (when the ``safetensors`` package is installed); the seed's
TSR-V4.20 files (tr.tensor.tsr) are read.

Every save is atomic (tr.tensor.atomic: temporary file, fsync, rename); every load of a missing, corrupt
or truncated file raises DataError naming the file and the problem.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import DataError, DTypeError, ShapeError
from tr.core.shape import Shape
from tr.tensor import npy, safetensors_io, trt, tsr
from tr.tensor.atomic import write_bytes

MAGIC = trt.MAGIC
VERSION = trt.VERSION


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

    # --- files ----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write atomically to ``path``: .npy, .safetensors (one tensor, named by ``name``), else TRT."""
        path = Path(path)
        if path.suffix == ".npy":
            return npy.save_npy(path, self.data, self.dtype)
        if path.suffix == ".safetensors":
            save_safetensors(path, {self.name or "tensor": self})
            return path
        return write_bytes(path, trt.encode(self.data, self.dtype, self.name))

    @classmethod
    def load(cls, path: str | Path) -> Tensor:
        """The tensor of a .npy, .safetensors (one tensor), seed TSR4 (one tensor; known by its magic) or TRT
        file."""
        path = Path(path)
        if not path.exists():
            raise DataError(f"tensor file {path} does not exist")
        if path.suffix == ".npy":
            arr, dt = npy.load_npy(path)
            return _checked(path, arr, dt, path.stem)
        if path.suffix == ".safetensors":
            tensors = load_safetensors(path)
            if len(tensors) != 1:
                raise DataError(f"{path} holds {len(tensors)} tensors; use load_safetensors() for several")
            return next(iter(tensors.values()))
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
        if raw[:len(tsr.MAGIC)] == tsr.MAGIC:
            tensors = tsr.decode(raw, path)
            if len(tensors) != 1:
                raise DataError(f"{path} holds {len(tensors)} tensors; use load_tsr() for several")
            return _checked(path, *tensors[0], path.stem)
        arr, dt, name = trt.decode(raw, path)
        return cls(arr, dt, name)


def _checked(path: Path, arr: np.ndarray, dt: DType, name: str) -> Tensor:
    """A Tensor of a loaded array; a shape or dtype tr cannot hold is a DataError naming the file."""
    try:
        return Tensor(arr, dt, name)
    except (ShapeError, DTypeError) as e:
        raise DataError(f"{path}: {name!r}: {e}") from None


def save_safetensors(path: str | Path, tensors: dict[str, Tensor]) -> None:
    """Write every tensor (BF16 included) into one safetensors file, atomically."""
    safetensors_io.save(Path(path), {k: (t.data, t.dtype) for k, t in tensors.items()})


def load_safetensors(path: str | Path) -> dict[str, Tensor]:
    path = Path(path)
    return {k: _checked(path, a, dt, k) for k, (a, dt) in safetensors_io.load(path).items()}


def load_tsr(path: str | Path) -> dict[str, Tensor]:
    """Every tensor of a seed TSR-V4.20 file in its order, named "0", "1", ... (TSR files name none)."""
    path = Path(path)
    return {str(i): _checked(path, a, dt, str(i)) for i, (a, dt) in enumerate(tsr.load(path))}
