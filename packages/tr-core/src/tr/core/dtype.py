"""Element types of tensors in an arena."""

from __future__ import annotations

from enum import Enum

import numpy as np

from tr.core.errors import DTypeError


class DType(Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    INT32 = "int32"
    UINT8 = "uint8"  # image bytes (a data set resident on the device)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def np_dtype(self) -> np.dtype:
        """numpy dtype holding this type; BF16 has no numpy type and is stored as its uint16 bit pattern."""
        return _NUMPY[self]

    @property
    def code(self) -> int:
        """The number native code knows this type by (the CUDA ops' ``<name>_dt``; codes.hpp's ``enum class DT``,
        which tools/gen_native_codes.py writes from this table)."""
        return _CODE[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.FP32, DType.FP16, DType.BF16)

    @classmethod
    def parse(cls, value: object) -> DType:
        """Accept a DType, its name or value ("fp16", "FP16") or a numpy dtype."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            for d in cls:
                if key in (d.value, d.name.lower()):
                    return d
            raise DTypeError(f"unknown dtype {value!r}; expected one of {[d.value for d in cls]}")
        try:
            npd = np.dtype(value)  # type: ignore[call-overload]
        except TypeError:
            raise DTypeError(f"unknown dtype {value!r}") from None
        for d in cls:
            if d is not DType.BF16 and _NUMPY[d] == npd:
                return d
        raise DTypeError(f"numpy dtype {npd} has no tr DType; expected float32, float16, int8, int32 or uint8")


_CODE = {DType.FP32: 0, DType.FP16: 1, DType.BF16: 2, DType.INT8: 3, DType.INT32: 4, DType.UINT8: 5}
_ITEMSIZE = {DType.FP32: 4, DType.FP16: 2, DType.BF16: 2, DType.INT8: 1, DType.INT32: 4, DType.UINT8: 1}
_NUMPY = {
    DType.FP32: np.dtype(np.float32),
    DType.FP16: np.dtype(np.float16),
    DType.BF16: np.dtype(np.uint16),
    DType.INT8: np.dtype(np.int8),
    DType.INT32: np.dtype(np.int32),
    DType.UINT8: np.dtype(np.uint8),
}
