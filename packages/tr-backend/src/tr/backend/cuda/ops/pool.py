"""Pooling: max (INT8 argmax mask, first max wins), average (padding excluded from the count), global
average; gather kernels with no atomics (csrc/ops/pool.cu)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import pool as rules


@cuda_op("maxpool_fwd")
def maxpool_fwd(b: CudaBinder) -> Any:
    return b.native("maxpool_fwd", ["x", "y", "mask"], ints=rules.maxpool_fwd(b).as_ints())


@cuda_op("maxpool_inf")
def maxpool_inf(b: CudaBinder) -> Any:
    return b.native("maxpool_inf", ["x", "y"], ints=rules.window(b, "x", "y").as_ints())


@cuda_op("maxpool_bwd")
def maxpool_bwd(b: CudaBinder) -> Any:
    return b.native("maxpool_bwd", ["dy", "mask", "dx"], ints=rules.maxpool_bwd(b).as_ints())


@cuda_op("avgpool_fwd")
def avgpool_fwd(b: CudaBinder) -> Any:
    return b.native("avgpool_fwd", ["x", "y"], ints=rules.window(b, "x", "y").as_ints())


@cuda_op("avgpool_bwd")
def avgpool_bwd(b: CudaBinder) -> Any:
    return b.native("avgpool_bwd", ["dy", "dx"], ints=rules.window(b, "dx", "dy").as_ints())


def _gap(b: CudaBinder, x: str, y: str) -> dict[str, int]:
    n, hw, c = rules.gap(b, x, y)
    return {"n": n, "hw": hw, "c": c}


@cuda_op("gap_fwd")
def gap_fwd(b: CudaBinder) -> Any:
    return b.native("gap_fwd", ["x", "y"], ints=_gap(b, "x", "y"))


@cuda_op("gap_bwd")
def gap_bwd(b: CudaBinder) -> Any:
    return b.native("gap_bwd", ["dy", "dx"], ints=_gap(b, "dx", "dy"))
