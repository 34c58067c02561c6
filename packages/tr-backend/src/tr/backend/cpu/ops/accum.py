"""Gradient accumulation (task.accumulate): the window's place, the gradient sum, the window's mean result.

Each closure reads the position, hold and first from the arena when it runs, as the CUDA kernels read them on the
device: the plan is the same for every micro-step and nothing is decided on the host. Every sum is one float32
operation an element, in the CUDA kernels' order, so both backends give the same bytes.
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import accum as rules


@cpu_op("accum_window")
def accum_window(b: Binder) -> Step:
    w = rules.accum_window(b)
    pos, hold, first, div = b.flat("pos"), b.flat("hold"), b.flat("first"), b.flat("div")

    def run() -> None:
        hold[0], first[0], div[0], pos[0] = w.at(int(pos[0]))

    return run


@cpu_op("range_accumulate")
def range_accumulate(b: Binder) -> Step | None:
    n = rules.range_accumulate(b)
    src, acc = b.span("src", np.float32)[:n], b.span("acc", np.float32)[:n]
    hold, first = b.flat("hold"), b.flat("first")
    if not n:
        return None

    def run() -> None:
        if hold[0]:  # the window goes on: acc holds its sum so far
            if first[0]:
                np.copyto(acc, src)
            else:
                np.add(acc, src, out=acc)
        elif not first[0]:  # the closing micro-step: the sum lands in the gradients (a window of one: as it is)
            np.add(acc, src, out=src)

    return run


@cpu_op("window_result")
def window_result(b: Binder) -> Step:
    n = rules.window_result(b)
    result, window, batch = b.flat("result"), b.flat("window"), b.flat("batch")
    hold, first = b.flat("hold"), b.flat("first")
    sums = window[:n]
    tmp = b.scratch((n,))

    def run() -> None:
        m = batch[0]  # an np.float32: every operation below is one float32 rounding
        if first[0]:
            window.fill(0)
        np.multiply(result, m, out=tmp)
        np.add(sums, tmp, out=sums)
        window[n] = window[n] + m
        if not hold[0]:
            np.divide(sums, window[n], out=result)

    return run
