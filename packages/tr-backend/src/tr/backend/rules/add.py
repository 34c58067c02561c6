"""The rule of add_fwd (the residual join y = a + b, an optional ReLU after): a, b and y of one shape, any float."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.errors import ShapeError

ACTIVATIONS = (None, "relu")


def add_fwd(b: CallBinder) -> tuple[int, bool]:
    """(elements, relu)."""
    shape = b.tensor("a").shape
    for name in ("b", "y"):
        if b.tensor(name).shape != shape:
            b.fail(f"{name} {b.tensor(name).shape} must have a's shape {shape}", ShapeError)
    act = b.attr("activation", None)
    if act not in ACTIVATIONS:
        b.fail(f"activation must be None or 'relu', got {act!r}")
    b.expect_float("a", "b", "y")
    return shape.numel(), act == "relu"
