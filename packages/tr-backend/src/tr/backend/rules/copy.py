"""The rules of copy and accumulate: x and y of one element count; copy does not cast, accumulate adds any
float into any float."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.errors import DTypeError, ShapeError


def _same_numel(b: CallBinder) -> None:
    x, y = b.tensor("x"), b.tensor("y")
    if x.numel != y.numel:
        b.fail(f"x {x.shape} and y {y.shape} differ in numel", ShapeError)


def copy(b: CallBinder) -> int:
    """Bytes to copy."""
    _same_numel(b)
    x, y = b.tensor("x"), b.tensor("y")
    if x.dtype is not y.dtype:
        b.fail(f"x is {x.dtype.name} but y is {y.dtype.name}; copy does not cast", DTypeError)
    return x.nbytes


def accumulate(b: CallBinder) -> int:
    """Elements of y += x."""
    _same_numel(b)
    b.expect_float("x", "y")
    return b.tensor("x").numel
