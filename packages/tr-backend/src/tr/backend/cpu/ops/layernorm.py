"""Layer norm: each of the N*H*W rows of x normalised over its C values (argument rules: tr.backend.rules.layernorm).

Forward: mean = sum(x) / C and var = sum((x - mean)^2) / C in float64 (two passes, the deviations from the
float64 mean), rstd = 1/sqrt(var + eps) in float64; mean and rstd are rounded to float32 (the saved statistics)
and y = (((x - mean) * rstd) * gamma) + beta in float32, in that order. The backward recomputes
xhat = (x - mean) * rstd with the same operations, so it sees the forward's xhat bit for bit.

Backward, g = dy * gamma: dx = ((g - t1) - xhat * t2) * rstd with t1 = float32(sum_c(g) / C) and
t2 = float32(sum_c(g * xhat) / C), the row sums in float64; dgamma = sum over rows of float32(dy * xhat) and
dbeta = sum over rows of dy, float64 accumulators adding the rows in row order (numpy's axis-0 reduction: no
threads, a fixed order), so every run gives the same bytes. csrc/ops/layernorm.cu computes the same float32
expressions (compiled without FMA contraction) with the float64 sums in another fixed order.

FP16 and BF16 features are widened to float32 on load and rounded to nearest even on store by the Binder
(BF16 bit patterns through tr.backend.cpu.convert); gamma, beta, their gradients and the statistics are FP32.

The residual join fused in (tr.graph.passes.fuse_add_norm): with z, the row normalised is x + z added in float32 and
rounded to the feature dtype, add_fwd's operations, so the statistics and y are those of add_fwd then ln_fwd bit for
bit; with dx2, dx is rounded to its dtype and then dx2 added in float32 and rounded again, accumulate's operations
after ln_bwd. Either fused op gives the unfused pair's bytes in every dtype.
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.ops.bn import rounder
from tr.backend.rules.layernorm import ln_bwd_rules, ln_fwd_rules
from tr.core.dtype import DType


def _stats(b: Binder, name: str, rows: int, given: bool) -> tuple[np.ndarray, Step | None]:
    """The (rows, 1) float32 view of a saved statistic, or scratch for inference (which saves none)."""
    if given:
        return b.store(name, (rows, 1))
    return b.scratch((rows, 1)), None


@cpu_op("ln_fwd")
def ln_fwd(b: Binder) -> Step:
    r = ln_fwd_rules(b)
    m, c, eps = r.rows, r.c, r.eps
    first, load_x = b.load("x", (m, c))
    x = first  # the row normalised
    load_z = store_sum = join = None
    if r.residual:  # the row is x + z as add_fwd writes it: a float32 add rounded to the feature dtype
        z, load_z = b.load("z", (m, c))
        x, store_sum = b.store("sum", (m, c)) if r.sum else (b.scratch((m, c)), None)
        half = b.dtype("x") is not DType.FP32
        stored = rounder(b, (m, c), b.dtype("x"))
        joined = x  # (sum may share x's or z's bytes: both are read before it is stored)

        def join() -> None:
            np.add(first, z, out=joined)
            if half:
                np.copyto(joined, stored(joined))

    y, store_y = b.store("y", (m, c))
    gamma, _ = b.load("gamma", (c,))  # FP32: the arena views themselves
    beta, _ = b.load("beta", (c,))
    mean, store_m = _stats(b, "saved_mean", m, r.stats)
    rstd, store_r = _stats(b, "saved_rstd", m, r.stats)
    dev = b.scratch((m, c), np.float64)
    s = b.scratch((m, 1), np.float64)

    def core() -> None:
        np.sum(x, axis=1, dtype=np.float64, out=s[:, 0])
        np.divide(s, c, out=s)
        np.copyto(mean, s)
        np.subtract(x, s, out=dev)  # float64 deviations from the float64 mean
        np.multiply(dev, dev, out=dev)
        np.sum(dev, axis=1, out=s[:, 0])
        np.divide(s, c, out=s)
        np.add(s, eps, out=s)
        np.sqrt(s, out=s)
        np.divide(1.0, s, out=s)
        np.copyto(rstd, s)
        np.subtract(x, mean, out=y)
        np.multiply(y, rstd, out=y)
        np.multiply(y, gamma, out=y)
        np.add(y, beta, out=y)

    return seq(load_x, load_z, join, core, store_sum, store_y, store_m, store_r)


@cpu_op("ln_bwd")
def ln_bwd(b: Binder) -> Step:
    r = ln_bwd_rules(b)
    m, c = r.rows, r.c
    x, load_x = b.load("x", (m, c))
    dy, load_dy = b.load("dy", (m, c))
    gamma, _ = b.load("gamma", (c,))
    mean, _ = b.load("saved_mean", (m, 1))
    rstd, _ = b.load("saved_rstd", (m, 1))
    dgamma, _ = b.store("dgamma", (c,))
    dbeta, _ = b.store("dbeta", (c,))
    dx, store_dx = b.store("dx", (m, c)) if r.dx else (None, None)
    dx2, load_dx2 = b.load("dx2", (m, c)) if r.residual else (None, None)
    # With dx2, the layer norm's own gradient goes to scratch first: dx may share dx2's bytes (an FP32 dx is the
    # arena view itself), and dx2 must be read before anything is written there.
    own = b.scratch((m, c)) if dx2 is not None else dx
    stored = rounder(b, (m, c), b.dtype("x")) if dx2 is not None else None
    xhat = b.scratch((m, c))
    g = b.scratch((m, c))
    col = b.scratch((c,), np.float64)
    s = b.scratch((m, 1), np.float64)
    t = b.scratch((m, 1))

    def core() -> None:
        np.subtract(x, mean, out=xhat)
        np.multiply(xhat, rstd, out=xhat)
        np.multiply(dy, xhat, out=g)
        np.sum(g, axis=0, dtype=np.float64, out=col)
        np.copyto(dgamma, col)
        np.sum(dy, axis=0, dtype=np.float64, out=col)
        np.copyto(dbeta, col)
        if dx is None:
            return
        np.multiply(dy, gamma, out=g)
        np.multiply(g, xhat, out=own)  # g * xhat, summed before dx is written
        np.sum(own, axis=1, dtype=np.float64, out=s[:, 0])
        np.divide(s, c, out=s)
        np.copyto(t, s)  # t2
        np.multiply(xhat, t, out=xhat)
        np.sum(g, axis=1, dtype=np.float64, out=s[:, 0])
        np.divide(s, c, out=s)
        np.copyto(t, s)  # t1
        np.subtract(g, t, out=g)
        np.subtract(g, xhat, out=g)
        np.multiply(g, rstd, out=own)
        if dx2 is not None:  # accumulate's operations on the stored dx: one float32 add, rounded on store
            np.add(stored(own), dx2, out=dx)

    return seq(load_x, load_dy, load_dx2, core, store_dx)
