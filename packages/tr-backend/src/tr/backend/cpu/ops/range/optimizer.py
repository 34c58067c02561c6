"""range_optimizer: one update over a whole byte range of FP32 weights (SEED_SYSTEM.md §7).

g = grad / grad_scale[0]; nothing happens when flag[0] != 0 (a NaN/Inf step is skipped on the device).
  sgd:       w <- w(1 - lr wd) - lr g
  momentum:  m <- b1 m + g;  w <- w(1 - lr wd) - lr m               (no dampening; decay not folded in m)
  nesterov:  m <- b1 m + g;  w <- w(1 - lr wd) - lr (b1 m + g)
  adam (L2): g' = g + wd w;  m <- b1 m + (1-b1) g';  v <- b2 v + (1-b2) g'^2;
             w <- w - lr (m bc1) / (sqrt(v bc2) + eps),  bc1 = 1/(1-b1^t), bc2 = 1/(1-b2^t), t = step[0] + 1
  adamw:     w <- w(1 - lr wd) first, then adam with g (no L2 term)
Every array operation writes into the range or a preallocated scratch (``out=``): no allocation per step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import range as rules
from tr.core.ops import OPTIMIZER_RULES

_F = np.float32


def _scaled(g: np.ndarray, inv: float, out: np.ndarray) -> np.ndarray:
    """g / grad_scale, without a pass over memory when the scale is 1."""
    if inv == 1.0:
        return g
    np.multiply(g, _F(inv), out=out)
    return out


def _sgd(w, g, m, v, tmp, tmp2, b1, b2, eps, wd) -> Callable[[float, float, int], None]:
    def update(lr: float, inv: float, t: int) -> None:
        if wd:
            np.multiply(w, _F(1.0 - lr * wd), out=w)
        np.multiply(g, _F(lr * inv), out=tmp)
        np.subtract(w, tmp, out=w)

    return update


def _momentum(w, g, m, v, tmp, tmp2, b1, b2, eps, wd, nesterov: bool = False) -> Callable[[float, float, int], None]:
    beta = _F(b1)

    def update(lr: float, inv: float, t: int) -> None:
        gs = _scaled(g, inv, tmp)
        np.multiply(m, beta, out=m)
        np.add(m, gs, out=m)
        if wd:
            np.multiply(w, _F(1.0 - lr * wd), out=w)
        if nesterov:  # step = b1 m + g
            np.multiply(m, beta, out=tmp2)
            np.add(tmp2, gs, out=tmp2)
            np.multiply(tmp2, _F(lr), out=tmp2)
        else:
            np.multiply(m, _F(lr), out=tmp2)
        np.subtract(w, tmp2, out=w)

    return update


def _nesterov(*args) -> Callable[[float, float, int], None]:
    return _momentum(*args, nesterov=True)


def _adam(w, g, m, v, tmp, tmp2, b1, b2, eps, wd, decoupled: bool = False) -> Callable[[float, float, int], None]:
    fb1, fb2, c1, c2, feps = _F(b1), _F(b2), _F(1.0 - b1), _F(1.0 - b2), _F(eps)

    def update(lr: float, inv: float, t: int) -> None:
        bc1 = 1.0 / (1.0 - b1 ** t)
        bc2 = 1.0 / (1.0 - b2 ** t)
        if decoupled:
            if wd:
                np.multiply(w, _F(1.0 - lr * wd), out=w)
            gp = _scaled(g, inv, tmp)
        else:
            np.multiply(g, _F(inv), out=tmp)
            if wd:
                np.multiply(w, _F(wd), out=tmp2)
                np.add(tmp, tmp2, out=tmp)
            gp = tmp
        np.multiply(gp, c1, out=tmp2)
        np.multiply(m, fb1, out=m)
        np.add(m, tmp2, out=m)
        np.multiply(gp, gp, out=tmp2)
        np.multiply(tmp2, c2, out=tmp2)
        np.multiply(v, fb2, out=v)
        np.add(v, tmp2, out=v)
        np.multiply(v, _F(bc2), out=tmp2)
        np.sqrt(tmp2, out=tmp2)
        np.add(tmp2, feps, out=tmp2)
        np.multiply(m, _F(lr * bc1), out=tmp)
        np.divide(tmp, tmp2, out=tmp)
        np.subtract(w, tmp, out=w)

    return update


def _adamw(*args) -> Callable[[float, float, int], None]:
    return _adam(*args, decoupled=True)


_RULES = {"sgd": _sgd, "momentum": _momentum, "nesterov": _nesterov, "adam": _adam, "adamw": _adamw}
assert set(_RULES) == set(OPTIMIZER_RULES)


@cpu_op("range_optimizer")
def range_optimizer(b: Binder) -> Step | None:
    r = rules.range_optimizer(b)
    w, g = b.span("w", np.float32), b.span("g", np.float32)
    m = b.span("m", np.float32) if r.m else None
    v = b.span("v", np.float32) if r.v else None
    return _update(b, r, w, g, m, v)


@cpu_op("tensor_optimizer")
def tensor_optimizer(b: Binder) -> Step | None:
    r = rules.tensor_optimizer(b)
    return _update(b, r, b.flat("w"), b.flat("g"), b.flat("m") if r.m else None, b.flat("v") if r.v else None)


def _update(b: Binder, r: rules.Optimizer, w: np.ndarray, g: np.ndarray, m: np.ndarray | None,
             v: np.ndarray | None) -> Step | None:
    """The rule's update of ``w`` from ``g`` (and the moments), over blocks spread on threads."""
    rule, b1, b2, eps, wd, adam = r.rule, r.beta1, r.beta2, r.eps, r.weight_decay, r.adam
    if not w.size:
        return None
    lr, flag, gscale = b.flat("lr"), b.flat("flag"), b.flat("grad_scale")
    step = b.flat("step") if adam else None
    tmp, tmp2 = b.scratch(w.shape), b.scratch(w.shape)
    # Blocks small enough that the rule's ~10 passes stay in cache, spread over threads (numpy releases
    # the GIL in ufuncs). Element-wise, so the result does not depend on the split.
    blocks = [_RULES[rule](w[a:z], g[a:z], None if m is None else m[a:z], None if v is None else v[a:z],
                           tmp[a:z], tmp2[a:z], b1, b2, eps, wd)
              for a, z in _blocks(w.size)]
    groups = [blocks[i::_threads()] for i in range(min(_threads(), len(blocks)))]

    def run_group(group, lr_: float, inv: float, t: int) -> None:
        for update in group:
            update(lr_, inv, t)

    def run() -> None:
        if flag[0]:
            return
        rate = float(lr[0]) * r.lr_scale  # (a parameter group's multiplier; 1: the table's rate as it is)
        args = (rate, 1.0 / float(gscale[0]), int(step[0]) + 1 if step is not None else 0)
        helpers = [_pool().submit(run_group, grp, *args) for grp in groups[1:]]
        run_group(groups[0], *args)
        for f in helpers:
            f.result()

    return run


_BLOCK = 1 << 17  # elements: ~0.5 MB per array, so a block's passes stay in L2/L3
_POOL: ThreadPoolExecutor | None = None


def _blocks(n: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + _BLOCK)) for a in range(0, n, _BLOCK)]


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(1, _threads() - 1), thread_name_prefix="tr-optimizer")
    return _POOL
