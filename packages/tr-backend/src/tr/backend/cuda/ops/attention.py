"""Multi-head scaled dot-product self-attention over tokens (csrc/ops/attention.cu; argument rules:
tr.backend.rules.attention).

Straightforward deterministic kernels, the CPU backend's float32 arithmetic in a fixed order: the forward takes a
block per (query, head, sample), its scores in shared memory, the row's max and sum by a fixed block tree; the
backward computes D_i = rowsum(dy * y) into op scratch, then dK and dV a block per key and dQ a block per query,
each summing over the other tokens in order. No atomics: every launch gives the same bytes. Dropout on the
probabilities redraws each element's keep bit from Philox in every kernel that needs it (no mask is saved)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.attention import ATTENTION_BWD, ATTENTION_FWD
from tr.backend.rules.attention import attention_bwd_rules, attention_fwd_rules


@cuda_op("attention_fwd")
def attention_fwd(b: CudaBinder) -> Any:
    r = attention_fwd_rules(b)  # stats None: inference; seed and key only with dropout
    return b.make(ATTENTION_FWD, qkv=b.dev("qkv"), y=b.dev("y"), stats=b.dev("stats"), seed=b.dev("seed"),
                  key=b.dev("key"), n=r.n, t=r.t, d=r.d, heads=r.heads, scale=r.scale, dropout=r.dropout)


@cuda_op("attention_bwd")
def attention_bwd(b: CudaBinder) -> Any:
    r = attention_bwd_rules(b)
    return b.make(ATTENTION_BWD, qkv=b.dev("qkv"), y=b.dev("y"), dy=b.dev("dy"), stats=b.dev("stats"),
                  dqkv=b.dev("dqkv"), key=b.dev("key"), n=r.n, t=r.t, d=r.d, heads=r.heads, scale=r.scale,
                  dropout=r.dropout)
