"""Native op of csrc/ops/clip.cu: gradient clipping by the global norm (a fixed-order float64 norm)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, ptr, tensor

CLIP_GRAD_NORM = native_op(
    "clip_grad_norm", "norm = ||g|| / scale (float64 partial sums per block, summed in a fixed order by one block); "
    "divisor = scale / min(max_norm / (norm + 1e-6), 1), or scale when flag is set.",
    ptr("g", "device address of the FP32 gradients' span"), i64("n", "elements of the span"),
    tensor("scale", "FP32 [1]: the loss scale the gradients carry"), tensor("flag", "INT32 [1]: the skip flag"),
    tensor("divisor", "FP32 [1]: what the optimizer divides the gradients by"),
    tensor("norm", "FP32 [1]: the unscaled global norm"), f64("max_norm", "the largest norm kept (> 0)"))

CLIP_AGC = native_op(
    "clip_agc", "Adaptive clipping of one tensor's gradient, unit by unit (one block a unit: float64 sums in a fixed "
    "tree): g *= clip * max(||w||, eps) / max(||g|| / scale, 1e-6) unless the ratio keeps it.",
    tensor("w", "FP32 [units * per]: the weights"), tensor("g", "FP32 [units * per]: the gradients, scaled"),
    tensor("scale", "FP32 [1]: the loss scale the gradients carry"), tensor("flag", "INT32 [1]: the skip flag"),
    i64("units", "units (rows) of the tensor"), i64("per", "elements a unit"),
    f64("clip", "the clipping factor (> 0)"), f64("eps", "the floor of a unit's weight norm"))

OPS = (CLIP_GRAD_NORM, CLIP_AGC)
