"""Native ops of csrc/ops/activation.cu: element-wise activations (tr.core.ops.ACTIVATIONS), each tensor FP32,
FP16 or BF16 (the mask INT8)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import code, i64, native_op, tensor

_N = i64("n", "elements")
_KIND = code("kind", "act", "the activation (tr.core.ops.ACTIVATION_CODES)")

ACT_FWD = native_op(
    "act_fwd", "y = act(x); mask = [x > 0] when mask is given (relu's backward reads it).",
    tensor("x", "[n]"), tensor("y", "[n]"), tensor("mask", "INT8 [n]; absent: no mask is written", optional=True),
    _N, _KIND)

ACT_BWD = native_op(
    "act_bwd", "dx = dy * act'(x), or dy * mask when mask is given (relu).",
    tensor("x", "[n]"), tensor("dy", "[n]"), tensor("dx", "[n], of dy's dtype"),
    tensor("mask", "INT8 [n], the forward's [x > 0]; absent: the derivative comes from x", optional=True),
    _N, _KIND)

ACT_INF = native_op(
    "act_inf", "y = act(x), writing no mask.",
    tensor("x", "[n]"), tensor("y", "[n]"), _N, _KIND)

OPS = (ACT_FWD, ACT_BWD, ACT_INF)
