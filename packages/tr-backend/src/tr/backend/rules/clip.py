"""The rule of gradient clipping by the global norm (clip_grad_norm): an FP32 span of gradients (scaled by the
loss scale), FP32 scalars scale, divisor and norm, the INT32 skip flag, max_norm > 0."""

from __future__ import annotations

import math

from tr.backend.binding import CallBinder
from tr.core.dtype import DType

EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s: coef = max_norm / (norm + 1e-6)


def clip_grad_norm(b: CallBinder) -> tuple[int, float]:
    """(FP32 elements of g, max_norm)."""
    max_norm = b.float_attr("max_norm", lo=0.0)
    if not (max_norm > 0.0 and math.isfinite(max_norm)):
        b.fail(f"attribute 'max_norm' = {max_norm!r} must be a finite number > 0")
    n = b.span_size("g", 4)
    for name in ("scale", "divisor", "norm"):
        b.expect_dtype(name, DType.FP32)
        b.expect_numel(name, 1)
    b.expect_dtype("flag", DType.INT32)
    b.expect_numel("flag", 1)
    return n, max_norm


def divisor(sum_squares: float, scale: float, max_norm: float) -> tuple[float, float]:
    """(norm, divisor) in float64 from the float64 sum of the scaled gradients' squares: both backends round these
    to FP32."""
    norm = math.sqrt(sum_squares) / scale
    coef = max_norm / (norm + EPS)
    return norm, (scale / coef if coef < 1.0 else scale)
