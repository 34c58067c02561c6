"""Dropout with a counter-based mask: reproducible, and identical on every backend.

The seed tensor is INT32[2] holding one uint64 (little-endian). Each ``dropout_fwd`` first advances it,
seed <- splitmix64(seed), and stores it back (so every layer and step draws a fresh mask with no host
involvement), then keeps element i (flat NHWC index) iff tr.core.philox.uniform(seed, i) >= p (drawn by
the allocation-free, bit-identical PhiloxBlocks).
y = x/(1-p) where kept, else 0; mask is INT8 0/1. Backward: dx = mask ? dy/(1-p) : 0.
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.philox_fast import PhiloxBlocks, keep_threshold
from tr.backend.rules import dropout as rules
from tr.core import philox


def _mask(b: Binder, n: int) -> np.ndarray:
    return b.view("mask", (n,)).view(np.bool_)


@cpu_op("dropout_fwd")
def dropout_fwd(b: Binder) -> Step:
    n, p = rules.dropout_fwd(b)
    keep = _mask(b, n)
    seed = b.view("seed", (2,)).view("<u8")  # one little-endian uint64
    x, load_x = b.load("x", (n,))
    y, store_y = b.store("y", (n,))
    q = np.float32(1.0 - p)
    draws, threshold = PhiloxBlocks(n), keep_threshold(p)

    def core() -> None:
        s = philox.splitmix64(int(seed[0]))
        seed[0] = s
        draws.keep_mask(s, threshold, keep)
        y.fill(0)  # dropped elements are 0 even where x is inf or NaN
        np.divide(x, q, out=y, where=keep)

    return seq(load_x, core, store_y)


@cpu_op("dropout_bwd")
def dropout_bwd(b: Binder) -> Step:
    n, p = rules.dropout_bwd(b)
    keep = _mask(b, n)
    dy, load_dy = b.load("dy", (n,))
    dx, store_dx = b.store("dx", (n,))
    q = np.float32(1.0 - p)
    dropped = b.scratch((n,), np.bool_)

    def core() -> None:  # dx may share dy's bytes: scale first, then zero the dropped elements
        np.divide(dy, q, out=dx)
        np.logical_not(keep, out=dropped)
        np.copyto(dx, np.float32(0), where=dropped)

    return seq(load_dy, core, store_dx)
