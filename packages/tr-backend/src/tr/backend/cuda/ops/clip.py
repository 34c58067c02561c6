"""Gradient clipping: clip_grad_norm, by the global norm, one native op over the gradients' span; clip_agc, adaptive,
one native op a tensor (csrc/ops/clip.cu; semantics: tr/backend/cpu/ops/clip.py)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.clip import CLIP_AGC, CLIP_GRAD_NORM
from tr.backend.rules import clip as rules


@cuda_op("clip_grad_norm")
def clip_grad_norm(b: CudaBinder) -> Any:
    n, max_norm = rules.clip_grad_norm(b)
    return b.make(CLIP_GRAD_NORM, g=b.span("g")[0], n=n, scale=b.dev("scale"), flag=b.dev("flag"),
                  divisor=b.dev("divisor"), norm=b.dev("norm"), max_norm=float(max_norm))


@cuda_op("clip_agc")
def clip_agc(b: CudaBinder) -> Any:
    units, per, clip, eps = rules.clip_agc(b)
    return b.make(CLIP_AGC, w=b.dev("w"), g=b.dev("g"), scale=b.dev("scale"), flag=b.dev("flag"), units=units,
                  per=per, clip=float(clip), eps=float(eps))

