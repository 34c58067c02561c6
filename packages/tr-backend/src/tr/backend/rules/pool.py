"""The rules of pooling (maxpool_fwd/inf/bwd, avgpool_fwd/bwd, gap_fwd/bwd): the window from the kernel,
stride and padding attributes (tr.backend.binding.window_geometry), input and output of one channel count
and any float; max pooling's INT8 argmax mask has the output's shape (so at most 127 window positions);
global average pooling maps [N, H, W, C] to [N, 1, 1, C]."""

from __future__ import annotations

from tr.backend.binding import CallBinder, Geometry, window_geometry
from tr.core.dtype import DType
from tr.core.errors import ShapeError


def window(b: CallBinder, x: str, y: str) -> Geometry:
    """The window of maxpool_inf and avgpool_fwd (x, y) or avgpool_bwd (dx, dy)."""
    g = window_geometry(b, x, y)
    if b.tensor(x).shape.c != b.tensor(y).shape.c:
        b.fail(f"{y} {b.tensor(y).shape} must have the channels of {x} {b.tensor(x).shape}", ShapeError)
    b.expect_float(x, y)
    return g


def _mask(b: CallBinder, shape_of: str) -> None:
    b.expect_dtype("mask", DType.INT8)
    if b.tensor("mask").shape != b.tensor(shape_of).shape:
        b.fail(f"mask {b.tensor('mask').shape} must have {shape_of}'s shape {b.tensor(shape_of).shape}", ShapeError)


def maxpool_fwd(b: CallBinder) -> Geometry:
    g = window(b, "x", "y")
    if g.kh * g.kw > 127:
        b.fail(f"a {g.kh}x{g.kw} window has {g.kh * g.kw} positions; the INT8 mask holds at most 127")
    _mask(b, "y")
    return g


def maxpool_bwd(b: CallBinder) -> Geometry:
    g = window(b, "dx", "dy")
    _mask(b, "dy")
    return g


def gap(b: CallBinder, x: str, y: str) -> tuple[int, int, int]:
    """(N, H*W, C) of gap_fwd (x, y) or gap_bwd (dx, dy)."""
    n, h, w, c = b.tensor(x).shape.dims
    if b.tensor(y).shape.dims != (n, 1, 1, c):
        b.fail(f"{y} {b.tensor(y).shape} must be [{n},1,1,{c}] for {x} {b.tensor(x).shape}", ShapeError)
    b.expect_float(x, y)
    return n, h * w, c
