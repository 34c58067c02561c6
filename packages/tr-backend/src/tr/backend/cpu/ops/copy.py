"""copy (y = x) and accumulate (y += x): flat element-wise, any shapes of equal numel."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import copy as rules
from tr.core.dtype import DType


@cpu_op("copy")
def copy(b: Binder) -> Step:
    rules.copy(b)
    return partial(np.copyto, b.flat("y"), b.flat("x"))


@cpu_op("accumulate")
def accumulate(b: Binder) -> Step:
    rules.accumulate(b)
    x, y = b.tensor("x"), b.tensor("y")
    if DType.BF16 not in (x.dtype, y.dtype) and x.dtype.is_float and y.dtype.is_float:
        # numpy adds FP16 through float32 and rounds once: the AMP rule, with no extra copies
        ys = b.flat("y")
        return partial(np.add, ys, b.flat("x"), out=ys)
    xs, load_x = b.load("x", (-1,))
    ys, load_y, store_y = b.modify("y", (-1,))
    return seq(load_x, load_y, partial(np.add, ys, xs, out=ys), store_y)
