"""Native ops of csrc/ops/attention.cu: multi-head scaled dot-product self-attention over tokens
(tr.backend.rules.attention). qkv, y, dy and dqkv share one float dtype (FP32, FP16 or BF16); stats is FP32."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

_SIZES = (i64("n", "samples"), i64("t", "tokens"), i64("d", "y's channels (heads * dh)"),
          i64("heads", "heads (dividing d)"), f64("scale", "the scores' factor (finite, > 0)"))

ATTENTION_FWD = native_op(
    "attention_fwd", "y = softmax(scale * q k^T) v per sample and head, in float32; stats = the rows' "
    "log-sum-exp when given (training).",
    tensor("qkv", "[n, t, 3d]: [q | k | v] per token"), tensor("y", "[n, t, d]"),
    tensor("stats", "FP32 [n, heads, t]: written when given", optional=True), *_SIZES)

ATTENTION_BWD = native_op(
    "attention_bwd", "dqkv = [dQ | dK | dV] of attention_fwd, in float32 from qkv, y, dy and the saved stats.",
    tensor("qkv", "[n, t, 3d]"), tensor("y", "[n, t, d]: the forward's"), tensor("dy", "[n, t, d]"),
    tensor("stats", "FP32 [n, heads, t]: the forward's"), tensor("dqkv", "[n, t, 3d]"), *_SIZES)

OPS = (ATTENTION_FWD, ATTENTION_BWD)
