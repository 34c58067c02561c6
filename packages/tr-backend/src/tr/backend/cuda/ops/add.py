"""Residual join: y = a + b, optionally followed by relu; y may share the bytes of a or b."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import add as rules


@cuda_op("add_fwd")
def add_fwd(b: CudaBinder) -> Any:
    n, relu = rules.add_fwd(b)
    return b.native("add_fwd", ["a", "b", "y"], ints={"n": n, "relu": relu})
