"""Native ops of csrc/ops/layernorm.cu: layer norm over the c values of each of the rows (N*H*W) of x. The
feature tensors share x's dtype (FP32, FP16 or BF16); gamma, beta and their gradients are FP32 [c], the saved
statistics FP32 [rows]."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

_SIZES = (i64("rows", "rows: N*H*W"), i64("c", "values normalised together"))
_FEAT = "[rows, c]"

LN_FWD = native_op(
    "ln_fwd", "y = (x - mean) * rstd * gamma + beta per row of x (or of x + z); the statistics saved when given.",
    tensor("x", _FEAT), tensor("gamma", "FP32 [c]"), tensor("beta", "FP32 [c]"), tensor("y", _FEAT),
    tensor("saved_mean", "FP32 [rows]: written when given, with saved_rstd", optional=True),
    tensor("saved_rstd", "FP32 [rows]: 1 / sqrt(var + eps), written when given, with saved_mean", optional=True),
    tensor("z", _FEAT + ": the residual join fused in: the row normalised is x + z, rounded to x's dtype",
           optional=True),
    tensor("sum", _FEAT + ": x + z as normalised, written when given (with z); may be x or z", optional=True),
    *_SIZES, f64("eps", "variance term (> 0)"))

LN_BWD = native_op(
    "ln_bwd", "dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy; dx (+ dx2) when given.",
    tensor("x", _FEAT), tensor("gamma", "FP32 [c]"), tensor("dy", _FEAT),
    tensor("saved_mean", "FP32 [rows]: the forward's"), tensor("saved_rstd", "FP32 [rows]: the forward's"),
    tensor("dgamma", "FP32 [c]"), tensor("dbeta", "FP32 [c]"),
    tensor("dx", _FEAT + "; absent: not written (a first layer)", optional=True),
    tensor("dx2", _FEAT + ": added to dx as it is written (dx rounded first), with dx; may be dx", optional=True),
    *_SIZES)

OPS = (LN_FWD, LN_BWD)
