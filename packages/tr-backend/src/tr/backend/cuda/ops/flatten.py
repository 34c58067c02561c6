"""flatten_fwd/bwd ([N,H,W,C] <-> [N,1,1,H*W*C]: a memcpy of equal bytes in the compact layout) and
channel_pad_fwd/bwd (a strided row copy that zeroes the padded channels)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.errors import DTypeError, ShapeError


def _same_dtype(b: CudaBinder, a: str, c: str) -> None:
    if b.dtype(a) is not b.dtype(c):
        b.fail(f"{a} is {b.dtype(a).name} but {c} is {b.dtype(c).name}; expected one dtype", DTypeError)


def _flat_copy(b: CudaBinder, src: str, dst: str) -> Any:
    s, d = b.tensor(src), b.tensor(dst)
    _same_dtype(b, src, dst)
    flat, full = (d, s) if src == "x" else (s, d)
    if s.numel != d.numel or flat.shape.n != full.shape.n or (flat.shape.h, flat.shape.w) != (1, 1):
        b.fail(f"{src} {s.shape} and {dst} {d.shape} are not [N,H,W,C] and [N,1,1,H*W*C]", ShapeError)
    return b.native("memcpy", ptrs={"src": b.ptr(src), "dst": b.ptr(dst)}, ints={"nbytes": s.nbytes})


@cuda_op("flatten_fwd")
def flatten_fwd(b: CudaBinder) -> Any:
    return _flat_copy(b, "x", "y")


@cuda_op("flatten_bwd")
def flatten_bwd(b: CudaBinder) -> Any:
    return _flat_copy(b, "dy", "dx")


def _narrow_wide(b: CudaBinder, narrow: str, wide: str) -> tuple[int, int, int]:
    n, w = b.tensor(narrow), b.tensor(wide)
    _same_dtype(b, narrow, wide)
    if n.shape.dims[:3] != w.shape.dims[:3] or w.shape.c < n.shape.c:
        b.fail(f"{wide} {w.shape} must equal {narrow} {n.shape} except for C >= {n.shape.c}", ShapeError)
    return n.numel // n.shape.c, n.shape.c, w.shape.c


def _row_copy(b: CudaBinder, src: str, dst: str, rows: int, src_cols: int, dst_cols: int, cols: int) -> Any:
    return b.native("row_copy", ptrs={"src": b.ptr(src), "dst": b.ptr(dst)},
                    ints={"rows": rows, "src_cols": src_cols, "dst_cols": dst_cols, "cols": cols,
                          "esize": b.dtype(src).itemsize})


@cuda_op("channel_pad_fwd")
def channel_pad_fwd(b: CudaBinder) -> Any:
    rows, c, cp = _narrow_wide(b, "x", "y")
    return _row_copy(b, "x", "y", rows, c, cp, c)


@cuda_op("channel_pad_bwd")
def channel_pad_bwd(b: CudaBinder) -> Any:
    rows, c, cp = _narrow_wide(b, "dx", "dy")
    return _row_copy(b, "dy", "dx", rows, cp, c, c)
