"""The rules of the convolution family (conv_fwd, conv_bwd): NHWC x, KRSC w with x's channels, the output's
window from the stride and padding attributes (tr.backend.binding.window_geometry) with the weight's K
channels; x and w (and dy) of one float dtype, dw with K*R*S*C elements, dx of x's shape."""

from __future__ import annotations

from tr.backend.binding import CallBinder, Geometry, window_geometry
from tr.core.errors import DTypeError, ShapeError


def _geometry(b: CallBinder, y: str) -> tuple[Geometry, int]:
    xt, wt = b.tensor("x"), b.tensor("w")
    k, r, s, c = wt.shape.dims
    if c != xt.shape.c:
        b.fail(f"w {wt.shape} (KRSC) has C={c} but x {xt.shape} has C={xt.shape.c}", ShapeError)
    g = window_geometry(b, "x", y, (r, s))
    if b.tensor(y).shape.c != k:
        b.fail(f"{y} {b.tensor(y).shape} must have C={k} (the weight's K)", ShapeError)
    if xt.dtype is not wt.dtype:
        b.fail(f"x is {xt.dtype.name} but w is {wt.dtype.name}; expected one dtype", DTypeError)
    return g, k


def conv_fwd(b: CallBinder) -> tuple[Geometry, int]:
    """The window and the output channels K."""
    g, k = _geometry(b, "y")
    b.expect_float("x", "w", "y")
    return g, k


def conv_bwd(b: CallBinder) -> tuple[Geometry, int]:
    g, k = _geometry(b, "dy")
    b.expect_numel("dw", k * g.kh * g.kw * g.c)
    b.expect_float("x", "w", "dy", "dw", "dx")
    if b.has("dx") and b.tensor("dx").shape != b.tensor("x").shape:
        b.fail(f"dx {b.tensor('dx').shape} must have x's shape {b.tensor('x').shape}", ShapeError)
    return g, k
