"""Multi-head scaled dot-product self-attention over tokens (argument rules: tr.backend.rules.attention).

qkv [N,1,T,3D] is viewed as [N, T, 3, heads, dh] (torch.nn.MultiheadAttention's packed in_proj layout), so q, k
and v of each head are strided [N, heads, T, dh] views of the arena, which numpy's matmul hands to BLAS as they
are (a row stride of 3D elements); nothing is copied into a head-major layout.

Forward, per sample and head, in float32: S = (q k^T) * scale, m = rowmax(S), E = exp(S - m), l = rowsum(E),
P = E / l, y = P v (rounded once to y's dtype on store); stats = m + log(l), the row's log-sum-exp (saved in
training; inference computes it into scratch, so y has the same bytes either way).
Backward, in float32: P = exp(S - stats) with S recomputed as above; dV = P^T dy; dP = dy V^T; D_i = rowsum(dy * y)
over each head's dh values (y as stored, widened: what flash attention and cuDNN use); dS = P * (dP - D_i);
dQ = (dS K) * scale, dK = (dS^T Q) * scale, written into dqkv's [dQ | dK | dV] thirds and rounded once.

Dropout on the probabilities (attribute dropout = p > 0, training only): the forward advances the dropout stream,
seed <- splitmix64(seed), stores it into the layer's key, and keeps P_ij of sample n and head h iff
philox.uniform(key, ((n*heads + h)*T + i)*T + j) >= p (drawn by the allocation-free PhiloxBlocks, chunk by chunk at
the chunk's offset), P' = keep ? P / (1-p) : 0, y = P' v; stats stay the undropped rows' log-sum-exp. The backward
redraws the same bits from the key (no mask is saved): dV = P'^T dy, dP = keep ? (dy V^T) / (1-p) : 0, and D_i =
rowsum(dy * y) is still rowsum(P * dP) since y = P' v.

Samples go through in chunks whose scores fit _SCORES float32 elements, so the scratch stays bounded for large
batches; each (sample, head) product is its own GEMM and every reduction runs along one row, so the chunking does
not change a byte. Row sums are numpy's (pairwise, fixed order) and the BLAS GEMMs do not split their inner
dimension across threads: two runs give the same bytes. FP16 and BF16 tokens are widened to float32 on load and
rounded to nearest even on store by the Binder (BF16 bit patterns through tr.backend.cpu.convert).
"""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.philox_fast import PhiloxBlocks, keep_threshold
from tr.backend.rules.attention import AttentionCall, attention_bwd_rules, attention_fwd_rules
from tr.core import philox

_SCORES = 1 << 22  # score elements (16 MiB of float32) a chunk of samples holds at once


