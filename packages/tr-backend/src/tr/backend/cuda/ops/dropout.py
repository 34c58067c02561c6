"""Dropout with the counter-based Philox mask shared with the CPU backend (csrc/ops/dropout.cu): the seed
(INT32[2] holding one uint64) is advanced by splitmix64 on the device before every forward."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.dtype import DType
from tr.core.errors import ShapeError


def _p(b: CudaBinder) -> float:
    p = b.float_attr("p", lo=0.0)
    if p >= 1.0:
        b.fail(f"dropout probability p must be in [0, 1), got {p}")
    return p


@cuda_op("dropout_fwd")
def dropout_fwd(b: CudaBinder) -> Any:
    p = _p(b)
    n = b.tensor("x").numel
    b.expect_numel("y", n)
    b.expect_dtype("mask", DType.INT8)
    b.expect_numel("mask", n)
    b.expect_dtype("seed", DType.INT32)
    b.expect_numel("seed", 2)
    b.expect_float("x", "y")
    return b.native("dropout_fwd", ["x", "y", "mask", "seed"], ints={"n": n}, floats={"p": p})


@cuda_op("dropout_bwd")
def dropout_bwd(b: CudaBinder) -> Any:
    p = _p(b)
    n = b.tensor("dy").numel
    if b.tensor("dx").numel != n:
        b.fail(f"dx {b.tensor('dx').shape} must match dy {b.tensor('dy').shape}", ShapeError)
    b.expect_dtype("mask", DType.INT8)
    b.expect_numel("mask", n)
    b.expect_float("dy", "dx")
    return b.native("dropout_bwd", ["dy", "mask", "dx"], ints={"n": n}, floats={"p": p})
