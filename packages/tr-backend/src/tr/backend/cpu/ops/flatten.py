"""flatten_fwd/bwd ([N,H,W,C] <-> [N,1,1,H*W*C]) and channel_pad_fwd/bwd (zero-padded channels).

On the CPU every tensor is compact NHWC, so flatten is a copy of equal bytes; channel padding copies the
first C channels and zeroes the rest.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.core.errors import DTypeError, ShapeError


def _same_dtype(b: Binder, a: str, c: str) -> None:
    if b.dtype(a) is not b.dtype(c):
        b.fail(f"{a} is {b.dtype(a).name} but {c} is {b.dtype(c).name}; expected one dtype", DTypeError)


def _flat_copy(b: Binder, src: str, dst: str) -> Step:
    s, d = b.tensor(src), b.tensor(dst)
    _same_dtype(b, src, dst)
    flat, full = (d, s) if src in ("x",) else (s, d)
    if s.numel != d.numel or flat.shape.n != full.shape.n or (flat.shape.h, flat.shape.w) != (1, 1):
        b.fail(f"{src} {s.shape} and {dst} {d.shape} are not [N,H,W,C] and [N,1,1,H*W*C]", ShapeError)
    return partial(np.copyto, b.flat(dst), b.flat(src))


@cpu_op("flatten_fwd")
def flatten_fwd(b: Binder) -> Step:
    return _flat_copy(b, "x", "y")


@cpu_op("flatten_bwd")
def flatten_bwd(b: Binder) -> Step:
    return _flat_copy(b, "dy", "dx")


def _narrow_wide(b: Binder, narrow: str, wide: str) -> tuple[int, int]:
    n, w = b.tensor(narrow), b.tensor(wide)
    _same_dtype(b, narrow, wide)
    if n.shape.dims[:3] != w.shape.dims[:3] or w.shape.c < n.shape.c:
        b.fail(f"{wide} {w.shape} must equal {narrow} {n.shape} except for C >= {n.shape.c}", ShapeError)
    return n.shape.c, w.shape.c


@cpu_op("channel_pad_fwd")
def channel_pad_fwd(b: Binder) -> Step:
    c, cp = _narrow_wide(b, "x", "y")
    y = b.view("y")
    copy = partial(np.copyto, y[..., :c], b.view("x"))
    return seq(copy, partial(y[..., c:].fill, 0) if cp > c else None)


@cpu_op("channel_pad_bwd")
def channel_pad_bwd(b: Binder) -> Step:
    c, _ = _narrow_wide(b, "dx", "dy")
    return partial(np.copyto, b.view("dx"), b.view("dy")[..., :c])
