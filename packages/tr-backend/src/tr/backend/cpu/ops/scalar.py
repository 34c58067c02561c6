"""Device-side scalars: step counters, the learning-rate table lookup, the loss scale (static or dynamic)."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.core.dtype import DType
from tr.core.ops import DEFAULT_GROWTH_INTERVAL, LOSS_SCALE_RULES


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


_FP32_MAX = float(np.finfo(np.float32).max)


@cpu_op("loss_scale_update")
def loss_scale_update(b: Binder) -> Step:
    b.expect_dtype("scale", DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    rule = b.attr("rule", "static")
    if rule not in LOSS_SCALE_RULES:
        b.fail(f"loss-scale rule {rule!r} is not one of {list(LOSS_SCALE_RULES)}")
    flag = b.flat("flag")
    scale = b.flat("scale")
    if rule == "static":
        return partial(_static_step, flag, scale)
    if not b.has("tracker"):
        b.fail("rule 'dynamic' needs argument 'tracker' (INT32: clean steps in a row)")
    b.expect_dtype("tracker", DType.INT32)
    interval = b.int_attr("growth_interval", DEFAULT_GROWTH_INTERVAL, 1)
    return partial(_dynamic_step, flag, scale, b.flat("tracker"), interval)


def _static_step(flag: np.ndarray, scale: np.ndarray) -> None:
    """The seed's rule: halve on overflow, never below 1, never grow."""
    if flag[0]:
        half = float(scale[0]) * 0.5
        scale[0] = half if half > 1.0 else 1.0


def _dynamic_step(flag: np.ndarray, scale: np.ndarray, tracker: np.ndarray, interval: int) -> None:
    """torch's _amp_update_scale_ (GradScaler.update), backoff 0.5, growth 2, in float32."""
    if flag[0]:
        scale[0] = scale[0] * np.float32(0.5)
        tracker[0] = 0
        return
    clean = int(tracker[0]) + 1
    if clean == interval:
        grown = float(scale[0]) * 2.0  # exact; the float32 product is inf exactly when this exceeds FP32's max
        if grown <= _FP32_MAX:
            scale[0] = grown
        clean = 0
    tracker[0] = clean
