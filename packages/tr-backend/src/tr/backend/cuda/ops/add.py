"""Residual join: y = a + b, optionally followed by relu; y may share the bytes of a or b."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.errors import ShapeError


@cuda_op("add_fwd")
def add_fwd(b: CudaBinder) -> Any:
    shape = b.tensor("a").shape
    for name in ("b", "y"):
        if b.tensor(name).shape != shape:
            b.fail(f"{name} {b.tensor(name).shape} must have a's shape {shape}", ShapeError)
    act = b.attr("activation", None)
    if act not in (None, "relu"):
        b.fail(f"activation must be None or 'relu', got {act!r}")
    b.expect_float("a", "b", "y")
    return b.native("add_fwd", ["a", "b", "y"], ints={"n": shape.numel(), "relu": act == "relu"})
