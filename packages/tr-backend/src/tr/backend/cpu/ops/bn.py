"""Batch normalisation over N*H*W per channel, with the activation and residual join that follow it fused in.

Statistics are two-pass (mean, then the mean of squared deviations) with float64 accumulators, so they do
not drift with large N*H*W. Training: saved_inv_std = 1/sqrt(var_biased + eps); running statistics
out = (1-m)*in + m*batch with the unbiased batch variance (M/(M-1), M = N*H*W; M = 1 keeps the biased 0).
Forward: y = act((x - mean) * (gamma * inv_std) + beta + z), in that order of float32 operations; the
backward recomputes the relu mask from x with the same operations (and the rounding of y's dtype), so it
needs neither y nor a mask unless a residual was added. Argument rules: tr.backend.bn_rules.
"""

from __future__ import annotations

import numpy as np

from tr.backend.bn_rules import bn_bwd_rules, bn_fwd_rules, bn_inf_rules, bn_update_eq_rules
from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.convert import bf16_to_f32, f32_to_bf16
from tr.backend.cpu.ops._register import cpu_op
from tr.core.dtype import DType


def _rounder(b: Binder, shape: tuple[int, ...], dtype: DType):
    """A function giving its float32 argument rounded to ``dtype`` and widened again (the value a tensor of
    that dtype would hold); its buffers are taken now, at capture."""
    if dtype is DType.FP32:
        return lambda v: v
    out = b.scratch(shape)
    if dtype is DType.FP16:
        half = b.scratch(shape, np.float16)

        def to_fp16(v: np.ndarray) -> np.ndarray:
            np.copyto(half, v, casting="same_kind")
            np.copyto(out, half)
            return out

        return to_fp16
    bits = b.scratch(shape, np.uint16)

    def to_bf16(v: np.ndarray) -> np.ndarray:
        f32_to_bf16(v, bits)
        bf16_to_f32(bits, out)
        return out

    return to_bf16


@cpu_op("bn_fwd")
def bn_fwd(b: Binder) -> Step:
    r = bn_fwd_rules(b)
    m_, c, mom, eps = r.m, r.c, r.momentum, r.eps
    x, load_x = b.load("x", (m_, c))
    y, store_y = b.store("y", (m_, c))
    z, load_z = b.load("z", (m_, c)) if r.residual else (None, None)
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
        if z is not None:
            np.add(y, z, out=y)
        if r.relu:
            np.maximum(y, np.float32(0), out=y)

    return seq(load_x, load_z, load_g, load_b, load_mi, load_vi, core, store_y, store_mo, store_vo, store_sm,
               store_si)


@cpu_op("bn_bwd")
def bn_bwd(b: Binder) -> Step:
    r = bn_bwd_rules(b)
    m_, c = r.m, r.c
    fdt = b.dtype("x")
    x, load_x = b.load("x", (m_, c))
    dy, load_dy = b.load("dy", (m_, c))
    dx, store_dx = b.store("dx", (m_, c))
    gamma, load_g = b.load("gamma", (c,))
    mean, load_m = b.load("saved_mean", (c,))
    inv, load_i = b.load("saved_inv_std", (c,))
    beta, load_b = b.load("beta", (c,)) if r.mask == "x" else (None, None)
    y, load_y = b.load("y", (m_, c)) if r.mask == "y" else (None, None)
    dz, store_dz = b.store("dz", (m_, c)) if r.dz else (None, None)
    stored = _rounder(b, (m_, c), fdt) if r.mask == "x" else None
    dgamma, store_dg = b.store("dgamma", (c,))
    dbeta, store_db = b.store("dbeta", (c,))
    xhat = b.scratch((m_, c))
    g = b.scratch((m_, c)) if r.mask else dy
    s1 = b.scratch((c,), np.float64)
    s2 = b.scratch((c,), np.float64)
    k = b.scratch((c,))
    t1 = b.scratch((c,))
    t2 = b.scratch((c,))
    inv_m = 1.0 / m_

    def masked() -> None:
        """g = dy where the forward's relu passed its input (y > 0), else 0."""
        if r.mask == "y":
            np.greater(y, np.float32(0), out=xhat)
        else:  # the forward's pre-activation, as it rounded it into y
            np.multiply(gamma, inv, out=k)
            np.subtract(x, mean, out=xhat)
            np.multiply(xhat, k, out=xhat)
            np.add(xhat, beta, out=xhat)
            np.greater(stored(xhat), np.float32(0), out=xhat)
        np.multiply(dy, xhat, out=g)

    def core() -> None:
        if r.mask:
            masked()
        if dz is not None:
            np.copyto(dz, g)
        np.subtract(x, mean, out=xhat)  # x is not read after this: dx may share its bytes
        np.multiply(xhat, inv, out=xhat)
        np.sum(g, axis=0, dtype=np.float64, out=s1)
        np.multiply(g, xhat, out=dx)
        np.sum(dx, axis=0, dtype=np.float64, out=s2)
        np.copyto(dbeta, s1)
        np.copyto(dgamma, s2)
        # dx = gamma*inv * (g - dbeta/M - xhat*dgamma/M)
        np.multiply(s1, inv_m, out=s1)
        np.multiply(s2, inv_m, out=s2)
        np.copyto(t1, s1)
        np.copyto(t2, s2)
        np.multiply(gamma, inv, out=k)
        np.multiply(xhat, t2, out=xhat)
        np.subtract(g, xhat, out=xhat)
        np.subtract(xhat, t1, out=xhat)
        np.multiply(xhat, k, out=dx)

    return seq(load_x, load_dy, load_y, load_g, load_b, load_m, load_i, core, store_dz, store_dx, store_dg,
               store_db)


@cpu_op("bn_inf")
def bn_inf(b: Binder) -> Step:
    r = bn_inf_rules(b)
    x, load_x = b.load("x", (r.m, r.c))
    y, store_y = b.store("y", (r.m, r.c))
    z, load_z = b.load("z", (r.m, r.c)) if r.residual else (None, None)
    scale, load_s = b.load("scale", (r.c,))
    bias, load_b = b.load("bias", (r.c,))

    def core() -> None:
        np.multiply(x, scale, out=y)
        np.add(y, bias, out=y)
        if z is not None:
            np.add(y, z, out=y)
        if r.relu:
            np.maximum(y, np.float32(0), out=y)

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
