"""Element-wise activations (tr.core.ops.ACTIVATIONS): forward with the optional INT8 mask [x > 0],
backward recomputed from x (or read from relu's mask), inference. Formulas: csrc/ops/activation.cu."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.dtype import DType
from tr.core.ops import ACTIVATIONS


def _kind(b: CudaBinder) -> int:
    kind = b.attr("kind")
    if kind not in ACTIVATIONS:
        b.fail(f"activation kind {kind!r} is not one of {list(ACTIVATIONS)}")
    return ACTIVATIONS.index(kind)


def _forward(b: CudaBinder, with_mask: bool) -> Any:
    kind = _kind(b)
    n = b.same_numel("x", "y", "mask")
    b.expect_float("x", "y")
    names = ["x", "y"]
    if with_mask and b.has("mask"):
        b.expect_dtype("mask", DType.INT8)
        names.append("mask")
    return b.native("act_fwd" if with_mask else "act_inf", names, ints={"n": n, "kind": kind})


@cuda_op("act_fwd")
def act_fwd(b: CudaBinder) -> Any:
    return _forward(b, True)


@cuda_op("act_inf")
def act_inf(b: CudaBinder) -> Any:
    return _forward(b, False)


@cuda_op("act_bwd")
def act_bwd(b: CudaBinder) -> Any:
    kind = _kind(b)
    n = b.same_numel("x", "dy", "dx", "mask")
    b.expect_float("x", "dy", "dx")
    if b.dtype("dx") is not b.dtype("dy"):
        b.fail(f"dx is {b.dtype('dx').name} but dy is {b.dtype('dy').name}; expected one dtype")
    names = ["x", "dy", "dx"]
    if ACTIVATIONS[kind] == "relu" and b.has("mask"):
        b.expect_dtype("mask", DType.INT8)
        names.append("mask")
    return b.native("act_bwd", names, ints={"n": n, "kind": kind})
