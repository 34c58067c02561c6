"""Pooling: max (INT8 argmax mask, first max wins), average (padding excluded from the count), global
average; gather kernels with no atomics (csrc/ops/pool.cu)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.ops._window import window
from tr.core.dtype import DType
from tr.core.errors import ShapeError


def _same_c(b: CudaBinder, a: str, c: str) -> None:
    if b.tensor(a).shape.c != b.tensor(c).shape.c:
        b.fail(f"{c} {b.tensor(c).shape} must have the channels of {a} {b.tensor(a).shape}", ShapeError)


def _mask(b: CudaBinder, shape_of: str) -> None:
    b.expect_dtype("mask", DType.INT8)
    if b.tensor("mask").shape != b.tensor(shape_of).shape:
        b.fail(f"mask {b.tensor('mask').shape} must have {shape_of}'s shape {b.tensor(shape_of).shape}", ShapeError)


@cuda_op("maxpool_fwd")
def maxpool_fwd(b: CudaBinder) -> Any:
    g = window(b, "x", "y")
    _same_c(b, "x", "y")
    if g["kh"] * g["kw"] > 127:
        b.fail(f"a {g['kh']}x{g['kw']} window has {g['kh'] * g['kw']} positions; the INT8 mask holds at most 127")
    _mask(b, "y")
    b.expect_float("x", "y")
    return b.native("maxpool_fwd", ["x", "y", "mask"], ints=g)


@cuda_op("maxpool_inf")
def maxpool_inf(b: CudaBinder) -> Any:
    g = window(b, "x", "y")
    _same_c(b, "x", "y")
    b.expect_float("x", "y")
    return b.native("maxpool_inf", ["x", "y"], ints=g)


@cuda_op("maxpool_bwd")
def maxpool_bwd(b: CudaBinder) -> Any:
    g = window(b, "dx", "dy")
    _same_c(b, "dx", "dy")
    _mask(b, "dy")
    b.expect_float("dy", "dx")
    return b.native("maxpool_bwd", ["dy", "mask", "dx"], ints=g)


@cuda_op("avgpool_fwd")
def avgpool_fwd(b: CudaBinder) -> Any:
    g = window(b, "x", "y")
    _same_c(b, "x", "y")
    b.expect_float("x", "y")
    return b.native("avgpool_fwd", ["x", "y"], ints=g)


@cuda_op("avgpool_bwd")
def avgpool_bwd(b: CudaBinder) -> Any:
    g = window(b, "dx", "dy")
    _same_c(b, "dx", "dy")
    b.expect_float("dy", "dx")
    return b.native("avgpool_bwd", ["dy", "dx"], ints=g)


def _gap_dims(b: CudaBinder, x: str, y: str) -> dict[str, int]:
    n, h, w, c = b.tensor(x).shape.dims
    if b.tensor(y).shape.dims != (n, 1, 1, c):
        b.fail(f"{y} {b.tensor(y).shape} must be [{n},1,1,{c}] for {x} {b.tensor(x).shape}", ShapeError)
    b.expect_float(x, y)
    return {"n": n, "hw": h * w, "c": c}


@cuda_op("gap_fwd")
def gap_fwd(b: CudaBinder) -> Any:
    return b.native("gap_fwd", ["x", "y"], ints=_gap_dims(b, "x", "y"))


@cuda_op("gap_bwd")
def gap_bwd(b: CudaBinder) -> Any:
    return b.native("gap_bwd", ["dy", "dx"], ints=_gap_dims(b, "dx", "dy"))
