"""The rules of scale_fwd / scale_bwd (squeeze-excitation's join y = x * s): x [N,H,W,C], s [N,1,1,C], y, dx of
x's shape, ds of s's; any float dtype."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.errors import ShapeError


def _geometry(b: CallBinder, like_x: tuple[str, ...], like_s: tuple[str, ...]) -> tuple[int, int, int]:
    x = b.tensor("x").shape
    if len(x.dims) != 4:
        b.fail(f"x {x} must be [N,H,W,C]", ShapeError)
    n, h, w, c = x.dims
    for name in like_x:
        if b.tensor(name).shape != x:
            b.fail(f"{name} {b.tensor(name).shape} must have x's shape {x}", ShapeError)
    for name in like_s:
        if b.tensor(name).shape.dims != (n, 1, 1, c):
            b.fail(f"{name} {b.tensor(name).shape} must be [{n},1,1,{c}]: one factor per sample and channel of x "
                   f"{x}", ShapeError)
    b.expect_float("x", *like_x, *like_s)
    return n, h * w, c


def scale_fwd(b: CallBinder) -> tuple[int, int, int]:
    """(N, H*W, C)."""
    return _geometry(b, ("y",), ("s",))


def scale_bwd(b: CallBinder) -> tuple[int, int, int, bool]:
    """(N, H*W, C, whether dx is computed)."""
    with_dx = b.has("dx")
    return (*_geometry(b, ("dy", "dx") if with_dx else ("dy",), ("s", "ds")), with_dx)
