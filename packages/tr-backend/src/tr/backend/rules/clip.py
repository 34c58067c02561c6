"""The rules of gradient clipping: by the global norm (clip_grad_norm: an FP32 span of gradients scaled by the loss
scale, FP32 scalars scale, divisor and norm, the INT32 skip flag, max_norm > 0) and adaptive (clip_agc: one FP32
weight and its gradient, per unit or whole)."""

from __future__ import annotations

import math

import numpy as np

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


AGC_GRAD_FLOOR = 1e-6  # timm's adaptive_clip_grad: grad_norm.clamp(min=1e-6)


def clip_agc(b: CallBinder) -> tuple[int, int, float, float]:
    """(units, elements a unit, clip, eps): the rows of w's first dimension when per_unit, else one."""
    clip, eps = b.float_attr("clip", lo=0.0), b.float_attr("eps", 1e-3, lo=0.0)
    if not (clip > 0.0 and math.isfinite(clip)):
        b.fail(f"attribute 'clip' = {clip!r} must be a finite number > 0")
    if not math.isfinite(eps):
        b.fail(f"attribute 'eps' = {eps!r} must be a finite number >= 0")
    for name in ("w", "g", "scale"):
        b.expect_dtype(name, DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    b.expect_numel("scale", 1)
    b.expect_numel("flag", 1)
    w = b.tensor("w")
    b.expect_numel("g", w.numel)
    units = w.shape.dims[0] if b.attr("per_unit", False) else 1
    return units, w.numel // units, clip, eps


def agc_factor(w_sq: np.ndarray, g_sq: np.ndarray, scale: float, clip: float, eps: float) -> np.ndarray:
    """The factor each unit's gradient is multiplied by (1.0: kept), in float64, from the float64 sums of squares
    of its weights and of its scaled gradients (one a unit)."""
    gn = np.sqrt(g_sq) / scale
    wn = clip * np.maximum(np.sqrt(w_sq), eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gn < wn, 1.0, wn / np.maximum(gn, AGC_GRAD_FLOOR))

