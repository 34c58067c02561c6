"""Pooling: max (INT8 argmax mask), average (padding excluded from the count) and global average.

Windows are handled one kernel position at a time: for position (kh, kw) the strided view of the padded
input it reads for every output (Window.tap_views), so a K x K pool is K*K vectorised numpy ops whatever
the tensor size. Max pooling pads with -inf in a private buffer (border written once); the mask holds the
first maximal position kh*KW + kw (strict '>' while scanning in row-major order). Backward scatters dy to
the recorded position; where windows overlap the contributions are summed in kernel-position order.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.ops._window import Window
from tr.backend.rules import pool as rules


def _padded_input(b: Binder, g: Window, fill: float) -> tuple[np.ndarray, list]:
    """(float32 [N, Hp, Wp, C] input with a constant border, steps that fill its interior from x)."""
    if not g.padded:
        x, load_x = b.load("x")
        return x, [load_x]
    xp = b.private((g.n, g.hp, g.wp, g.c), fill=fill)
    src, pre = b.source("x")
    return xp, [pre, partial(np.copyto, g.interior(xp), src)]


def _grad_target(b: Binder, g: Window) -> tuple[np.ndarray, list]:
    """(float32 [N, Hp, Wp, C] buffer the backward accumulates into, steps that move it into dx)."""
    if not g.padded:
        dx, store_dx = b.store("dx")
        return dx, [store_dx]
    dxp = b.private((g.n, g.hp, g.wp, g.c))
    dx, store_dx = b.store("dx")
    return dxp, [partial(np.copyto, dx, g.interior(dxp)), store_dx]


@cpu_op("maxpool_fwd")
def maxpool_fwd(b: Binder) -> Step:
    g = Window.of(rules.maxpool_fwd(b))
    code = b.view("mask")
    xp, steps = _padded_input(b, g, -np.inf)
    y, store_y = b.store("y")
    upd = b.scratch(y.shape, np.bool_)
    taps = g.tap_views(xp)
    rest = [(tap, np.int8(t)) for t, tap in enumerate(taps) if t > 0]

    def core() -> None:
        np.copyto(y, taps[0])
        code.fill(0)
        for tap, t in rest:
            np.greater(tap, y, out=upd)
            np.copyto(y, tap, where=upd)
            np.copyto(code, t, where=upd)

    return seq(*steps, core, store_y)


@cpu_op("maxpool_inf")
def maxpool_inf(b: Binder) -> Step:
    g = Window.of(rules.window(b, "x", "y"))
    xp, steps = _padded_input(b, g, -np.inf)
    y, store_y = b.store("y")
    taps = g.tap_views(xp)
    steps.append(partial(np.copyto, y, taps[0]))
    steps += [partial(np.maximum, y, tap, out=y) for tap in taps[1:]]
    return seq(*steps, store_y)


@cpu_op("maxpool_bwd")
def maxpool_bwd(b: Binder) -> Step:
    g = Window.of(rules.maxpool_bwd(b))
    code = b.view("mask")
    dy, load_dy = b.load("dy")
    dxp, tail = _grad_target(b, g)
    eq = b.scratch(dy.shape, np.bool_)
    views = g.tap_views(dxp)
    overlap = g.sh < g.kh or g.sw < g.kw
    steps: list = [load_dy, partial(dxp.fill, 0)]
    if overlap:
        tmp = b.scratch(dy.shape)
        for t, view in enumerate(views):
            steps += [partial(np.equal, code, np.int8(t), out=eq), partial(np.multiply, dy, eq, out=tmp),
                      partial(np.add, view, tmp, out=view)]
    else:  # every input element is read by at most one window: a masked copy is enough
        for t, view in enumerate(views):
            steps += [partial(np.equal, code, np.int8(t), out=eq), partial(np.copyto, view, dy, where=eq)]
    return seq(*steps, *tail)


def _inv_count(g: Window) -> np.ndarray:
    """1 / (number of in-bounds window elements) per output position, shape [1, P, Q, 1]."""
    def valid(size: int, k: int, s: int, p: int, out: int) -> np.ndarray:
        start = np.arange(out) * s - p
        return np.minimum(start + k, size) - np.maximum(start, 0)

    cnt = valid(g.h, g.kh, g.sh, g.ph, g.p)[:, None] * valid(g.w, g.kw, g.sw, g.pw, g.q)[None, :]
    return (1.0 / cnt).astype(np.float32).reshape(1, g.p, g.q, 1)


@cpu_op("avgpool_fwd")
def avgpool_fwd(b: Binder) -> Step:
    g = Window.of(rules.window(b, "x", "y"))
    xp, steps = _padded_input(b, g, 0.0)
    y, store_y = b.store("y")
    taps = g.tap_views(xp)
    steps.append(partial(np.copyto, y, taps[0]))
    steps += [partial(np.add, y, tap, out=y) for tap in taps[1:]]
    steps.append(partial(np.multiply, y, _inv_count(g), out=y))
    return seq(*steps, store_y)


@cpu_op("avgpool_bwd")
def avgpool_bwd(b: Binder) -> Step:
    g = Window.of(rules.window(b, "dx", "dy"))
    dy, load_dy = b.load("dy")
    share = b.scratch(dy.shape)
    dxp, tail = _grad_target(b, g)
    steps: list = [load_dy, partial(np.multiply, dy, _inv_count(g), out=share), partial(dxp.fill, 0)]
    steps += [partial(np.add, view, share, out=view) for view in g.tap_views(dxp)]
    return seq(*steps, *tail)


@cpu_op("gap_fwd")
def gap_fwd(b: Binder) -> Step:
    n, hw, c = rules.gap(b, "x", "y")
    x, load_x = b.load("x", (n, hw, c))
    y, store_y = b.store("y", (n, c))
    return seq(load_x, partial(np.mean, x, axis=1, out=y), store_y)


@cpu_op("gap_bwd")
def gap_bwd(b: Binder) -> Step:
    n, hw, c = rules.gap(b, "dx", "dy")
    dy, load_dy = b.load("dy", (n, 1, c))
    dx, store_dx = b.store("dx", (n, hw, c))
    return seq(load_dy, partial(np.multiply, dy, np.float32(1.0 / hw), out=dx), store_dx)
