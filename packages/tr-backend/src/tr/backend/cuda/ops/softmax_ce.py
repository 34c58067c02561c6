"""Softmax cross-entropy with label smoothing and top-1/top-5 (csrc/ops/softmax_ce.cu): one block per sample,
then one fixed-order reduction; no atomics. A label outside [0, K) makes the loss NaN (the CPU backend
raises DataError at launch, which a device cannot do without reading memory back)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.dtype import DType
from tr.core.errors import ShapeError


def _dims(b: CudaBinder, logits: str) -> tuple[int, int]:
    t = b.tensor(logits)
    n, k = t.shape.n, t.shape.per_sample()
    b.expect_dtype("labels", DType.INT32)
    if b.tensor("labels").numel != n:
        b.fail(f"labels {b.tensor('labels').shape} must hold one label per sample of {logits} {t.shape}", ShapeError)
    b.expect_float(logits)
    return n, k


def _smoothing(b: CudaBinder) -> float:
    return b.float_attr("label_smoothing", 0.0, 0.0, 1.0)


def _result(b: CudaBinder) -> None:
    t = b.tensor("result")
    if t.numel < 3:
        b.fail(f"result {t.shape} must hold 3 values (loss, top1, top5)", ShapeError)
    b.expect_dtype("result", DType.FP32)


@cuda_op("softmax_ce_fwd")
def softmax_ce_fwd(b: CudaBinder) -> Any:
    n, k = _dims(b, "logits")
    if b.tensor("probs").numel != n * k:
        b.fail(f"probs {b.tensor('probs').shape} must match logits {b.tensor('logits').shape}", ShapeError)
    b.expect_float("probs")
    _result(b)
    return b.native("softmax_ce_fwd", ["logits", "labels", "probs", "result"], ints={"n": n, "k": k},
                    floats={"label_smoothing": _smoothing(b)})


@cuda_op("softmax_ce_inf")
def softmax_ce_inf(b: CudaBinder) -> Any:
    n, k = _dims(b, "logits")
    _result(b)
    if b.has("pred"):
        b.expect_dtype("pred", DType.INT32)
        b.expect_numel("pred", n)
    return b.native("softmax_ce_inf", ["logits", "labels", "result", "pred"], ints={"n": n, "k": k},
                    floats={"label_smoothing": _smoothing(b)})


@cuda_op("softmax_ce_bwd")
def softmax_ce_bwd(b: CudaBinder) -> Any:
    n, k = _dims(b, "probs")
    if b.tensor("dlogits").numel != n * k:
        b.fail(f"dlogits {b.tensor('dlogits').shape} must match probs {b.tensor('probs').shape}", ShapeError)
    b.expect_float("dlogits")
    b.expect_dtype("scale", DType.FP32)
    return b.native("softmax_ce_bwd", ["probs", "labels", "scale", "dlogits"], ints={"n": n, "k": k},
                    floats={"label_smoothing": _smoothing(b)})
