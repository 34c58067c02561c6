"""copy (y = x, one device-to-device memcpy) and accumulate (y += x, element-wise in float)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.copy import ACCUMULATE, MEMCPY
from tr.backend.rules import copy as rules


@cuda_op("copy")
def copy(b: CudaBinder) -> Any:
    nbytes = rules.copy(b)
    return b.make(MEMCPY, src=b.ptr("x"), dst=b.ptr("y"), nbytes=nbytes)


@cuda_op("accumulate")
def accumulate(b: CudaBinder) -> Any:
    return b.make(ACCUMULATE, x=b.dev("x"), y=b.dev("y"), n=rules.accumulate(b))
