"""Device-side scalars: step counters, the learning-rate table lookup, the only-halving loss scale."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.core.dtype import DType


@cpu_op("scalar_increment")
def scalar_increment(b: Binder) -> Step:
    x = b.flat("x")
    return partial(np.add, x, x.dtype.type(1), out=x)


@cpu_op("lr_lookup")
def lr_lookup(b: Binder) -> Step:
    b.expect_dtype("step", DType.INT32)
    b.expect_float("table", "lr")
    table = b.flat("table")
    last = table.size - 1
    step = b.flat("step")
    lr = b.flat("lr")
    if b.dtype("table") is not b.dtype("lr"):
        b.fail(f"table is {b.dtype('table').name} but lr is {b.dtype('lr').name}; expected one dtype")

    def run() -> None:
        s = int(step[0])
        lr[0] = table[0 if s < 0 else (s if s < last else last)]

    return run


@cpu_op("count_flag")
def count_flag(b: Binder) -> Step:
    b.expect_dtype("flag", DType.INT32)
    b.expect_dtype("count", DType.INT32)
    flag, count = b.flat("flag"), b.flat("count")

    def run() -> None:
        if flag[0]:
            count[0] += 1

    return run


@cpu_op("loss_scale_update")
def loss_scale_update(b: Binder) -> Step:
    b.expect_dtype("scale", DType.FP32)
    flag = b.flat("flag")
    scale = b.flat("scale")

    def run() -> None:
        if flag[0]:
            half = float(scale[0]) * 0.5
            scale[0] = half if half > 1.0 else 1.0

    return run
