"""Native ops of csrc/ops/attention.cu: multi-head scaled dot-product self-attention over tokens
(tr.backend.rules.attention). qkv, y, dy and dqkv share one float dtype (FP32, FP16 or BF16); stats is FP32."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

_SIZES = (i64("n", "samples"), i64("t", "tokens"), i64("d", "y's channels (heads * dh)"),
          i64("heads", "heads (dividing d)"), f64("scale", "the scores' factor (finite, > 0)"))
# dropout on the probabilities: element (n, h, i, j) kept iff Philox uniform(key, ((n*heads + h)*t + i)*t + j) >= p
_DROPOUT = f64("dropout", "the probabilities' drop probability p in [0, 1); 0: none (no seed, no key)")

ATTENTION_FWD = native_op(
    "attention_fwd", "y = softmax(scale * q k^T) v per sample and head, in float32; stats = the rows' "
    "log-sum-exp when given (training); with dropout > 0, seed <- splitmix64(seed), key <- seed, and y = (keep * P "
    "/ (1 - p)) v.",
    tensor("qkv", "[n, t, 3d]: [q | k | v] per token"), tensor("y", "[n, t, d]"),
    tensor("stats", "FP32 [n, heads, t]: written when given", optional=True),
    tensor("seed", "INT32 [2]: the dropout stream (one uint64), advanced when dropout > 0", optional=True),
    tensor("key", "INT32 [2]: the draw's key, written when dropout > 0 for the backward", optional=True),
    *_SIZES, _DROPOUT)

ATTENTION_BWD = native_op(
    "attention_bwd", "dqkv = [dQ | dK | dV] of attention_fwd, in float32 from qkv, y, dy and the saved stats (and "
    "with dropout > 0 the keep bits redrawn from the forward's key).",
    tensor("qkv", "[n, t, 3d]"), tensor("y", "[n, t, d]: the forward's"), tensor("dy", "[n, t, d]"),
    tensor("stats", "FP32 [n, heads, t]: the forward's"), tensor("dqkv", "[n, t, 3d]"),
    tensor("key", "INT32 [2]: the forward's draw key, read when dropout > 0", optional=True), *_SIZES, _DROPOUT)

OPS = (ATTENTION_FWD, ATTENTION_BWD)
