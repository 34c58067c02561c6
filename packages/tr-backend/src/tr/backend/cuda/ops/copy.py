"""copy (y = x, one device-to-device memcpy) and accumulate (y += x, element-wise in float)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import copy as rules


@cuda_op("copy")
def copy(b: CudaBinder) -> Any:
    nbytes = rules.copy(b)
    return b.native("memcpy", ptrs={"src": b.ptr("x"), "dst": b.ptr("y")}, ints={"nbytes": nbytes})


@cuda_op("accumulate")
def accumulate(b: CudaBinder) -> Any:
    return b.native("accumulate", ["x", "y"], ints={"n": rules.accumulate(b)})
