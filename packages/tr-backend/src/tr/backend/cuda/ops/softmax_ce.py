"""Softmax cross-entropy with label smoothing and top-1/top-5 (csrc/ops/softmax_ce.cu): one block per sample,
then one fixed-order reduction; no atomics. A label outside [0, K) makes the loss NaN (the CPU backend
raises DataError at launch, which a device cannot do without reading memory back)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.softmax_ce import SOFTMAX_CE_BWD, SOFTMAX_CE_FWD, SOFTMAX_CE_INF
from tr.backend.rules import mixup as mixup_rules
from tr.backend.rules import softmax_ce as rules


@cuda_op("softmax_ce_fwd")
def softmax_ce_fwd(b: CudaBinder) -> Any:
    n, k, ls = rules.softmax_ce_fwd(b)
    return b.make(SOFTMAX_CE_FWD, logits=b.dev("logits"), labels=b.dev("labels"), probs=b.dev("probs"),
                  result=b.dev("result"), lam=b.dev("lam") if mixup_rules.lam(b) else None, n=n, k=k,
                  label_smoothing=ls)


@cuda_op("softmax_ce_inf")
def softmax_ce_inf(b: CudaBinder) -> Any:
    n, k, ls = rules.softmax_ce_inf(b)
    return b.make(SOFTMAX_CE_INF, logits=b.dev("logits"), labels=b.dev("labels"), result=b.dev("result"),
                  pred=b.dev("pred"), n=n, k=k, label_smoothing=ls)


@cuda_op("softmax_ce_bwd")
def softmax_ce_bwd(b: CudaBinder) -> Any:
    n, k, ls = rules.softmax_ce_bwd(b)
    return b.make(SOFTMAX_CE_BWD, probs=b.dev("probs"), labels=b.dev("labels"), scale=b.dev("scale"),
                  dlogits=b.dev("dlogits"), div=b.dev("div"), lam=b.dev("lam") if mixup_rules.lam(b) else None,
                  n=n, k=k, label_smoothing=ls)
