"""Element-wise activations: forward, backward (recomputed from x, or from relu's INT8 mask) and inference.

Kinds (tr.core.ops.ACTIVATIONS) and derivatives, with PyTorch's conventions at the kinks:
relu max(x,0), d = [x>0];  tanh, d = 1-tanh^2;  sigmoid s, d = s(1-s);  silu x*s(x), d = s(1+x(1-s));
relu6 clamp(x,0,6), d = [0<x<6];  leaky_relu (slope 0.01), d = [x>0] + 0.01[x<=0];
hardswish x*clamp(x+3,0,6)/6, d = 0 (x<=-3), x/3+0.5 (-3<x<3), 1 (x>=3);  elu (alpha 1) x>0 ? x : e^x-1, d = e^min(x,0);
gelu (exact) x*Phi(x), d = Phi(x) + x*phi(x).
numpy has no erf: Phi uses the erfc approximation of Numerical Recipes (Press et al., 6.2; fractional error
< 1.2e-7 everywhere), computed from |x| so that Phi keeps its relative accuracy in the far left tail.
``act_fwd`` writes the INT8 mask [x > 0] whenever a mask tensor is given (relu's backward reads it).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import activation as rules

_F0 = np.float32(0)
_F1 = np.float32(1)
# Numerical Recipes erfc(z) ~= t*exp(-z*z + P(t)), t = 1/(1+z/2), z >= 0 (coefficients of P, low to high).
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)
_INV_SQRT2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


class _Tmp:
    """Hands out distinct scratch arrays of one shape, only as many as a kind needs."""

    def __init__(self, b: Binder, shape: tuple[int, ...]) -> None:
        self._b, self._shape = b, shape

    def take(self) -> np.ndarray:
        return self._b.scratch(self._shape)

    def take_bool(self) -> np.ndarray:
        return self._b.scratch(self._shape, np.bool_)


def _phi_cdf(x: np.ndarray, out: np.ndarray, t: np.ndarray, u: np.ndarray) -> None:
    """out = Phi(x) (standard normal CDF) = erfc(-x/sqrt 2)/2; t, u are scratch."""
    np.abs(x, out=u)
    np.multiply(u, np.float32(_INV_SQRT2), out=u)  # z = |x|/sqrt2
    np.multiply(u, np.float32(0.5), out=t)
    np.add(t, _F1, out=t)
    np.divide(_F1, t, out=t)  # t = 1/(1+z/2)
    np.multiply(t, np.float32(_ERFC[-1]), out=out)
    for coef in _ERFC[-2:0:-1]:
        np.add(out, np.float32(coef), out=out)
        np.multiply(out, t, out=out)
    np.add(out, np.float32(_ERFC[0]), out=out)
    np.multiply(u, u, out=u)
    np.subtract(out, u, out=out)
    np.exp(out, out=out)
    np.multiply(out, t, out=out)  # erfc(|x|/sqrt2)
    np.multiply(out, np.float32(0.5), out=out)  # Phi(-|x|)
    # Phi(x) = Phi(-|x|) for x < 0, 1 - Phi(-|x|) for x >= 0
    np.greater_equal(x, _F0, out=t)
    np.multiply(out, np.float32(-2), out=u)
    np.add(u, _F1, out=u)
    np.multiply(u, t, out=u)
    np.add(out, u, out=out)


def _sigmoid(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    np.exp(out, out=out)  # may overflow to inf for x < -88: 1/(1+inf) = 0, the right limit
    np.add(out, _F1, out=out)
    np.divide(_F1, out, out=out)


def _forward(kind: str, x: np.ndarray, y: np.ndarray, tmp: _Tmp) -> Step:
    if kind == "relu":
        return partial(np.maximum, x, _F0, out=y)
    if kind == "tanh":
        return partial(np.tanh, x, out=y)
    if kind == "sigmoid":
        return partial(_sigmoid, x, y)
    if kind == "relu6":
        return partial(np.clip, x, _F0, np.float32(6), out=y)
    if kind == "leaky_relu":
        t = tmp.take()

        def leaky() -> None:
            np.multiply(x, np.float32(0.01), out=t)
            np.maximum(x, t, out=y)

        return leaky
    if kind == "silu":
        t = tmp.take()

        def silu() -> None:
            _sigmoid(x, t)
            np.multiply(x, t, out=y)

        return silu
    if kind == "hardswish":
        t = tmp.take()

        def hardswish() -> None:
            np.add(x, np.float32(3), out=t)
            np.clip(t, _F0, np.float32(6), out=t)
            np.multiply(t, x, out=t)
            np.multiply(t, np.float32(1 / 6), out=y)

        return hardswish
    if kind == "elu":
        t = tmp.take()

        def elu() -> None:
            np.minimum(x, _F0, out=t)
            np.expm1(t, out=t)
            np.maximum(x, _F0, out=y)
            np.add(y, t, out=y)

        return elu
    if kind == "gelu":
        p, t, u = tmp.take(), tmp.take(), tmp.take()

        def gelu() -> None:
            _phi_cdf(x, p, t, u)
            np.multiply(x, p, out=y)

        return gelu
    raise AssertionError(kind)


def _derivative(kind: str, x: np.ndarray, d: np.ndarray, tmp: _Tmp) -> Step:
    """A step writing f'(x) into d (d must not share memory with x)."""
    if kind == "relu":
        return partial(np.greater, x, _F0, out=d)
    if kind == "tanh":

        def tanh() -> None:
            np.tanh(x, out=d)
            np.multiply(d, d, out=d)
            np.subtract(_F1, d, out=d)

        return tanh
    if kind in ("sigmoid", "silu"):
        t = tmp.take()

        def sig() -> None:
            _sigmoid(x, d)
            np.subtract(_F1, d, out=t)  # 1 - s
            if kind == "sigmoid":
                np.multiply(d, t, out=d)
            else:  # s * (1 + x (1 - s))
                np.multiply(t, x, out=t)
                np.add(t, _F1, out=t)
                np.multiply(d, t, out=d)

        return sig
    if kind == "relu6":
        t = tmp.take()

        def relu6() -> None:
            np.greater(x, _F0, out=d)
            np.less(x, np.float32(6), out=t)
            np.multiply(d, t, out=d)

        return relu6
    if kind == "leaky_relu":

        def leaky() -> None:
            np.greater(x, _F0, out=d)
            np.multiply(d, np.float32(0.99), out=d)
            np.add(d, np.float32(0.01), out=d)

        return leaky
    if kind == "hardswish":
        mask = tmp.take_bool()

        def hardswish() -> None:
            np.multiply(x, np.float32(1 / 3), out=d)
            np.add(d, np.float32(0.5), out=d)
            np.less_equal(x, np.float32(-3), out=mask)
            np.copyto(d, _F0, where=mask)
            np.greater_equal(x, np.float32(3), out=mask)
            np.copyto(d, _F1, where=mask)

        return hardswish
    if kind == "elu":

        def elu() -> None:
            np.minimum(x, _F0, out=d)
            np.exp(d, out=d)

        return elu
    if kind == "gelu":
        t, u = tmp.take(), tmp.take()

        def gelu() -> None:
            _phi_cdf(x, d, t, u)  # d = Phi(x)
            np.multiply(x, x, out=t)
            np.multiply(t, np.float32(-0.5), out=t)
            np.exp(t, out=t)
            np.multiply(t, np.float32(_INV_SQRT_2PI), out=t)  # phi(x)
            np.multiply(t, x, out=t)
            np.add(d, t, out=d)

        return gelu
    raise AssertionError(kind)


