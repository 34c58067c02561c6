"""Fully connected layer through cuBLASLt: x [N,H,W,C] read as [N, K=H*W*C], w [O,1,1,K], b [O], y [N,1,1,O].

fc_fwd is one cuBLASLt matmul with the bias (and ReLU) epilogue; fc_bwd one matmul for dw with the BGRADB
epilogue for db, and one for dx. Where cuBLASLt offers no fused algorithm, the native op adds a bias/ReLU or
column-sum kernel (csrc/ops/fc.cu). FP32 computes in FP32, or TF32 with ``CudaBackend(use_tf32=True)``;
FP16/BF16 inputs accumulate in FP32 (AMP: FP16 x, w and bias, so the epilogue fuses; FP16 or FP32 y; dw FP32,
so BGRADB writes the FP32 bias gradient).
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.errors import DTypeError, ShapeError


def _dims(b: CudaBinder) -> tuple[int, int, int]:
    xt, wt = b.tensor("x"), b.tensor("w")
    n, k = xt.shape.n, xt.shape.per_sample()
    o = wt.shape.n
    if wt.shape.per_sample() != k:
        b.fail(f"w {wt.shape} holds {wt.shape.per_sample()} inputs per output but x {xt.shape} has {k}", ShapeError)
    if xt.dtype is not wt.dtype:
        b.fail(f"x is {xt.dtype.name} but w is {wt.dtype.name}; the GEMM needs one input dtype", DTypeError)
    return n, k, o


def _expect(b: CudaBinder, name: str, n: int, per: int) -> None:
    t = b.tensor(name)
    if t.shape.n != n or t.shape.per_sample() != per:
        b.fail(f"{name} {t.shape} must be [{n}, ..., {per} per sample]", ShapeError)


@cuda_op("fc_fwd")
def fc_fwd(b: CudaBinder) -> Any:
    n, k, o = _dims(b)
    _expect(b, "y", n, o)
    act = b.attr("activation", None)
    if act not in (None, "relu"):
        b.fail(f"activation must be None or 'relu', got {act!r}")
    b.expect_float("x", "w", "b", "y")
    if b.has("b"):
        b.expect_numel("b", o)
    return b.native("fc_fwd", ["x", "w", "b", "y"],
                    ints={"n": n, "k": k, "o": o, "relu": act == "relu", "tf32": b.backend.use_tf32})


@cuda_op("fc_bwd")
def fc_bwd(b: CudaBinder) -> Any:
    n, k, o = _dims(b)
    _expect(b, "dy", n, o)
    b.expect_numel("dw", o * k)
    b.expect_float("x", "w", "dy", "dw", "db", "dx")
    if b.dtype("dy") is not b.dtype("x"):
        b.fail(f"dy is {b.dtype('dy').name} but x is {b.dtype('x').name}; the GEMMs need one input dtype",
               DTypeError)
    if b.has("db"):
        b.expect_numel("db", o)
    if b.has("dx"):
        _expect(b, "dx", n, k)
    return b.native("fc_bwd", ["x", "w", "dy", "dw", "db", "dx"],
                    ints={"n": n, "k": k, "o": o, "tf32": b.backend.use_tf32})
