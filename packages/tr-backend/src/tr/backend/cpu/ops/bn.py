"""Batch normalisation over N*H*W per channel, with the activation and residual join that follow it fused in.

Statistics are two-pass (mean, then the mean of squared deviations) with float64 accumulators, so they do
not drift with large N*H*W. Training: saved_inv_std = 1/sqrt(var_biased + eps); running statistics
out = (1-m)*in + m*batch with the unbiased batch variance (M/(M-1), M = N*H*W; M = 1 keeps the biased 0).
Forward: y = act((x - mean) * (gamma * inv_std) + beta + z), in that order of float32 operations, act None,
relu or relu6 (clip to [0, 6]); the backward recomputes the activation's mask from x with the same operations
(and the rounding of y's dtype), so it needs neither y nor a mask unless a residual was added. relu passes
where the stored pre-activation is > 0, relu6 where it is strictly inside (0, 6) (torch's hardtanh
backward); silu (y = silu(pre), rounded once) takes its slope at the same unrounded pre-activation, so the
fused silu is one rounding closer to float32 than bn then act_fwd. Argument rules: tr.backend.rules.bn.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.convert import converter
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules.bn import bn_bwd_rules, bn_fwd_rules, bn_inf_rules, bn_update_eq_rules
from tr.core.dtype import DType


def rounder(b: Binder, shape: tuple[int, ...], dtype: DType):
    """A function giving its float32 argument rounded to ``dtype`` and widened again (the value a tensor of
    that dtype would hold); its buffers are taken now, at capture."""
    if dtype is DType.FP32:
        return lambda v: v
    narrow, widen = converter(DType.FP32, dtype), converter(dtype, DType.FP32)
    raw, out = b.scratch(shape, dtype.np_dtype), b.scratch(shape)

    def rounded(v: np.ndarray) -> np.ndarray:
        narrow(v, raw)
        widen(raw, out)
        return out

    return rounded


class TrainStats:
    """The per-channel side of a training forward: loads and stores of gamma, beta, the running and saved
    statistics, and ``normalize(x, out)``: statistics of x, then out = (x - mean) * (gamma * inv_std) + beta."""

    def __init__(self, b: Binder, m: int, c: int, momentum: float, eps: float) -> None:
        self.m, self.c, self.mom, self.eps = m, c, momentum, eps
        self.gamma, load_g = b.load("gamma", (c,))
        self.beta, load_b = b.load("beta", (c,))
        self.mean_in, load_mi = b.load("mean_in", (c,))
        self.var_in, load_vi = b.load("var_in", (c,))
        self.mean_out, store_mo = b.store("mean_out", (c,))
        self.var_out, store_vo = b.store("var_out", (c,))
        self.smean, store_sm = b.store("saved_mean", (c,))
        self.sinv, store_si = b.store("saved_inv_std", (c,))
        self.loads = [load_g, load_b, load_mi, load_vi]
        self.stores = [store_mo, store_vo, store_sm, store_si]
        self.dev = b.scratch((m, c))
        self.s1 = b.scratch((c,), np.float64)
        self.s2 = b.scratch((c,), np.float64)
        self.a = b.scratch((c,))

    def normalize(self, x: np.ndarray, out: np.ndarray) -> None:
        m_, mom, s1, s2, dev = self.m, self.mom, self.s1, self.s2, self.dev
        unbias = m_ / (m_ - 1) if m_ > 1 else 1.0
        np.sum(x, axis=0, dtype=np.float64, out=s1)
        np.multiply(s1, 1.0 / m_, out=s1)
        np.copyto(self.smean, s1)
        np.subtract(x, self.smean, out=dev)
        np.multiply(dev, dev, out=out)  # out is free until the end: use it for the squares
        np.sum(out, axis=0, dtype=np.float64, out=s2)
        np.multiply(s2, 1.0 / m_, out=s2)
        np.copyto(self.var_out, (1.0 - mom) * self.var_in + (mom * unbias) * s2)
        np.copyto(self.mean_out, (1.0 - mom) * self.mean_in + mom * s1)
        np.add(s2, self.eps, out=s2)
        np.sqrt(s2, out=s2)
        np.divide(1.0, s2, out=s2)
        np.copyto(self.sinv, s2)
        np.multiply(self.gamma, self.sinv, out=self.a)
        np.multiply(dev, self.a, out=out)
        np.add(out, self.beta, out=out)


class TrainGrad:
    """The per-channel side of a training backward: the relu mask recomputed from x (``relu_passed``) and
    ``backward(x, g, dx)``: dbeta, dgamma and dx from the already masked output gradient g."""

    def __init__(self, b: Binder, m: int, c: int, with_beta: bool) -> None:
        self.m = m
        self.gamma, load_g = b.load("gamma", (c,))
        self.mean, load_m = b.load("saved_mean", (c,))
        self.inv, load_i = b.load("saved_inv_std", (c,))
        self.beta, load_b = b.load("beta", (c,)) if with_beta else (None, None)
        self.dgamma, store_dg = b.store("dgamma", (c,))
        self.dbeta, store_db = b.store("dbeta", (c,))
        self.loads = [load_g, load_m, load_i, load_b]
        self.stores = [store_dg, store_db]
        self.xhat = b.scratch((m, c))
        self.s1 = b.scratch((c,), np.float64)
        self.s2 = b.scratch((c,), np.float64)
        self.k = b.scratch((c,))
        self.t1 = b.scratch((c,))
        self.t2 = b.scratch((c,))
        self.stored = rounder(b, (m, c), b.dtype("x")) if with_beta else None

    def relu_passed(self, x: np.ndarray, out: np.ndarray, act: str = "relu") -> None:
        """out = 1 where the forward's activation passed its input, as it rounded the pre-activation into y,
        else 0."""
        np.multiply(self.gamma, self.inv, out=self.k)
        np.subtract(x, self.mean, out=out)
        np.multiply(out, self.k, out=out)
        np.add(out, self.beta, out=out)
        passed(out if act == "silu" else self.stored(out), act, out)  # silu's slope at the unrounded input

    def backward(self, x: np.ndarray, g: np.ndarray, dx: np.ndarray) -> None:
        xhat, s1, s2 = self.xhat, self.s1, self.s2
        np.subtract(x, self.mean, out=xhat)  # x is not read after this: dx may share its bytes
        np.multiply(xhat, self.inv, out=xhat)
        np.sum(g, axis=0, dtype=np.float64, out=s1)
        np.multiply(g, xhat, out=dx)
        np.sum(dx, axis=0, dtype=np.float64, out=s2)
        np.copyto(self.dbeta, s1)
        np.copyto(self.dgamma, s2)
        # dx = gamma*inv * (g - dbeta/M - xhat*dgamma/M)
        np.multiply(s1, 1.0 / self.m, out=s1)
        np.multiply(s2, 1.0 / self.m, out=s2)
        np.copyto(self.t1, s1)
        np.copyto(self.t2, s2)
        np.multiply(self.gamma, self.inv, out=self.k)
        np.multiply(xhat, self.t2, out=xhat)
        np.subtract(g, xhat, out=xhat)
        np.subtract(xhat, self.t1, out=xhat)
        np.multiply(xhat, self.k, out=dx)


def activate(y: np.ndarray, act: str | None) -> None:
    """The fused activation in place: None, relu (NaN stays NaN), relu6 or silu (act_fwd's operations)."""
    if act == "relu":
        np.maximum(y, np.float32(0), out=y)
    elif act == "relu6":
        np.clip(y, np.float32(0), np.float32(6), out=y)
    elif act == "silu":
        np.multiply(y, _sigmoid(y), out=y)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    s = np.negative(v)
    np.exp(s, out=s)  # may overflow to inf for v < -88: 1/(1+inf) = 0, the right limit
    np.add(s, np.float32(1), out=s)
    return np.divide(np.float32(1), s, out=s)


def passed(v: np.ndarray, act: str, out: np.ndarray) -> None:
    """out = the activation's derivative at (stored) value v: relu [v > 0], relu6 [0 < v < 6], silu
    s (1 + v (1 - s)) with s = sigmoid(v), as act_bwd computes it."""
    if act == "relu6":
        np.copyto(out, (v > 0) & (v < 6))
    elif act == "silu":
        s = _sigmoid(v)
        t = np.subtract(np.float32(1), s)
        np.multiply(t, v, out=t)
        np.add(t, np.float32(1), out=t)
        np.multiply(s, t, out=out)
    else:
        np.greater(v, np.float32(0), out=out)


def _residual(b: Binder, m: int, c: int, y: np.ndarray) -> tuple[np.ndarray, Step | None]:
    """z as an array that writing y does not change: y may take z's bytes (the catalogue allows it)."""
    z, load_z = b.load("z", (m, c))
    if not np.shares_memory(z, y):
        return z, load_z
    keep = b.scratch((m, c))
    return keep, seq(load_z, partial(np.copyto, keep, z))


@cpu_op("bn_fwd")
def bn_fwd(b: Binder) -> Step:
    r = bn_fwd_rules(b)
    x, load_x = b.load("x", (r.m, r.c))
    y, store_y = b.store("y", (r.m, r.c))
    z, load_z = _residual(b, r.m, r.c, y) if r.residual else (None, None)
    stats = TrainStats(b, r.m, r.c, r.momentum, r.eps)

    def core() -> None:
        stats.normalize(x, y)
        if z is not None:
            np.add(y, z, out=y)
        activate(y, r.act)

    return seq(load_x, load_z, *stats.loads, core, store_y, *stats.stores)


@cpu_op("bn_bwd")
def bn_bwd(b: Binder) -> Step:
    r = bn_bwd_rules(b)
    m_, c = r.m, r.c
    x, load_x = b.load("x", (m_, c))
    dy, load_dy = b.load("dy", (m_, c))
    dx, store_dx = b.store("dx", (m_, c))
    y, load_y = b.load("y", (m_, c)) if r.mask == "y" else (None, None)
    dz, store_dz = b.store("dz", (m_, c)) if r.dz else (None, None)
    dy2, load_dy2 = b.load("dy2", (m_, c)) if r.dy2 else (None, None)
    grad = TrainGrad(b, m_, c, with_beta=r.mask == "x")
    g = b.scratch((m_, c)) if r.mask or r.dy2 else dy
    mask = b.scratch((m_, c)) if r.mask else None
    summed = rounder(b, (m_, c), b.dtype("dy")) if r.dy2 else None

    def core() -> None:
        if dy2 is not None:  # the branch point's sum, as an accumulate op would have stored it
            np.add(dy, dy2, out=g)
            np.copyto(g, summed(g))
        src = g if dy2 is not None else dy
        if r.mask == "y":
            passed(y, r.act, mask)
        elif r.mask == "x":
            grad.relu_passed(x, mask, r.act)
        if r.mask:
            np.multiply(src, mask, out=g)  # g = dy where the activation passed its input
        if dz is not None:
            np.copyto(dz, g)
        grad.backward(x, g, dx)

    return seq(load_x, load_dy, load_dy2, load_y, *grad.loads, core, store_dz, store_dx, *grad.stores)


@cpu_op("bn_inf")
def bn_inf(b: Binder) -> Step:
    r = bn_inf_rules(b)
    x, load_x = b.load("x", (r.m, r.c))
    y, store_y = b.store("y", (r.m, r.c))
    z, load_z = _residual(b, r.m, r.c, y) if r.residual else (None, None)
    scale, load_s = b.load("scale", (r.c,))
    bias, load_b = b.load("bias", (r.c,))

    def core() -> None:
        np.multiply(x, scale, out=y)
        np.add(y, bias, out=y)
        if z is not None:
            np.add(y, z, out=y)
        activate(y, r.act)

    return seq(load_x, load_z, load_s, load_b, core, store_y)


@cpu_op("bn_update_eq")
def bn_update_eq(b: Binder) -> Step:
    c, eps = bn_update_eq_rules(b)
    gamma, load_g = b.load("gamma", (c,))
    beta, load_b = b.load("beta", (c,))
    mean, load_m = b.load("mean", (c,))
    var, load_v = b.load("var", (c,))
    scale, store_s = b.store("scale", (c,))
    bias, store_b = b.store("bias", (c,))

    def core() -> None:
        np.add(var, np.float32(eps), out=scale)
        np.sqrt(scale, out=scale)
        np.divide(gamma, scale, out=scale)
        np.multiply(mean, scale, out=bias)
        np.subtract(beta, bias, out=bias)

    return seq(load_g, load_b, load_m, load_v, core, store_s, store_b)
