"""Batch norm + relu + max pooling as one op pair (the CBR before a pool): the same numbers as bn_fwd (relu) ->
maxpool_fwd and maxpool_bwd -> bn_bwd (relu), rounding to x's dtype included, without the full-resolution
activation and its gradient as tensors of the plan. Argument rules: tr.backend.rules.bn."""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.ops._window import Window
from tr.backend.cpu.ops.bn import TrainGrad, TrainStats, rounder
from tr.backend.rules.bn import bn_maxpool_bwd_rules, bn_maxpool_fwd_rules


def _canvas(b: Binder, g: Window, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """(the [N, Hp, Wp, C] array the window taps read or write, its unpadded [N, H, W, C] part)."""
    if g.padded:
        a = b.private((g.n, g.hp, g.wp, g.c), fill=fill)
        return a, g.interior(a)
    a = b.scratch((g.n, g.h, g.w, g.c))
    return a, a


@cpu_op("bn_maxpool_fwd")
def bn_maxpool_fwd(b: Binder) -> Step:
    r = bn_maxpool_fwd_rules(b)
    g = Window(**r.geo.as_ints())
    x, load_x = b.load("x", (r.m, r.c))
    y, store_y = b.store("y")
    code = b.view("mask")
    stats = TrainStats(b, r.m, r.c, r.momentum, r.eps)
    pre = b.scratch((r.m, r.c))
    stored = rounder(b, (r.m, r.c), b.dtype("x"))
    canvas, inner = _canvas(b, g, -np.inf)
    upd = b.scratch(y.shape, np.bool_)
    taps = g.tap_views(canvas)
    rest = [(tap, np.int8(t)) for t, tap in enumerate(taps) if t > 0]

    def core() -> None:
        stats.normalize(x, pre)
        # the activation as bn_fwd then act_fwd would have stored it: rounded to x's dtype, then relu
        np.maximum(stored(pre).reshape(inner.shape), np.float32(0), out=inner)
        np.copyto(y, taps[0])
        code.fill(0)
        for tap, t in rest:  # strict '>': the first max wins, NaN never replaces
            np.greater(tap, y, out=upd)
            np.copyto(y, tap, where=upd)
            np.copyto(code, t, where=upd)

    return seq(load_x, *stats.loads, core, store_y, *stats.stores)


@cpu_op("bn_maxpool_bwd")
def bn_maxpool_bwd(b: Binder) -> Step:
    r = bn_maxpool_bwd_rules(b)
    g = Window(**r.geo.as_ints())
    x, load_x = b.load("x", (r.m, r.c))
    dy, load_dy = b.load("dy")
    dx, store_dx = b.store("dx", (r.m, r.c))
    code = b.view("mask")
    grad = TrainGrad(b, r.m, r.c, with_beta=True)
    canvas, inner = _canvas(b, g, 0.0)
    views = g.tap_views(canvas)
    overlap = g.sh < g.kh or g.sw < g.kw
    eq = b.scratch(dy.shape, np.bool_)
    tmp = b.scratch(dy.shape)
    routed = b.scratch((r.m, r.c))
    passed = b.scratch((r.m, r.c))
    stored = rounder(b, (r.m, r.c), b.dtype("x"))

    def core() -> None:
        canvas.fill(0)
        for t, view in enumerate(views):  # maxpool_bwd: dy to the recorded position, in kernel-position order
            np.equal(code, np.int8(t), out=eq)
            if overlap:
                np.multiply(dy, eq, out=tmp)
                np.add(view, tmp, out=view)
            else:
                np.copyto(view, dy, where=eq)
        np.copyto(routed.reshape(inner.shape), inner)
        grad.relu_passed(x, passed)
        np.multiply(stored(routed), passed, out=routed)  # the pool's dx as stored, through the relu
        grad.backward(x, routed, dx)

    return seq(load_x, load_dy, *grad.loads, core, store_dx, *grad.stores)
