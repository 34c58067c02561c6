"""Native ops of csrc/ops/scale.cu: channel scaling y = x * s, s [N,1,1,C] broadcast over H*W."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import i64, native_op, tensor

_SIZES = (i64("n", "samples"), i64("hw", "positions per sample (H*W)"), i64("c", "channels"))

SCALE_FWD = native_op(
    "scale_fwd", "y = x * s (each FP32, FP16 or BF16).",
    tensor("x", "[n, hw, c]"), tensor("s", "[n, c]"), tensor("y", "[n, hw, c]"), *_SIZES)

SCALE_BWD = native_op(
    "scale_bwd", "ds = the sum over hw of dy * x; dx = dy * s when dx is given.",
    tensor("x", "[n, hw, c]"), tensor("s", "[n, c]"), tensor("dy", "[n, hw, c]"), tensor("ds", "[n, c]"),
    tensor("dx", "[n, hw, c]; absent: only ds is written", optional=True), *_SIZES)

OPS = (SCALE_FWD, SCALE_BWD)
