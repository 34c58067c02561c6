"""The rules of dropout (dropout_fwd, dropout_bwd): p in [0, 1), x and y (dy and dx) of one element count
and any float, an INT8 keep mask of that count, and for the forward an INT32[2] seed (one uint64, advanced
by each launch)."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import ShapeError


def _p(b: CallBinder) -> float:
    p = b.float_attr("p", lo=0.0)
    if p >= 1.0:
        b.fail(f"dropout probability p must be in [0, 1), got {p}")
    return p


def _mask(b: CallBinder, n: int) -> None:
    b.expect_dtype("mask", DType.INT8)
    b.expect_numel("mask", n)


def dropout_fwd(b: CallBinder) -> tuple[int, float]:
    """(elements, p)."""
    p = _p(b)
    n = b.tensor("x").numel
    b.expect_numel("y", n)
    _mask(b, n)
    b.expect_dtype("seed", DType.INT32)
    b.expect_numel("seed", 2)
    b.expect_float("x", "y")
    return n, p


def dropout_bwd(b: CallBinder) -> tuple[int, float]:
    p = _p(b)
    n = b.tensor("dy").numel
    if b.tensor("dx").numel != n:
        b.fail(f"dx {b.tensor('dx').shape} must match dy {b.tensor('dy').shape}", ShapeError)
    _mask(b, n)
    b.expect_float("dy", "dx")
    return n, p
