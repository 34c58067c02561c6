"""Residual join: y = a + b, optionally followed by relu; y may share the bytes of a or b."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.core.errors import ShapeError


@cpu_op("add_fwd")
def add_fwd(b: Binder) -> Step:
    shape = b.tensor("a").shape
    for name in ("b", "y"):
        if b.tensor(name).shape != shape:
            b.fail(f"{name} {b.tensor(name).shape} must have a's shape {shape}", ShapeError)
    act = b.attr("activation", None)
    if act not in (None, "relu"):
        b.fail(f"activation must be None or 'relu', got {act!r}")
    n = shape.numel()
    a, load_a = b.load("a", (n,))
    c, load_c = b.load("b", (n,))
    y, store_y = b.store("y", (n,))
    relu = partial(np.maximum, y, np.float32(0), out=y) if act == "relu" else None
    return seq(load_a, load_c, partial(np.add, a, c, out=y), relu, store_y)
