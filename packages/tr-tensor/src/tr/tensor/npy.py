"""``.npy`` files (numpy's format, read and written by numpy.lib.format), saved atomically and checked
on load so that a corrupt or truncated file is a DataError naming it, never a raw numpy error."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import numpy.lib.format as npf

from tr.core.dtype import DType
from tr.core.errors import DataError, DTypeError
from tr.tensor.atomic import atomic_write


def save_npy(path: Path, data: np.ndarray, dtype: DType) -> Path:
    if dtype is DType.BF16:  # it would come back as uint16, which is not BF16
        raise DTypeError(f"{path}: .npy has no bfloat16 type; save BF16 tensors as .trt or .safetensors")
    return atomic_write(path, lambda f: npf.write_array(f, data, allow_pickle=False))


def _header(f, path: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        major, _ = npf.read_magic(f)
        if major == 1:
            return npf.read_array_header_1_0(f)
        if major in (2, 3):  # 3.0 differs from 2.0 only in the header's encoding (utf-8 field names)
            return npf.read_array_header_2_0(f)
        raise ValueError(f"unknown .npy format version {major}")
    except Exception as e:  # numpy's header parser fails in many ways on garbage (TokenError, ...)
        raise DataError(f"{path}: not a valid .npy file: corrupt or truncated header ({e})") from None


def load_npy(path: Path) -> tuple[np.ndarray, DType]:
    """The array of a .npy file and its tr dtype; DataError for anything tr cannot load."""
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = _header(f, path)
            if dtype.hasobject:
                raise DataError(f"{path}: holds Python objects (dtype {dtype}); tr never unpickles .npy files")
            try:
                dt = DType.parse(dtype)
            except DTypeError as e:
                raise DataError(f"{path}: {e}") from None
            if not 1 <= len(shape) <= 4 or math.prod(shape) == 0:
                raise DataError(f"{path}: shape {shape} is not a 1- to 4-dimensional non-empty tensor")
            # Check the size before numpy allocates what a corrupt header claims.
            expected = f.tell() + math.prod(shape) * dtype.itemsize
            actual = os.fstat(f.fileno()).st_size
            if actual != expected:
                what = "truncated" if actual < expected else "trailing bytes"
                raise DataError(
                    f"{path}: header says shape {shape} of {dtype} so {expected} bytes are expected, "
                    f"the file has {actual} ({what})"
                )
            f.seek(0)
            arr = npf.read_array(f, allow_pickle=False)
    except DataError:
        raise
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from e
    except (ValueError, EOFError) as e:  # anything numpy still finds wrong with the payload
        raise DataError(f"{path}: not a valid .npy file ({e})") from None
    return np.ascontiguousarray(arr), dt
