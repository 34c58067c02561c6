"""safetensors files through the maintained ``safetensors`` package (its serialize / deserialize).

safetensors.numpy cannot express bfloat16 (numpy has no such type), so the tensors go through the
package's framework-neutral layer: a ``TensorSpec`` names the dtype ("bfloat16" for BF16, whose bits tr
keeps as uint16) and ``deserialize`` reports it ("BF16"). Saves are atomic; any corrupt or truncated
file is a DataError naming it.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import numpy as np

from tr.core.dtype import DType
from tr.core.errors import DataError
from tr.tensor.atomic import write_bytes

# tr dtype -> (name TensorSpec takes, name deserialize reports)
_NAMES = {
    DType.FP32: ("float32", "F32"),
    DType.FP16: ("float16", "F16"),
    DType.BF16: ("bfloat16", "BF16"),
    DType.INT8: ("int8", "I8"),
    DType.INT32: ("int32", "I32"),
    DType.UINT8: ("uint8", "U8"),
}
_FROM_FILE = {v[1]: k for k, v in _NAMES.items()}


def _lib(action: str) -> ModuleType:
    try:
        import safetensors
    except ImportError as e:  # optional interop (pip install tr-tensor[safetensors])
        raise DataError(f"{action} .safetensors needs the 'safetensors' package (pip install safetensors)") from e
    return safetensors


def save(path: Path, tensors: dict[str, tuple[np.ndarray, DType]]) -> Path:
    return write_bytes(path, to_bytes(path, tensors))


def to_bytes(path: Path, tensors: dict[str, tuple[np.ndarray, DType]]) -> bytes:
    """The safetensors bytes of ``tensors`` (``path`` only names the file in errors); callers that checksum
    what they write (tr.task.checkpoint) hash these bytes."""
    st = _lib("saving")
    arrays = {k: np.ascontiguousarray(a, dtype=dt.np_dtype.newbyteorder("<")) for k, (a, dt) in tensors.items()}
    specs = {
        k: st.TensorSpec(dtype=_NAMES[tensors[k][1]][0], shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)
        for k, a in arrays.items()
    }
    try:
        raw = st.serialize(specs)  # `arrays` keeps the buffers alive until here
    except st.SafetensorError as e:
        raise DataError(f"{path}: cannot serialize the tensors ({e})") from e
    return raw


def load(path: Path) -> dict[str, tuple[np.ndarray, DType]]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
    return from_bytes(path, raw)


def from_bytes(path: Path, raw: bytes) -> dict[str, tuple[np.ndarray, DType]]:
    """Parse safetensors bytes read from ``path`` (named in errors)."""
    st = _lib("reading")
    try:
        flat = st.deserialize(raw)
    except Exception as e:  # SafetensorError, and whatever else the Rust parser reports for bad input
        raise DataError(f"{path}: not a valid safetensors file ({e})") from None
    out: dict[str, tuple[np.ndarray, DType]] = {}
    for name, view in flat:
        dt = _FROM_FILE.get(view["dtype"])
        if dt is None:
            raise DataError(
                f"{path}: tensor {name!r} has dtype {view['dtype']}, which tr cannot hold "
                f"(expected one of {sorted(_FROM_FILE)})"
            )
        shape = tuple(view["shape"])
        if len(view["data"]) != math.prod(shape) * dt.itemsize:  # the library checks it too
            raise DataError(f"{path}: tensor {name!r} has {len(view['data'])} bytes, not shape {shape} of {dt.name}")
        arr = np.frombuffer(view["data"], dtype=dt.np_dtype.newbyteorder("<")).astype(dt.np_dtype).reshape(shape)
        out[name] = (arr, dt)
    return out
