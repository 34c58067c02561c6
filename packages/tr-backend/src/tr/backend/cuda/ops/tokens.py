"""A Vision Transformer's token sequence (csrc/ops/tokens.cu; rules: tr.backend.rules.tokens).

Element-wise kernels in float32 rounded once to the output's type; dcls and dpos are one float32 running sum an
element over the samples in order, the CPU backend's bytes (no atomics)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.tokens import TOKEN_PICK, TOKENS_BWD, TOKENS_FWD
from tr.backend.rules import tokens as rules


@cuda_op("tokens_fwd")
def tokens_fwd(b: CudaBinder) -> Any:
    s = rules.tokens_fwd(b)
    return b.make(TOKENS_FWD, x=b.dev("x"), cls=b.dev("cls"), pos=b.dev("pos"), y=b.dev("y"), n=s.n, p=s.p, t=s.t,
                  c=s.c)


@cuda_op("tokens_bwd")
def tokens_bwd(b: CudaBinder) -> Any:
    s = rules.tokens_bwd(b)
    return b.make(TOKENS_BWD, dy=b.dev("dy"), dx=b.dev("dx"), dcls=b.dev("dcls"), dpos=b.dev("dpos"), n=s.n, p=s.p,
                  t=s.t, c=s.c)


@cuda_op("token_pick_fwd")
def token_pick_fwd(b: CudaBinder) -> Any:
    n, t, c = rules.token_pick(b, "x", "y")
    return b.make(TOKEN_PICK, src=b.dev("x"), dst=b.dev("y"), n=n, t=t, c=c, backward=False)


@cuda_op("token_pick_bwd")
def token_pick_bwd(b: CudaBinder) -> Any:
    n, t, c = rules.token_pick(b, "dx", "dy")
    return b.make(TOKEN_PICK, src=b.dev("dy"), dst=b.dev("dx"), n=n, t=t, c=c, backward=True)