def _mask(b: Binder, n: int) -> np.ndarray:
    return b.view("mask", (n,)).view(np.bool_)  # values 0/1: the INT8 bytes read as booleans


def _fwd_steps(b: Binder, with_mask: bool) -> Step:
    r = rules.act_fwd(b, with_mask)
    kind, n = r.kind, r.n
    x, load_x = b.load("x", (n,))
    y, store_y = b.store("y", (n,))
    steps: list[Callable[[], None] | None] = [load_x]
    if r.mask:
        steps.append(partial(np.greater, x, _F0, out=_mask(b, n)))  # before y: y may not alias x, mask safe
    steps += [_forward(kind, x, y, _Tmp(b, (n,))), store_y]
    return seq(*steps)


@cpu_op("act_fwd")
def act_fwd(b: Binder) -> Step:
    return _fwd_steps(b, with_mask=True)


@cpu_op("act_inf")
def act_inf(b: Binder) -> Step:
    return _fwd_steps(b, with_mask=False)


@cpu_op("act_bwd")
def act_bwd(b: Binder) -> Step:
    r = rules.act_bwd(b)
    kind, n = r.kind, r.n
    dy, load_dy = b.load("dy", (n,))
    dx, store_dx = b.store("dx", (n,))
    if r.mask:
        return seq(load_dy, partial(np.multiply, dy, _mask(b, n), out=dx), store_dx)
    x, load_x = b.load("x", (n,))
    tmp = _Tmp(b, (n,))
    d = tmp.take()
    deriv = _derivative(kind, x, d, tmp)
    return seq(load_x, load_dy, deriv, partial(np.multiply, dy, d, out=dx), store_dx)

