"""copy (y = x, one device-to-device memcpy) and accumulate (y += x, element-wise in float)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.errors import DTypeError, ShapeError


@cuda_op("copy")
def copy(b: CudaBinder) -> Any:
    x, y = b.tensor("x"), b.tensor("y")
    if x.numel != y.numel:
        b.fail(f"x {x.shape} and y {y.shape} differ in numel", ShapeError)
    if x.dtype is not y.dtype:
        b.fail(f"x is {x.dtype.name} but y is {y.dtype.name}; copy does not cast", DTypeError)
    return b.native("memcpy", ptrs={"src": b.ptr("x"), "dst": b.ptr("y")}, ints={"nbytes": x.nbytes})


@cuda_op("accumulate")
def accumulate(b: CudaBinder) -> Any:
    x, y = b.tensor("x"), b.tensor("y")
    if x.numel != y.numel:
        b.fail(f"x {x.shape} and y {y.shape} differ in numel", ShapeError)
    b.expect_float("x", "y")
    return b.native("accumulate", ["x", "y"], ints={"n": x.numel})
