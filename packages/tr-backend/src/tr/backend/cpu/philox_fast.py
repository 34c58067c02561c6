"""Philox4x32-10 bulk draws for the CPU backend, bit-identical to tr.core.philox but allocation-free.

tr.core.philox is the reference (pure functions, fresh arrays per call). Dropout draws one number per
element every step, so here the same rounds run chunk by chunk over preallocated uint64 buffers that stay
in cache, with every operation in place. ``keep_mask`` decides ``uniform(seed, offset + i) >= p`` on the
integers: uniform = (r0 >> 8) * 2^-24 exactly, so it is ``r0 >= ceil(p * 2^24) << 8``.
"""

from __future__ import annotations

import math

import numpy as np

from tr.core.philox import PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, ROUNDS

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def keep_threshold(p: float) -> int:
    """Smallest r0 with (r0 >> 8) * 2^-24 >= float32(p)."""
    return math.ceil(float(np.float32(p)) * 2.0**24) << 8


class PhiloxBlocks:
    """Draws for offsets ``offset .. offset+n-1`` of one seed, in chunks of ``chunk`` counters."""

    def __init__(self, n: int, chunk: int = 1 << 15) -> None:
        self.n = int(n)
        self.chunk = max(1, min(int(chunk), self.n))
        self._iota = np.arange(self.chunk, dtype=np.uint64)
        self._buf = [np.empty(self.chunk, np.uint64) for _ in range(7)]

    def _r0(self, seed: int, start: int, m: int) -> np.ndarray:
        """r0 of the counters start .. start+m-1 (a view into an internal buffer)."""
        c0, c1, c2, c3, p0, p1, t = (b[:m] for b in self._buf)
        np.add(self._iota[:m], np.uint64(start), out=p0)
        np.bitwise_and(p0, _M32, out=c0)
        np.right_shift(p0, _S32, out=c1)
        c2.fill(0)
        c3.fill(0)
        k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
        for r in range(ROUNDS):
            np.multiply(c0, PHILOX_M0, out=p0)
            np.multiply(c2, PHILOX_M1, out=p1)
            np.right_shift(p1, _S32, out=t)  # new c0 = hi1 ^ c1 ^ k0
            np.bitwise_xor(t, c1, out=t)
            np.bitwise_xor(t, np.uint64(k0), out=t)
            np.bitwise_and(p1, _M32, out=c1)  # new c1 = lo1
            np.right_shift(p0, _S32, out=c2)  # new c2 = hi0 ^ c3 ^ k1
            np.bitwise_xor(c2, c3, out=c2)
            np.bitwise_xor(c2, np.uint64(k1), out=c2)
            np.bitwise_and(p0, _M32, out=c3)  # new c3 = lo0
            c0, t = t, c0
            if r + 1 < ROUNDS:
                k0 = (k0 + int(PHILOX_W0)) & 0xFFFFFFFF
                k1 = (k1 + int(PHILOX_W1)) & 0xFFFFFFFF
        return c0

    def keep_mask(self, seed: int, threshold: int, out: np.ndarray, offset: int = 0) -> None:
        """out[i] = r0(seed, offset + i) >= threshold (out: bool, n elements)."""
        thr = np.uint64(threshold)
        for start in range(0, self.n, self.chunk):
            m = min(self.chunk, self.n - start)
            np.greater_equal(self._r0(seed, offset + start, m), thr, out=out[start:start + m])

    def uniform(self, seed: int, out: np.ndarray, offset: int = 0) -> None:
        """out[i] = float32 uniform(seed, offset + i), as tr.core.philox.uniform."""
        for start in range(0, self.n, self.chunk):
            m = min(self.chunk, self.n - start)
            r0 = self._r0(seed, offset + start, m)
            np.right_shift(r0, np.uint64(8), out=r0)
            np.multiply(r0, 2.0**-24, out=out[start:start + m], casting="unsafe")
