"""Native ops of csrc/ops/tokens.cu: a Vision Transformer's token sequence (tr.backend.rules.tokens)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import flag, i64, native_op, tensor

_SIZES = (i64("n", "samples"), i64("p", "patch tokens (the input's H*W)"), i64("t", "tokens (p, + 1 with cls)"),
          i64("c", "channels"))

TOKENS_FWD = native_op(
    "tokens_fwd", "y[n, 0] = cls + pos[0] (with a class token), y[n, c0 + p] = x[n, p] + pos[c0 + p], in float32.",
    tensor("x", "[n, p, c]"), tensor("cls", "FP32 [c]", optional=True), tensor("pos", "FP32 [t, c]", optional=True),
    tensor("y", "[n, t, c]"), *_SIZES)

TOKENS_BWD = native_op(
    "tokens_bwd", "dx[n, p] = dy[n, c0 + p]; dcls, dpos = the batch's sums of dy, float32 in sample order.",
    tensor("dy", "[n, t, c]"), tensor("dx", "[n, p, c]; absent: nothing before the tokens is trained", optional=True),
    tensor("dcls", "FP32 [c]", optional=True),
    tensor("dpos", "FP32 [t, c]", optional=True), *_SIZES)

TOKEN_PICK = native_op(
    "token_pick", "forward: y[n] = x[n, 0]; backward: dx[n, 0] = dy[n], dx = 0 at the other tokens.",
    tensor("src", "forward x [n, t, c]; backward dy [n, c]"), tensor("dst", "forward y [n, c]; backward dx [n, t, c]"),
    i64("n", "samples"), i64("t", "tokens"), i64("c", "channels"), flag("backward", "the gradient's direction"))

OPS = (TOKENS_FWD, TOKENS_BWD, TOKEN_PICK)
