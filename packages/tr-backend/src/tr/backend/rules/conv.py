"""The rules of the convolution family (conv_fwd, conv_bwd): NHWC x, KRSC w [K, R, S, C/groups], the output's
window from the stride and padding attributes (tr.backend.binding.window_geometry) with the weight's K
channels; ``groups`` (default 1) divides x's C and K; x and w (and dy) of one float dtype, dw with w's
K*R*S*C/groups elements, dx of x's shape; the optional bias b (forward) of K elements in a float dtype, and its
gradient db (backward) of K FP32 elements."""

from __future__ import annotations

from tr.backend.binding import CallBinder, Geometry, window_geometry
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError


def _geometry(b: CallBinder, y: str) -> tuple[Geometry, int, int]:
    xt, wt = b.tensor("x"), b.tensor("w")
    k, r, s, c = wt.shape.dims
    groups = b.int_attr("groups", 1, lo=1)
    if xt.shape.c % groups or k % groups:
        b.fail(f"groups={groups} must divide x's C={xt.shape.c} and w's K={k}", ShapeError)
    if c * groups != xt.shape.c:
        b.fail(f"w {wt.shape} (KRSC) has C={c} but x {xt.shape} has C={xt.shape.c}"
               + (f" (C/groups = {xt.shape.c // groups})" if groups > 1 else ""), ShapeError)
    g = window_geometry(b, "x", y, (r, s))
    if b.tensor(y).shape.c != k:
        b.fail(f"{y} {b.tensor(y).shape} must have C={k} (the weight's K)", ShapeError)
    if xt.dtype is not wt.dtype:
        b.fail(f"x is {xt.dtype.name} but w is {wt.dtype.name}; expected one dtype", DTypeError)
    return g, k, groups


def conv_fwd(b: CallBinder) -> tuple[Geometry, int, int]:
    """The window (c: x's channels), the output channels K and the groups."""
    g, k, groups = _geometry(b, "y")
    b.expect_float("x", "w", "y", "b")
    if b.has("b"):
        b.expect_numel("b", k)
    return g, k, groups


def conv_bwd(b: CallBinder) -> tuple[Geometry, int, int]:
    g, k, groups = _geometry(b, "dy")
    b.expect_numel("dw", k * g.kh * g.kw * (g.c // groups))
    b.expect_float("x", "w", "dy", "dw", "dx")
    if b.has("db"):
        b.expect_numel("db", k)
        b.expect_dtype("db", DType.FP32)
    if b.has("dx") and b.tensor("dx").shape != b.tensor("x").shape:
        b.fail(f"dx {b.tensor('dx').shape} must have x's shape {b.tensor('x').shape}", ShapeError)
    return g, k, groups
