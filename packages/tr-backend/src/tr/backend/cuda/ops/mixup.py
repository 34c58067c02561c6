"""Mixup / CutMix in place (csrc/ops/mixup.cu): the step's draw by one thread per block, from the seed the
launch advanced, then every pixel pair (n, N-1-n) mixed by one thread; the CPU backend's bytes."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.mixup import MIXUP
from tr.backend.rules import mixup as rules


@cuda_op("mixup")
def mixup(b: CudaBinder) -> Any:
    (n, h, w, c), cfg = rules.mixup(b)
    return b.make(MIXUP, x=b.dev("x"), seed=b.dev("seed"), lam=b.dev("lam"), n=n, h=h, w=w, c=c,
                  mixup_alpha=cfg.mixup_alpha, cutmix_alpha=cfg.cutmix_alpha, prob=cfg.prob,
                  switch_prob=cfg.switch_prob)
