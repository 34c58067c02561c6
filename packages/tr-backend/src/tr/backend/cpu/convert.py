"""Element type conversion for the CPU backend.

numpy has float32 and float16; BF16 is kept as its uint16 bit pattern (DType.BF16.np_dtype) and converted by
tr.core.bf16's one definition (widening a 16-bit shift, narrowing to nearest even, NaN a quiet NaN).
FP32 <-> FP16 uses numpy's IEEE round-to-nearest-even cast (overflow -> inf),
like CUDA's ``__float2half``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tr.core.bf16 import bf16_bits, bf16_values
from tr.core.dtype import DType

Converter = Callable[[np.ndarray, np.ndarray], None]


def bf16_to_f32(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst`` (float32, C-contiguous) = widened bfloat16 bit patterns ``src`` (uint16)."""
    bf16_values(src, out=dst)


def f32_to_bf16(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst`` (uint16 bit patterns) = ``src`` (float32) rounded to bfloat16, nearest even (tr.core.bf16)."""
    bf16_bits(src, out=dst)


def _via_f32(first: Converter, second: Converter) -> Converter:
    def conv(src: np.ndarray, dst: np.ndarray) -> None:
        tmp = np.empty(src.shape, np.float32)
        first(src, tmp)
        second(tmp, dst)

    return conv


def _numpy_cast(src: np.ndarray, dst: np.ndarray) -> None:
    np.copyto(dst, src, casting="unsafe")


def converter(src: DType, dst: DType) -> Converter:
    """A function ``(src_array, dst_array)`` that casts element-wise between two tr dtypes."""
    if src is dst:
        return _numpy_cast
    if src is DType.BF16:
        return bf16_to_f32 if dst is DType.FP32 else _via_f32(bf16_to_f32, _numpy_cast)
    if dst is DType.BF16:
        return f32_to_bf16 if src is DType.FP32 else _via_f32(_numpy_cast, f32_to_bf16)
    return _numpy_cast


def to_float32(a: np.ndarray, dt: DType) -> np.ndarray:
    """A float32 copy of ``a`` holding values of type ``dt`` (BF16 bits are widened)."""
    out = np.empty(a.shape, np.float32)
    converter(dt, DType.FP32)(np.ascontiguousarray(a), out)
    return out
