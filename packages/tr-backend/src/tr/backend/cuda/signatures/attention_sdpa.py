"""Native ops of csrc/ops/attention_sdpa.cpp: attention_fwd and attention_bwd through cuDNN's SDPA graphs (flash
attention, FP16/BF16), falling back to csrc/ops/attention.cu's kernels where cuDNN cannot take the call (the op's
plan record says which ran and why: tr.backend.cuda.attention_engines). Fields as the attention family's."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, flag, i64, native_op, tensor

_SIZES = (i64("n", "samples"), i64("t", "tokens"), i64("d", "y's channels (heads * dh)"),
          i64("heads", "heads (dividing d)"), f64("scale", "the scores' factor (finite, > 0)"))

ATTENTION_SDPA_FWD = native_op(
    "attention_sdpa_fwd", "attention_fwd by cuDNN's SDPA forward (Q, K, V read in place from qkv); stats = the "
    "rows' natural-log log-sum-exp when given (training). attention_fwd's kernels where cuDNN cannot take it.",
    tensor("qkv", "[n, t, 3d]: [q | k | v] per token"), tensor("y", "[n, t, d]"),
    tensor("stats", "FP32 [n, heads, t]: written when given", optional=True), *_SIZES)

ATTENTION_SDPA_BWD = native_op(
    "attention_sdpa_bwd", "attention_bwd by cuDNN's SDPA backward (dQ, dK, dV written in place into dqkv); "
    "attention_bwd's kernels where cuDNN cannot take it.",
    tensor("qkv", "[n, t, 3d]"), tensor("y", "[n, t, d]: the forward's"), tensor("dy", "[n, t, d]"),
    tensor("stats", "FP32 [n, heads, t]: the forward's"), tensor("dqkv", "[n, t, 3d]"), *_SIZES,
    flag("deterministic", "cuDNN's deterministic backward (the default); false only as an explicit opt-in"))

OPS = (ATTENTION_SDPA_FWD, ATTENTION_SDPA_BWD)
