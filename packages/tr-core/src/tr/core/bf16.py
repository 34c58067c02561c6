"""bfloat16 without a numpy type: its values kept as uint16 bit patterns (DType.BF16.np_dtype).

One definition of the rounding that every part of tr shares (the CPU backend's casts, tr-data's staging, the
feeders, predict) and that CUDA's ``__float2bfloat16_rn`` applies: round to nearest, ties to even, on the float32
bits; overflow rounds to infinity; every NaN becomes the quiet NaN 0x7FC0. Widening is exact (a 16-bit shift).
"""

from __future__ import annotations

import numpy as np

QUIET_NAN = np.uint16(0x7FC0)
MAX = float(np.array([0x7F7F0000], np.uint32).view(np.float32)[0])  # the largest finite bfloat16, 3.3895314e38


def bf16_bits(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``values`` (any float array) rounded to bfloat16, as uint16 bit patterns (written into ``out`` if given)."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    bits >>= np.uint32(16)
    if out is None:
        out = np.empty(f.shape, np.uint16)
    np.copyto(out, bits.reshape(f.shape), casting="unsafe")
    nan = np.isnan(f)
    if nan.any():
        np.copyto(out, QUIET_NAN, where=nan)
    return out


def bf16_values(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns ``bits`` (uint16), exactly (written into ``out`` if given:
    float32, C-contiguous)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bfloat16 bit patterns are uint16, got {bits.dtype}")
    if out is None:
        out = np.empty(bits.shape, np.float32)
    wide = out.view(np.uint32)
    np.copyto(wide, bits, casting="unsafe")
    np.left_shift(wide, 16, out=wide)
    return out


def round_bf16(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to bfloat16, as float32 (what a BF16 tensor holding them reads back as)."""
    return bf16_values(bf16_bits(values))
