"""Gradient accumulation (csrc/ops/accum.cu): the window's place (one thread), the gradient sum over the GRAD span
(one FP32 add an element, the CPU backend's bytes) and the window's mean result. The kernels read the position,
hold and first on the device: one captured step serves every micro-step."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.accum import ACCUM_WINDOW, RANGE_ACCUMULATE, WINDOW_RESULT
from tr.backend.rules import accum as rules


@cuda_op("accum_window")
def accum_window(b: CudaBinder) -> Any:
    w = rules.accum_window(b)
    return b.make(ACCUM_WINDOW, pos=b.dev("pos"), hold=b.dev("hold"), first=b.dev("first"), div=b.dev("div"), k=w.k,
                  steps=w.steps, batch=w.batch, last_batch=w.last_batch)


@cuda_op("range_accumulate")
def range_accumulate(b: CudaBinder) -> Any:
    n = rules.range_accumulate(b)
    if not n:
        return None
    return b.make(RANGE_ACCUMULATE, src=b.span("src")[0], acc=b.span("acc")[0], hold=b.dev("hold"),
                  first=b.dev("first"), n=n)


@cuda_op("window_result")
def window_result(b: CudaBinder) -> Any:
    n = rules.window_result(b)
    return b.make(WINDOW_RESULT, result=b.dev("result"), window=b.dev("window"), batch=b.dev("batch"),
                  hold=b.dev("hold"), first=b.dev("first"), n=n)