def _chunks(r: AttentionCall) -> tuple[int, list[slice]]:
    """(samples a chunk, the chunks' slices over N)."""
    step = max(1, min(r.n, _SCORES // (r.heads * r.t * r.t)))
    return step, [slice(i, min(i + step, r.n)) for i in range(0, r.n, step)]


def _heads(a: np.ndarray) -> list[np.ndarray]:
    """q, k, v (or dq, dk, dv) of an [N, T, 3, heads, dh] array as [N, heads, T, dh] views."""
    return [a[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]


class _Dropout:
    """The keep bits of the probabilities of one call, drawn chunk by chunk: element ((n*heads + h)*T + i)*T + j of
    the [N, heads, T, T] probabilities is kept iff philox.uniform(key, that index) >= p."""

    def __init__(self, b: Binder, r: AttentionCall, m: int, chunks: list[slice]) -> None:
        self.per = r.heads * r.t * r.t  # draws a sample
        self.q = np.float32(1.0 - r.dropout)
        self.threshold = keep_threshold(r.dropout)
        self.keep = b.scratch((m, r.heads, r.t, r.t), np.bool_)
        self.dropped = b.scratch((m, r.heads, r.t, r.t), np.bool_)
        self.draws: dict[int, PhiloxBlocks] = {}  # samples of a chunk -> its generator (the last chunk may be short)
        for c in chunks:
            j = c.stop - c.start
            if j not in self.draws:
                self.draws[j] = PhiloxBlocks(j * self.per)

    def draw(self, key: int, c: slice) -> np.ndarray:
        """Draw chunk ``c``'s bits; return where its elements are dropped ([samples, heads, T, T] bool)."""
        j = c.stop - c.start
        keep, dropped = self.keep[:j], self.dropped[:j]
        self.draws[j].keep_mask(key, self.threshold, keep.reshape(-1), offset=c.start * self.per)
        np.logical_not(keep, out=dropped)
        return dropped

    def apply(self, a: np.ndarray, dropped: np.ndarray, out: np.ndarray) -> None:
        """out = a / (1-p) where kept, else 0 (out may be a)."""
        np.divide(a, self.q, out=out)
        np.copyto(out, np.float32(0), where=dropped)


@cpu_op("attention_fwd")
def attention_fwd(b: Binder) -> Step:
    r = attention_fwd_rules(b)
    n, t, h, dh = r.n, r.t, r.heads, r.dh
    qkv, load_qkv = b.load("qkv", (n, t, 3, h, dh))
    y, store_y = b.store("y", (n, t, h, dh))
    lse = b.view("stats", (n, h, t)) if r.stats else b.scratch((n, h, t))  # FP32: the arena view; inference: none
    q, k, v = _heads(qkv)
    kt = k.swapaxes(-1, -2)
    yh = y.transpose(0, 2, 1, 3)
    m, chunks = _chunks(r)
    s = b.scratch((m, h, t, t))
    row = b.scratch((m, h, t, 1))
    o = b.scratch((m, h, t, dh))
    scale = np.float32(r.scale)
    drop = _Dropout(b, r, m, chunks) if r.dropout else None
    if drop is not None:  # the dropout stream, and where this layer's draw key goes for the backward
        stream, key = b.view("seed", (2,)).view("<u8"), b.view("key", (2,)).view("<u8")

    def core() -> None:
        if drop is not None:
            k = philox.splitmix64(int(stream[0]))
            stream[0] = k
            key[0] = k
        for c in chunks:
            j = c.stop - c.start
            sc, rw, oc, lc = s[:j], row[:j], o[:j], lse[c]
            np.matmul(q[c], kt[c], out=sc)
            np.multiply(sc, scale, out=sc)
            np.max(sc, axis=-1, keepdims=True, out=rw)
            np.copyto(lc, rw[..., 0])
            np.subtract(sc, rw, out=sc)  # max subtracted: exp never overflows
            np.exp(sc, out=sc)
            np.sum(sc, axis=-1, keepdims=True, out=rw)
            np.divide(sc, rw, out=sc)  # P
            np.log(rw, out=rw)
            np.add(lc, rw[..., 0], out=lc)
            if drop is not None:
                drop.apply(sc, drop.draw(k, c), sc)  # P'
            np.matmul(sc, v[c], out=oc)
            np.copyto(yh[c], oc)

    return seq(load_qkv, core, store_y)


@cpu_op("attention_bwd")
def attention_bwd(b: Binder) -> Step:
    r = attention_bwd_rules(b)
    n, t, h, dh = r.n, r.t, r.heads, r.dh
    qkv, load_qkv = b.load("qkv", (n, t, 3, h, dh))
    y, load_y = b.load("y", (n, t, h, dh))
    dy, load_dy = b.load("dy", (n, t, h, dh))
    lse = b.view("stats", (n, h, t, 1))
    dqkv, store_dqkv = b.store("dqkv", (n, t, 3, h, dh))
    q, k, v = _heads(qkv)
    dq, dk, dv = _heads(dqkv)
    kt, vt = k.swapaxes(-1, -2), v.swapaxes(-1, -2)
    dyh = dy.transpose(0, 2, 1, 3)
    prod = b.scratch((n, t, h, dh))
    delta = b.scratch((n, t, h))
    dlt = delta.transpose(0, 2, 1)[..., None]  # [N, heads, T, 1]
    m, chunks = _chunks(r)
    p = b.scratch((m, h, t, t))
    ds = b.scratch((m, h, t, t))
    g = b.scratch((m, h, t, dh))
    scale = np.float32(r.scale)
    drop = _Dropout(b, r, m, chunks) if r.dropout else None
    if drop is not None:
        key = b.view("key", (2,)).view("<u8")  # the forward's draw
        pd = b.scratch((m, h, t, t))

    def core() -> None:
        np.multiply(dy, y, out=prod)
        np.sum(prod, axis=-1, out=delta)  # D_i per token and head
        for c in chunks:
            j = c.stop - c.start
            pc, dc, gc = p[:j], ds[:j], g[:j]
            np.matmul(q[c], kt[c], out=pc)
            np.multiply(pc, scale, out=pc)
            np.subtract(pc, lse[c], out=pc)
            np.exp(pc, out=pc)  # P, from the forward's log-sum-exp
            if drop is None:
                np.matmul(pc.swapaxes(-1, -2), dyh[c], out=gc)
            else:
                dropped = drop.draw(int(key[0]), c)
                drop.apply(pc, dropped, pd[:j])  # P', as the forward used it
                np.matmul(pd[:j].swapaxes(-1, -2), dyh[c], out=gc)
            np.copyto(dv[c], gc)
            np.matmul(dyh[c], vt[c], out=dc)  # dP' (of the dropped probabilities)
            if drop is not None:
                drop.apply(dc, dropped, dc)  # dP
            np.subtract(dc, dlt[c], out=dc)
            np.multiply(dc, pc, out=dc)  # dS
            np.matmul(dc, k[c], out=gc)
            np.multiply(gc, scale, out=gc)
            np.copyto(dq[c], gc)
            np.matmul(dc.swapaxes(-1, -2), q[c], out=gc)
            np.multiply(gc, scale, out=gc)
            np.copyto(dk[c], gc)

    return seq(load_qkv, load_y, load_dy, core, store_dqkv)
