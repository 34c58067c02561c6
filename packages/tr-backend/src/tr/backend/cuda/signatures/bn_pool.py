"""Native ops of csrc/ops/bn_pool.cu: batch norm + relu + max pooling as one op pair (bn_fwd's statistics,
maxpool_fwd's INT8 argmax mask), the full-resolution activation never stored. Features share x's dtype (FP32,
FP16 or BF16); every per-channel tensor is FP32 [c]."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor
from tr.backend.cuda.signatures.pool import WINDOW

_M = i64("m", "rows of x: n * h * w")
_X = "[n, h, w, c]"
_POOLED = "[n, p, q, c]"
_MASK = "INT8 [n, p, q, c]: the window position of each maximum (the first one)"
_VEC = "FP32 [c]"

BN_MAXPOOL_FWD = native_op(
    "bn_maxpool_fwd", "y = maxpool(relu(bn(x))) from the batch statistics, the relu output rounded to x's dtype "
    "before the window's max; running statistics updated, the saved ones written for the backward.",
    tensor("x", _X), tensor("y", _POOLED), tensor("mask", _MASK), tensor("gamma", _VEC), tensor("beta", _VEC),
    tensor("mean_in", _VEC + ": running mean"), tensor("var_in", _VEC + ": running variance"),
    tensor("mean_out", _VEC + ": updated running mean"), tensor("var_out", _VEC + ": updated running variance"),
    tensor("saved_mean", _VEC + ": batch mean"),
    tensor("saved_inv_std", _VEC + ": 1 / sqrt(biased batch variance + eps)"),
    _M, *WINDOW, f64("momentum", "running statistics' weight of the batch, in [0, 1]"),
    f64("eps", "variance term (>= 0)"))

BN_MAXPOOL_BWD = native_op(
    "bn_maxpool_bwd", "dy routed to the argmax as maxpool_bwd does, masked by the relu recomputed from x, then "
    "bn_bwd's reduction: dbeta, dgamma and dx.",
    tensor("x", _X), tensor("dy", _POOLED), tensor("mask", _MASK + ", the forward's"),
    tensor("dx", _X + "; may be x"), tensor("gamma", _VEC), tensor("beta", _VEC),
    tensor("saved_mean", _VEC + ": the forward's"), tensor("saved_inv_std", _VEC + ": the forward's"),
    tensor("dgamma", _VEC), tensor("dbeta", _VEC), _M, *WINDOW)

OPS = (BN_MAXPOOL_FWD, BN_MAXPOOL_BWD)
