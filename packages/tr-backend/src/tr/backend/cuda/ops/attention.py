"""Multi-head scaled dot-product self-attention over tokens (argument rules: tr.backend.rules.attention).

Two engines, chosen per op at capture (tr.backend.cuda.attention_engines says which and why, and records it):
cuDNN's SDPA graphs for FP16 and BF16 (flash attention forward and backward, reading Q, K and V in place from qkv
and writing dQ, dK, dV in place into dqkv; the deterministic backward unless the backend opts out;
csrc/ops/attention_sdpa.cpp), and tr's kernels (csrc/ops/attention.cu) for FP32, attention with dropout and
whatever cuDNN cannot take.

tr's kernels are straightforward deterministic kernels, the CPU backend's float32 arithmetic in a fixed order: the
forward takes a block per (query, head, sample), its scores in shared memory, the row's max and sum by a fixed
block tree; the backward computes D_i = rowsum(dy * y) into op scratch, then dK and dV a block per key and dQ a
block per query, each summing over the other tokens in order. No atomics: every launch gives the same bytes. Dropout
on the probabilities (tr's kernels only: cuDNN's dropout draws other bits than the CPU's Philox rule) redraws each
element's keep bit in every kernel that needs it (no mask is saved)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda import attention_engines
from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.attention import ATTENTION_BWD, ATTENTION_FWD
from tr.backend.cuda.signatures.attention_sdpa import ATTENTION_SDPA_BWD, ATTENTION_SDPA_FWD
from tr.backend.rules.attention import attention_bwd_rules, attention_fwd_rules


@cuda_op("attention_fwd")
def attention_fwd(b: CudaBinder) -> Any:
    r = attention_fwd_rules(b)  # stats None: inference; seed and key only with dropout
    fields = dict(qkv=b.dev("qkv"), y=b.dev("y"), stats=b.dev("stats"), seed=b.dev("seed"), key=b.dev("key"), n=r.n,
                  t=r.t, d=r.d, heads=r.heads, scale=r.scale, dropout=r.dropout)
    return attention_engines.build(b, r, (ATTENTION_FWD, fields), ATTENTION_SDPA_FWD, dropout=r.dropout)


@cuda_op("attention_bwd")
def attention_bwd(b: CudaBinder) -> Any:
    r = attention_bwd_rules(b)
    fields = dict(qkv=b.dev("qkv"), y=b.dev("y"), dy=b.dev("dy"), stats=b.dev("stats"), dqkv=b.dev("dqkv"),
                  key=b.dev("key"), n=r.n, t=r.t, d=r.d, heads=r.heads, scale=r.scale, dropout=r.dropout)
    return attention_engines.build(b, r, (ATTENTION_BWD, fields), ATTENTION_SDPA_BWD, dropout=r.dropout)
