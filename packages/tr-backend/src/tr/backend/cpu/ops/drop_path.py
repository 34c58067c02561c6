"""Stochastic depth (drop path) with a counter-based mask: one keep decision a sample, identical on every backend.

As dropout (tr.backend.cpu.ops.dropout), ``drop_path_fwd`` first advances the INT32[2] seed (one little-endian
uint64), seed <- splitmix64(seed), and stores it back, so every layer and step draws afresh with no host
involvement; then sample n (x's first dimension) is kept iff tr.core.philox.uniform(seed, n) >= p. y[n] = x[n]/(1-p)
where kept, else 0 (also for inf or NaN values: the branch is dropped, not multiplied by 0); the mask is INT8 [N].
Backward: dx[n] = mask[n] ? dy[n]/(1-p) : 0. Division (not timm's multiplication by 1/(1-p)): x/(1-p) is the
correctly rounded value, the one dropout computes too; the two differ by at most one unit in the last place.
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.philox_fast import PhiloxBlocks, keep_threshold
from tr.backend.rules import drop_path as rules
from tr.core import philox


def _keep(b: Binder, n: int) -> np.ndarray:
    return b.view("mask", (n,)).view(np.bool_)


@cpu_op("drop_path_fwd")
def drop_path_fwd(b: Binder) -> Step:
    r = rules.drop_path_fwd(b)
    keep = _keep(b, r.n)
    kept = keep[:, None]  # broadcast over the sample's elements
    seed = b.view("seed", (2,)).view("<u8")  # one little-endian uint64
    x, load_x = b.load("x", (r.n, r.per_sample))
    y, store_y = b.store("y", (r.n, r.per_sample))
    q = np.float32(1.0 - r.p)
    draws, threshold = PhiloxBlocks(r.n), keep_threshold(r.p)

    def core() -> None:
        s = philox.splitmix64(int(seed[0]))
        seed[0] = s
        draws.keep_mask(s, threshold, keep)
        y.fill(0)
        np.divide(x, q, out=y, where=kept)

    return seq(load_x, core, store_y)


@cpu_op("drop_path_bwd")
def drop_path_bwd(b: Binder) -> Step:
    r = rules.drop_path_bwd(b)
    keep = _keep(b, r.n)
    dy, load_dy = b.load("dy", (r.n, r.per_sample))
    dx, store_dx = b.store("dx", (r.n, r.per_sample))
    kept = keep[:, None]
    q = np.float32(1.0 - r.p)
    dropped = b.scratch((r.n, 1), np.bool_)

    def core() -> None:  # dx may share dy's bytes: scale first, then zero the dropped samples
        np.divide(dy, q, out=dx)
        np.logical_not(kept, out=dropped)
        np.copyto(dx, np.float32(0), where=dropped)

    return seq(load_dy, core, store_dx)
