"""Residual join: y = a + b, optionally followed by relu; y may share the bytes of a or b."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.copy import ADD_FWD
from tr.backend.rules import add as rules


@cuda_op("add_fwd")
def add_fwd(b: CudaBinder) -> Any:
    n, relu = rules.add_fwd(b)
    return b.make(ADD_FWD, a=b.dev("a"), b=b.dev("b"), y=b.dev("y"), n=n, relu=bool(relu))
