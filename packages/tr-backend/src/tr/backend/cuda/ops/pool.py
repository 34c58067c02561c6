"""Pooling: max (INT8 argmax mask, first max wins), average (padding excluded from the count), global
average; gather kernels with no atomics (csrc/ops/pool.cu)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.pool import (
    AVGPOOL_BWD,
    AVGPOOL_FWD,
    GAP_BWD,
    GAP_FWD,
    MAXPOOL_BWD,
    MAXPOOL_FWD,
    MAXPOOL_INF,
)
from tr.backend.rules import pool as rules


@cuda_op("maxpool_fwd")
def maxpool_fwd(b: CudaBinder) -> Any:
    g = rules.maxpool_fwd(b)
    return b.make(MAXPOOL_FWD, x=b.dev("x"), y=b.dev("y"), mask=b.dev("mask"), **g.as_ints())


@cuda_op("maxpool_inf")
def maxpool_inf(b: CudaBinder) -> Any:
    g = rules.window(b, "x", "y")
    return b.make(MAXPOOL_INF, x=b.dev("x"), y=b.dev("y"), **g.as_ints())


@cuda_op("maxpool_bwd")
def maxpool_bwd(b: CudaBinder) -> Any:
    g = rules.maxpool_bwd(b)
    return b.make(MAXPOOL_BWD, dy=b.dev("dy"), mask=b.dev("mask"), dx=b.dev("dx"), **g.as_ints())


@cuda_op("avgpool_fwd")
def avgpool_fwd(b: CudaBinder) -> Any:
    g = rules.window(b, "x", "y")
    return b.make(AVGPOOL_FWD, x=b.dev("x"), y=b.dev("y"), **g.as_ints())


@cuda_op("avgpool_bwd")
def avgpool_bwd(b: CudaBinder) -> Any:
    g = rules.window(b, "dx", "dy")
    return b.make(AVGPOOL_BWD, dy=b.dev("dy"), dx=b.dev("dx"), **g.as_ints())


@cuda_op("gap_fwd")
def gap_fwd(b: CudaBinder) -> Any:
    n, hw, c = rules.gap(b, "x", "y")
    return b.make(GAP_FWD, x=b.dev("x"), y=b.dev("y"), n=n, hw=hw, c=c)


@cuda_op("gap_bwd")
def gap_bwd(b: CudaBinder) -> Any:
    n, hw, c = rules.gap(b, "dx", "dy")
    return b.make(GAP_BWD, dy=b.dev("dy"), dx=b.dev("dx"), n=n, hw=hw, c=c)
