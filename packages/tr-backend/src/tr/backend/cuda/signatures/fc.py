"""Native ops of csrc/ops/fc.cu: the fully connected layer as cuBLASLt GEMMs with fused epilogues where
cuBLASLt offers them (else kernels of fc.cu do their part); x, w and dy of one dtype, each tensor FP32, FP16
or BF16 (the relu mask INT8: tr.backend.rules.fc)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import flag, i64, native_op, tensor

_SIZES = (i64("n", "rows (samples)"), i64("k", "inputs per row"), i64("o", "outputs per row"))
_MODE = (flag("tf32", "FP32 GEMMs may compute in TF32"),
         flag("epilogues", "fuse cuBLASLt epilogues where offered (TR_CUBLASLT_EPILOGUES=0: fc.cu's kernels)"))
_MASK = "INT8 [n, ld / 8], bit f of row r at bit r * ld + f (tr.backend.rules.fc; ld: {} rounded up to 128)"

FC_FWD = native_op(
    "fc_fwd", "y = x w^T, plus b when given, then relu when asked (writing its mask when mask is given).",
    tensor("x", "[n, k]"), tensor("w", "[o, k], of x's dtype"), tensor("b", "[o]; absent: no bias", optional=True),
    tensor("y", "[n, o]"),
    tensor("mask", "the relu's mask, written (set: pre-activation > 0); only with relu; " + _MASK.format("o"),
           optional=True),
    *_SIZES, flag("relu", "apply relu to the output"), *_MODE)

FC_BWD = native_op(
    "fc_bwd", "dw = dy^T x; db = the column sums of dy when given; dx = dy w when given, zero where the input's "
              "relu mask (when given) is clear.",
    tensor("x", "[n, k]"), tensor("w", "[o, k], of x's dtype"), tensor("dy", "[n, o], of x's dtype"),
    tensor("dw", "[o, k]"), tensor("db", "[o]; absent: no bias gradient", optional=True),
    tensor("dx", "[n, k]; absent: no input gradient", optional=True),
    tensor("mask", "the input's relu mask (its forward's); needs dx; " + _MASK.format("k"), optional=True),
    *_SIZES, *_MODE)

OPS = (FC_FWD, FC_BWD)
