"""The rules of flatten_fwd/bwd ([N,H,W,C] <-> [N,1,1,H*W*C], one dtype) and channel_pad_fwd/bwd (the same
tensor with C padded with zeros, one dtype)."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.errors import DTypeError, ShapeError


def _same_dtype(b: CallBinder, a: str, c: str) -> None:
    if b.dtype(a) is not b.dtype(c):
        b.fail(f"{a} is {b.dtype(a).name} but {c} is {b.dtype(c).name}; expected one dtype", DTypeError)


def flat_copy(b: CallBinder, src: str, dst: str) -> int:
    """Bytes of a flatten (src x) or its backward (src dy)."""
    s, d = b.tensor(src), b.tensor(dst)
    _same_dtype(b, src, dst)
    flat, full = (d, s) if src == "x" else (s, d)
    if s.numel != d.numel or flat.shape.n != full.shape.n or (flat.shape.h, flat.shape.w) != (1, 1):
        b.fail(f"{src} {s.shape} and {dst} {d.shape} are not [N,H,W,C] and [N,1,1,H*W*C]", ShapeError)
    return s.nbytes


def narrow_wide(b: CallBinder, narrow: str, wide: str) -> tuple[int, int, int]:
    """(pixels, narrow C, wide C) of a channel pad (narrow x, wide y) or its backward (narrow dx, wide dy)."""
    n, w = b.tensor(narrow), b.tensor(wide)
    _same_dtype(b, narrow, wide)
    if n.shape.dims[:3] != w.shape.dims[:3] or w.shape.c < n.shape.c:
        b.fail(f"{wide} {w.shape} must equal {narrow} {n.shape} except for C >= {n.shape.c}", ShapeError)
    return n.numel // n.shape.c, n.shape.c, w.shape.c
