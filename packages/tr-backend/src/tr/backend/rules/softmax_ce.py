"""The rules of softmax cross-entropy (softmax_ce_fwd, softmax_ce_inf, softmax_ce_bwd): logits or probs [N, K]
of a float dtype, INT32 labels one per sample, label smoothing in [0, 1], an FP32 result of (loss, top-1,
top-5), probs and dlogits of the logits' size, an FP32 loss scale, an optional INT32 prediction per sample, and
the backward's optional divisor, one FP32 (a gradient-accumulation window's samples, in N's place)."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import ShapeError


def label_dims(b: CallBinder, logits: str) -> tuple[int, int]:
    t = b.tensor(logits)
    n, k = t.shape.n, t.shape.per_sample()
    b.expect_dtype("labels", DType.INT32)
    if b.tensor("labels").numel != n:
        b.fail(f"labels {b.tensor('labels').shape} must hold one label per sample of {logits} {t.shape}", ShapeError)
    b.expect_float(logits)
    return n, k


def same_size(b: CallBinder, name: str, of: str, n: int, k: int) -> None:
    if b.tensor(name).numel != n * k:
        b.fail(f"{name} {b.tensor(name).shape} must match {of} {b.tensor(of).shape}", ShapeError)
    b.expect_float(name)


def result(b: CallBinder) -> None:
    t = b.tensor("result")
    if t.numel < 3:
        b.fail(f"result {t.shape} must hold 3 values (loss, top1, top5)", ShapeError)
    b.expect_dtype("result", DType.FP32)


def smoothing(b: CallBinder) -> float:
    return b.float_attr("label_smoothing", 0.0, 0.0, 1.0)


def softmax_ce_fwd(b: CallBinder) -> tuple[int, int, float]:
    """(samples, classes, label smoothing)."""
    n, k = label_dims(b, "logits")
    same_size(b, "probs", "logits", n, k)
    result(b)
    return n, k, smoothing(b)


def softmax_ce_inf(b: CallBinder) -> tuple[int, int, float]:
    n, k = label_dims(b, "logits")
    result(b)
    prediction(b, n)
    return n, k, smoothing(b)


def prediction(b: CallBinder, n: int) -> None:
    """The optional prediction: one INT32 class per sample."""
    if b.has("pred"):
        b.expect_dtype("pred", DType.INT32)
        b.expect_numel("pred", n)


def divisor(b: CallBinder) -> bool:
    """The backward's optional ``div``: one FP32, the count the loss's mean divides by instead of N."""
    if not b.has("div"):
        return False
    b.expect_dtype("div", DType.FP32)
    b.expect_numel("div", 1)
    return True


def softmax_ce_bwd(b: CallBinder) -> tuple[int, int, float]:
    n, k = label_dims(b, "probs")
    same_size(b, "dlogits", "probs", n, k)
    b.expect_dtype("scale", DType.FP32)
    divisor(b)
    return n, k, smoothing(b)
