"""copy (y = x) and accumulate (y += x): flat element-wise, any shapes of equal numel."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError


@cpu_op("copy")
def copy(b: Binder) -> Step:
    x, y = b.tensor("x"), b.tensor("y")
    if x.numel != y.numel:
        b.fail(f"x {x.shape} and y {y.shape} differ in numel", ShapeError)
    if x.dtype is not y.dtype:
        b.fail(f"x is {x.dtype.name} but y is {y.dtype.name}; copy does not cast", DTypeError)
    return partial(np.copyto, b.flat("y"), b.flat("x"))


@cpu_op("accumulate")
def accumulate(b: Binder) -> Step:
    x, y = b.tensor("x"), b.tensor("y")
    if x.numel != y.numel:
        b.fail(f"x {x.shape} and y {y.shape} differ in numel", ShapeError)
    if DType.BF16 not in (x.dtype, y.dtype) and x.dtype.is_float and y.dtype.is_float:
        # numpy adds FP16 through float32 and rounds once: the AMP rule, with no extra copies
        ys = b.flat("y")
        return partial(np.add, ys, b.flat("x"), out=ys)
    xs, load_x = b.load("x", (-1,))
    ys, load_y, store_y = b.modify("y", (-1,))
    return seq(load_x, load_y, partial(np.add, ys, xs, out=ys), store_y)
