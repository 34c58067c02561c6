"""flatten_fwd/bwd ([N,H,W,C] <-> [N,1,1,H*W*C]: a memcpy of equal bytes in the compact layout) and
channel_pad_fwd/bwd (a strided row copy that zeroes the padded channels)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.copy import MEMCPY, ROW_COPY
from tr.backend.rules import flatten as rules


def _flat_copy(b: CudaBinder, src: str, dst: str) -> Any:
    nbytes = rules.flat_copy(b, src, dst)
    return b.make(MEMCPY, src=b.ptr(src), dst=b.ptr(dst), nbytes=nbytes)


@cuda_op("flatten_fwd")
def flatten_fwd(b: CudaBinder) -> Any:
    return _flat_copy(b, "x", "y")


@cuda_op("flatten_bwd")
def flatten_bwd(b: CudaBinder) -> Any:
    return _flat_copy(b, "dy", "dx")


def _row_copy(b: CudaBinder, src: str, dst: str, rows: int, src_cols: int, dst_cols: int, cols: int) -> Any:
    return b.make(ROW_COPY, src=b.ptr(src), dst=b.ptr(dst), rows=rows, src_cols=src_cols, dst_cols=dst_cols,
                  cols=cols, esize=b.dtype(src).itemsize)


@cuda_op("channel_pad_fwd")
def channel_pad_fwd(b: CudaBinder) -> Any:
    rows, c, cp = rules.narrow_wide(b, "x", "y")
    return _row_copy(b, "x", "y", rows, c, cp, c)


@cuda_op("channel_pad_bwd")
def channel_pad_bwd(b: CudaBinder) -> Any:
    rows, c, cp = rules.narrow_wide(b, "dx", "dy")
    return _row_copy(b, "dy", "dx", rows, cp, c, c)
