"""clip_grad_norm: gradient clipping by the global norm, one native op over the gradients' span (csrc/ops/clip.cu;
semantics: tr/backend/cpu/ops/clip.py)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.clip import CLIP_GRAD_NORM
from tr.backend.rules import clip as rules


@cuda_op("clip_grad_norm")
def clip_grad_norm(b: CudaBinder) -> Any:
    n, max_norm = rules.clip_grad_norm(b)
    return b.make(CLIP_GRAD_NORM, g=b.span("g")[0], n=n, scale=b.dev("scale"), flag=b.dev("flag"),
                  divisor=b.dev("divisor"), norm=b.dev("norm"), max_norm=float(max_norm))
