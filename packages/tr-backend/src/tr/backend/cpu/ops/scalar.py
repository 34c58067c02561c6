"""Device-side scalars: step counters, the learning-rate table lookup, the loss scale (static or dynamic). The
counters and the loss scale take gradient accumulation's optional hold: set (a micro-step that does not close its
window), the op does nothing, decided when it runs, as the CUDA kernels decide it on the device."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import scalar as rules


def unless_held(b: Binder, step: Step) -> Step:
    """``step``, or, with a hold argument, a step that runs it only while hold[0] == 0."""
    if not b.has("hold"):
        return step
    hold = b.flat("hold")

    def run() -> None:
        if not hold[0]:
            step()

    return run


@cpu_op("scalar_increment")
def scalar_increment(b: Binder) -> Step:
    rules.scalar_increment(b)
    x = b.flat("x")
    return unless_held(b, partial(np.add, x, x.dtype.type(1), out=x))


@cpu_op("lr_lookup")
def lr_lookup(b: Binder) -> Step:
    last = rules.lr_lookup(b) - 1
    table, step, lr = b.flat("table"), b.flat("step"), b.flat("lr")

    def run() -> None:
        s = int(step[0])
        lr[0] = table[0 if s < 0 else (s if s < last else last)]

    return run


@cpu_op("count_flag")
def count_flag(b: Binder) -> Step:
    rules.count_flag(b)
    flag, count = b.flat("flag"), b.flat("count")

    def run() -> None:
        if flag[0]:
            count[0] += 1

    return unless_held(b, run)


_FP32_MAX = float(np.finfo(np.float32).max)


@cpu_op("loss_scale_update")
def loss_scale_update(b: Binder) -> Step:
    r = rules.loss_scale_update(b)
    flag, scale = b.flat("flag"), b.flat("scale")
    if not r.dynamic:
        return unless_held(b, partial(_static_step, flag, scale))
    return unless_held(b, partial(_dynamic_step, flag, scale, b.flat("tracker"), r.growth_interval))


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
