"""Batch normalisation over N*H*W per channel (training, backward, inference, folded inference params).

Statistics are two-pass (mean, then the mean of squared deviations) with float64 accumulators, so they do
not drift with large N*H*W. Training: saved_inv_std = 1/sqrt(var_biased + eps); running statistics
out = (1-m)*in + m*batch with the unbiased batch variance (M/(M-1), M = N*H*W; M = 1 keeps the biased 0).
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.core.errors import ShapeError


def _channels(b: Binder, x: str, *per_channel: str) -> tuple[int, int]:
    xt = b.tensor(x)
    c = xt.shape.c
    for name in per_channel:
        if b.has(name):
            b.expect_numel(name, c)
    return xt.numel // c, c


def _same_shape(b: Binder, a: str, c: str) -> None:
    if b.tensor(a).shape != b.tensor(c).shape:
        b.fail(f"{c} {b.tensor(c).shape} must have {a}'s shape {b.tensor(a).shape}", ShapeError)


@cpu_op("bn_fwd")
def bn_fwd(b: Binder) -> Step:
    m_, c = _channels(b, "x", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean",
                      "saved_inv_std")
    _same_shape(b, "x", "y")
    mom = b.float_attr("momentum", 0.1, 0.0, 1.0)
    eps = b.float_attr("eps", 1e-5, 0.0)
    x, load_x = b.load("x", (m_, c))
    y, store_y = b.store("y", (m_, c))
    gamma, load_g = b.load("gamma", (c,))
    beta, load_b = b.load("beta", (c,))
    mean_in, load_mi = b.load("mean_in", (c,))
    var_in, load_vi = b.load("var_in", (c,))
    mean_out, store_mo = b.store("mean_out", (c,))
    var_out, store_vo = b.store("var_out", (c,))
    smean, store_sm = b.store("saved_mean", (c,))
    sinv, store_si = b.store("saved_inv_std", (c,))
    dev = b.scratch((m_, c))
    s1 = b.scratch((c,), np.float64)
    s2 = b.scratch((c,), np.float64)
    a = b.scratch((c,))
    inv_m = 1.0 / m_
    unbias = m_ / (m_ - 1) if m_ > 1 else 1.0

    def core() -> None:
        np.sum(x, axis=0, dtype=np.float64, out=s1)
        np.multiply(s1, inv_m, out=s1)
        np.copyto(smean, s1)
        np.subtract(x, smean, out=dev)
        np.multiply(dev, dev, out=y)  # y is free until the end: use it for the squares
        np.sum(y, axis=0, dtype=np.float64, out=s2)
        np.multiply(s2, inv_m, out=s2)
        np.copyto(var_out, (1.0 - mom) * var_in + (mom * unbias) * s2)
        np.copyto(mean_out, (1.0 - mom) * mean_in + mom * s1)
        np.add(s2, eps, out=s2)
        np.sqrt(s2, out=s2)
        np.divide(1.0, s2, out=s2)
        np.copyto(sinv, s2)
        np.multiply(gamma, sinv, out=a)
        np.multiply(dev, a, out=y)
        np.add(y, beta, out=y)

    return seq(load_x, load_g, load_b, load_mi, load_vi, core, store_y, store_mo, store_vo, store_sm, store_si)


@cpu_op("bn_bwd")
def bn_bwd(b: Binder) -> Step:
    m_, c = _channels(b, "x", "gamma", "saved_mean", "saved_inv_std", "dgamma", "dbeta")
    _same_shape(b, "x", "dy")
    _same_shape(b, "x", "dx")
    x, load_x = b.load("x", (m_, c))
    dy, load_dy = b.load("dy", (m_, c))
    dx, store_dx = b.store("dx", (m_, c))
    gamma, load_g = b.load("gamma", (c,))
    mean, load_m = b.load("saved_mean", (c,))
    inv, load_i = b.load("saved_inv_std", (c,))
    dgamma, store_dg = b.store("dgamma", (c,))
    dbeta, store_db = b.store("dbeta", (c,))
    xhat = b.scratch((m_, c))
    s1 = b.scratch((c,), np.float64)
    s2 = b.scratch((c,), np.float64)
    k = b.scratch((c,))
    t1 = b.scratch((c,))
    t2 = b.scratch((c,))
    inv_m = 1.0 / m_

    def core() -> None:
        np.subtract(x, mean, out=xhat)  # x is not read after this: dx may share its bytes
        np.multiply(xhat, inv, out=xhat)
        np.sum(dy, axis=0, dtype=np.float64, out=s1)
        np.multiply(dy, xhat, out=dx)
        np.sum(dx, axis=0, dtype=np.float64, out=s2)
        np.copyto(dbeta, s1)
        np.copyto(dgamma, s2)
        # dx = gamma*inv * (dy - dbeta/M - xhat*dgamma/M)
        np.multiply(s1, inv_m, out=s1)
        np.multiply(s2, inv_m, out=s2)
        np.copyto(t1, s1)
        np.copyto(t2, s2)
        np.multiply(gamma, inv, out=k)
        np.multiply(xhat, t2, out=xhat)
        np.subtract(dy, xhat, out=xhat)
        np.subtract(xhat, t1, out=xhat)
        np.multiply(xhat, k, out=dx)

    return seq(load_x, load_dy, load_g, load_m, load_i, core, store_dx, store_dg, store_db)


@cpu_op("bn_inf")
def bn_inf(b: Binder) -> Step:
    m_, c = _channels(b, "x", "scale", "bias")
    _same_shape(b, "x", "y")
    x, load_x = b.load("x", (m_, c))
    y, store_y = b.store("y", (m_, c))
    scale, load_s = b.load("scale", (c,))
    bias, load_b = b.load("bias", (c,))

    def core() -> None:
        np.multiply(x, scale, out=y)
        np.add(y, bias, out=y)

    return seq(load_x, load_s, load_b, core, store_y)


@cpu_op("bn_update_eq")
def bn_update_eq(b: Binder) -> Step:
    c = b.tensor("gamma").numel
    for name in ("beta", "mean", "var", "scale", "bias"):
        b.expect_numel(name, c)
    eps = b.float_attr("eps", 1e-5, 0.0)
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
