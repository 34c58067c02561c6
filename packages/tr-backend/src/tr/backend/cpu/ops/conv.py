"""2-D convolution, NHWC cross-correlation with KRSC weights and an optional bias: im2col by stride tricks + GEMM.

Forward: the padded input (a private buffer whose zero border is written once) is viewed as patches
[N,P,Q,R,S,C] with ``as_strided``; one copy packs them into a [rows, R*S*C] matrix and one GEMM with
w [K, R*S*C]^T writes y. The batch is processed in chunks of samples so the packed matrix stays a few MB
(cache-resident and small) whatever N is; a 1x1, stride-1, unpadded convolution needs no packing at all.
Backward: wgrad is ``dy^T @ cols`` (summed over the chunks in order). dgrad is either the full correlation
of dy (zero-bordered in a private buffer) with the flipped weights [R,S,K,C] -- im2col + GEMM straight into
dx -- when the stride is 1 and K <= C, or else one GEMM ``dy @ w`` to column gradients followed by one
strided add per kernel position (col2im). Per chunk the steps run im2col(x) -> wgrad -> dgrad.
Grouped (groups > 1, depthwise included): the same im2col over all channels, then per chunk one batched
GEMM over the groups ([G, rows, R*S*C/G] x [G, K/G, R*S*C/G]^T), and for dgrad the batched column
gradients through col2im; the group-major copies live in scratch, as the im2col matrix.
The bias (when given) is added to the GEMM's FP32 output before it is stored; its gradient is dy's column sum.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.binding import Geometry
from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.ops._window import Window
from tr.backend.rules import conv as rules

CHUNK_ELEMENTS = 1 << 20  # float32 elements of one packed im2col chunk (4 MiB)


def _window(rule: tuple[Geometry, int, int]) -> tuple[Window, int, int]:
    g, k, groups = rule
    return Window.of(g), k, groups


def _is_pointwise(g: Window) -> bool:
    return g.kh == g.kw == g.sh == g.sw == 1 and not g.padded


def _chunks(n: int, per_sample: int) -> list[slice]:
    step = max(1, min(n, CHUNK_ELEMENTS // max(1, per_sample)))
    return [slice(i, min(n, i + step)) for i in range(0, n, step)]


class _Im2col:
    """The packed patches of x, chunk by chunk: ``steps_for(i)`` fills ``matrix(i)`` [rows_i, R*S*C]."""

    def __init__(self, b: Binder, g: Window) -> None:
        self.g = g
        rsc = g.kh * g.kw * g.c
        self.pre: list = []
        if _is_pointwise(g):
            x, load_x = b.load("x", (g.n * g.h * g.w, g.c))
            self.pre, self.chunks, self._mats, self._fill = [load_x], [slice(0, g.n)], [x], [None]
            return
        if g.padded:
            xp = b.private((g.n, g.hp, g.wp, g.c))
            src, pre = b.source("x")
            self.pre = [pre, partial(np.copyto, g.interior(xp), src)]
        else:
            xp, load_x = b.load("x")
            self.pre = [load_x]
        self.chunks = _chunks(g.n, g.p * g.q * rsc)
        buf = b.scratch((self.chunks[0].stop, g.p, g.q, g.kh, g.kw, g.c))
        self._mats, self._fill = [], []
        for sl in self.chunks:
            cols = buf[:sl.stop - sl.start]
            part = xp[sl]
            if g.kh == g.kw == 1:  # strided 1x1: the patches are a plain strided slice
                pick = part[:, ::g.sh, ::g.sw, :][:, :g.p, :g.q, :].reshape(cols.shape)
            else:
                pick = Window(sl.stop - sl.start, *_rest(g)).patches(part)
            self._fill.append(partial(np.copyto, cols, pick))
            self._mats.append(cols.reshape(-1, rsc))

    def matrix(self, i: int) -> np.ndarray:
        return self._mats[i]

    def fill(self, i: int) -> Step | None:
        return self._fill[i]


def _bias_add(b: Binder, y: np.ndarray, k: int) -> list[Step]:
    """y [rows, K] += b[K] before y is stored (nothing without a bias)."""
    if not b.has("b"):
        return []
    bias, load_b = b.load("b", (k,))
    return [load_b, partial(np.add, y, bias, out=y)]


def _bias_grad(b: Binder, dy: np.ndarray, k: int) -> list[Step]:
    """db[K] = the column sums of dy [rows, K] (nothing without db)."""
    if not b.has("db"):
        return []
    db, store_db = b.store("db", (k,))
    return [partial(np.sum, dy, axis=0, out=db), store_db]


def _rest(g: Window) -> tuple:
    return g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.p, g.q


def _rows(a: np.ndarray, sl: slice, per_sample: int) -> np.ndarray:
    """Rows of samples ``sl`` of a [N*per_sample, X] matrix."""
    return a[sl.start * per_sample:sl.stop * per_sample]


class _Grouped:
    """The grouped layout of one chunk's matrices, in scratch: the patches group-major [G, rows, R*S*C/G]
    (one copy from the im2col matrix) and a [G, rows, X] result, with the [rows, G, X] views the ungrouped
    tensors see."""

    def __init__(self, b: Binder, g: Window, groups: int, rows: int, x: int) -> None:
        self.g, self.groups, self.rs, self.cg = g, groups, g.kh * g.kw, g.c // groups
        self._cols = b.scratch((groups, rows, self.rs * self.cg))
        self._out = b.scratch((groups, rows, x))

    def cols(self, m: np.ndarray) -> tuple[np.ndarray, Step]:
        """(the group-major patches of im2col matrix ``m`` [rows, R*S*C], the copy that fills them)."""
        rows = m.shape[0]
        dst = self._cols[:, :rows]
        src = m.reshape(rows, self.rs, self.groups, self.cg).transpose(2, 0, 1, 3)
        return dst, partial(np.copyto, dst.reshape(self.groups, rows, self.rs, self.cg), src)

    def out(self, rows: int) -> np.ndarray:
        return self._out[:, :rows]


def _grouped_fwd(b: Binder, g: Window, k: int, groups: int) -> Step:
    cols = _Im2col(b, g)
    pq, kg = g.p * g.q, k // groups
    w, load_w = b.load("w", (groups, kg, g.kh * g.kw * (g.c // groups)))
    y, store_y = b.store("y", (g.n * pq, k))
    gl = _Grouped(b, g, groups, cols.chunks[0].stop * pq, kg)
    steps = [*cols.pre, load_w]
    for i, sl in enumerate(cols.chunks):
        rows = (sl.stop - sl.start) * pq
        gcols, fill = gl.cols(cols.matrix(i))
        out = gl.out(rows)  # [G, rows, K/G]
        steps += [cols.fill(i), fill, partial(np.matmul, gcols, w.transpose(0, 2, 1), out=out),
                  partial(np.copyto, _rows(y, sl, pq).reshape(rows, groups, kg), out.transpose(1, 0, 2))]
    return seq(*steps, *_bias_add(b, y, k), store_y)


def _grouped_bwd(b: Binder, g: Window, k: int, groups: int) -> Step:
    cols = _Im2col(b, g)
    rs, pq, kg, cg = g.kh * g.kw, g.p * g.q, k // groups, g.c // groups
    dy, load_dy = b.load("dy", (g.n * pq, k))
    dw, store_dw = b.store("dw", (groups, kg, rs * cg))
    part = b.scratch(dw.shape) if len(cols.chunks) > 1 else None
    gl = _Grouped(b, g, groups, cols.chunks[0].stop * pq, rs * cg)
    steps = [*cols.pre, load_dy, *_bias_grad(b, dy, k)]
    tail = [store_dw]
    if b.has("dx"):
        w, load_w = b.load("w", (groups, kg, rs * cg))
        dxp, dx_tail = _dx_target(b, g)
        steps.append(load_w)
        tail += dx_tail
    for i, sl in enumerate(cols.chunks):
        n = sl.stop - sl.start
        dyg = _rows(dy, sl, pq).reshape(n * pq, groups, kg).transpose(1, 0, 2)  # [G, rows, K/G]
        gcols, fill = gl.cols(cols.matrix(i))
        steps += [cols.fill(i), fill]
        if i == 0:
            steps.append(partial(np.matmul, dyg.transpose(0, 2, 1), gcols, out=dw))
        else:
            steps += [partial(np.matmul, dyg.transpose(0, 2, 1), gcols, out=part), partial(np.add, dw, part, out=dw)]
        if b.has("dx"):
            dcols = gl.out(n * pq)  # [G, rows, R*S*C/G]
            d7 = dcols.reshape(groups, n, g.p, g.q, g.kh, g.kw, cg).transpose(1, 2, 3, 4, 5, 0, 6)
            steps += [partial(np.matmul, dyg, w, out=dcols), *_col2im(g, dxp[sl], d7)]
    return seq(*steps, *tail)


@cpu_op("conv_fwd")
def conv_fwd(b: Binder) -> Step:
    g, k, groups = _window(rules.conv_fwd(b))
    if groups > 1:
        return _grouped_fwd(b, g, k, groups)
    cols = _Im2col(b, g)
    w, load_w = b.load("w", (k, g.kh * g.kw * g.c))
    y, store_y = b.store("y", (g.n * g.p * g.q, k))
    wt = w.T
    steps = [*cols.pre, load_w]
    for i, sl in enumerate(cols.chunks):
        steps += [cols.fill(i), partial(np.matmul, cols.matrix(i), wt, out=_rows(y, sl, g.p * g.q))]
    return seq(*steps, *_bias_add(b, y, k), store_y)


def _dgrad_full_correlation(b: Binder, g: Window, k: int, dy: np.ndarray, w4: np.ndarray) -> tuple[list, list]:
    """(steps before the chunks, step per chunk): dx = full correlation of dy with the flipped kernel."""
    dx, store_dx = b.store("dx", (g.n * g.h * g.w, g.c))
    if _is_pointwise(g):
        return [], [partial(np.matmul, dy, w4.reshape(k, g.c), out=dx), store_dx]
    # G[j] = dy[j - (R-1-ph)] (zero elsewhere), length H+R-1 per spatial dim, so dx[h] = sum_r' G[h+r'] wf[r'].
    gbuf = b.private((g.n, g.h + g.kh - 1, g.w + g.kw - 1, k))
    dy4 = dy.reshape(g.n, g.p, g.q, k)

    def place(length: int, count: int, off: int) -> tuple[slice, slice]:
        lo, hi = max(0, -off), min(count, length - off)
        return slice(off + lo, off + hi), slice(lo, hi)

    gh, dh = place(g.h + g.kh - 1, g.p, g.kh - 1 - g.ph)
    gw, dw = place(g.w + g.kw - 1, g.q, g.kw - 1 - g.pw)
    rsk = g.kh * g.kw * k
    wf = b.scratch((g.kh, g.kw, k, g.c))
    before = [partial(np.copyto, gbuf[:, gh, gw, :], dy4[:, dh, dw, :]),
              partial(np.copyto, wf, w4[:, ::-1, ::-1, :].transpose(1, 2, 0, 3))]
    wf2 = wf.reshape(rsk, g.c)
    chunks = _chunks(g.n, g.h * g.w * rsk)
    buf = b.scratch((chunks[0].stop, g.h, g.w, g.kh, g.kw, k))
    per = []
    for sl in chunks:
        n = sl.stop - sl.start
        gcols = buf[:n]
        patches = Window(n, g.h + g.kh - 1, g.w + g.kw - 1, k, g.kh, g.kw, 1, 1, 0, 0, g.h, g.w).patches(gbuf[sl])
        per.append(seq(partial(np.copyto, gcols, patches),
                       partial(np.matmul, gcols.reshape(-1, rsk), wf2, out=_rows(dx, sl, g.h * g.w))))
    return before, [*per, store_dx]


def _dx_target(b: Binder, g: Window) -> tuple[np.ndarray, list[Step]]:
    """(where col2im accumulates dx, the steps that then store it): a private zero-bordered buffer copied
    into dx when the window is padded, else dx itself."""
    if g.padded:
        dxp = b.private((g.n, g.hp, g.wp, g.c))
        dx4, store_dx = b.store("dx")
        return dxp, [partial(np.copyto, dx4, g.interior(dxp)), store_dx]
    dxp, store_dx = b.store("dx")
    return dxp, [store_dx]


def _col2im(g: Window, dxs: np.ndarray, d: np.ndarray) -> list[Step]:
    """Zero ``dxs`` [n, Hp, Wp, C], then add each kernel position's column gradients d[:, :, :, r, s] to the
    [n, P, Q, C] view of ``dxs`` that position read (d's trailing channel axes may be split, as (G, C/G))."""
    steps: list[Step] = [partial(dxs.fill, 0)]
    for t, view in enumerate(g.tap_views(dxs)):
        src = d[:, :, :, t // g.kw, t % g.kw]
        dst = view.reshape(src.shape)  # splits the contiguous channel axis only: a view
        assert np.shares_memory(dst, dxs)
        steps.append(partial(np.add, dst, src, out=dst))
    return steps


def _dgrad_col2im(b: Binder, g: Window, k: int, dy: np.ndarray, w4: np.ndarray, chunks: list[slice]) -> list:
    """Per chunk: column gradients by one GEMM, then one strided add per kernel position."""
    rsc = g.kh * g.kw * g.c
    wm = w4.reshape(k, rsc)
    dxp, tail = _dx_target(b, g)
    buf = b.scratch((chunks[0].stop * g.p * g.q, rsc))
    per = []
    for sl in chunks:
        n = sl.stop - sl.start
        dcols = buf[:n * g.p * g.q]
        d6 = dcols.reshape(n, g.p, g.q, g.kh, g.kw, g.c)
        per.append(seq(partial(np.matmul, _rows(dy, sl, g.p * g.q), wm, out=dcols), *_col2im(g, dxp[sl], d6)))
    return per + tail


@cpu_op("conv_bwd")
def conv_bwd(b: Binder) -> Step:
    g, k, groups = _window(rules.conv_bwd(b))
    if groups > 1:
        return _grouped_bwd(b, g, k, groups)
    cols = _Im2col(b, g)
    pq = g.p * g.q
    dy, load_dy = b.load("dy", (g.n * pq, k))
    dw, store_dw = b.store("dw", (k, g.kh * g.kw * g.c))
    part = b.scratch(dw.shape) if len(cols.chunks) > 1 else None
    steps = [*cols.pre, load_dy, *_bias_grad(b, dy, k)]
    wgrad = []
    for i, sl in enumerate(cols.chunks):
        dy_c = _rows(dy, sl, pq).T
        if i == 0:
            wgrad.append(seq(cols.fill(i), partial(np.matmul, dy_c, cols.matrix(i), out=dw)))
        else:
            wgrad.append(seq(cols.fill(i), partial(np.matmul, dy_c, cols.matrix(i), out=part),
                             partial(np.add, dw, part, out=dw)))
    if not b.has("dx"):
        return seq(*steps, *wgrad, store_dw)
    w4, load_w = b.load("w")
    steps.append(load_w)
    if g.sh == g.sw == 1 and k <= g.c:
        before, dgrad = _dgrad_full_correlation(b, g, k, dy, w4)
        return seq(*steps, *before, *wgrad, store_dw, *dgrad)
    dgrad = _dgrad_col2im(b, g, k, dy, w4, cols.chunks)
    # interleave per chunk: im2col(x) -> wgrad -> dgrad, so dx may even share x's bytes
    inter = [s for pair in zip(wgrad, dgrad[:len(wgrad)]) for s in pair]
    return seq(*steps, *inter, store_dw, *dgrad[len(wgrad):])
