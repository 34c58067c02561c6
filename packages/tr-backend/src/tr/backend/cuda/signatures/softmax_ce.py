"""Native ops of csrc/ops/softmax_ce.cu: softmax cross-entropy with label smoothing, fused with top-1/top-5
accuracy (logits, probs and dlogits FP32, FP16 or BF16; labels INT32, one per sample)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

_SIZES = (i64("n", "samples"), i64("k", "classes"))
_LS = f64("label_smoothing", "label smoothing, in [0, 1]")
_LABELS = tensor("labels", "INT32 [n]: a label outside [0, k) makes the sample's loss NaN")
_RESULT = tensor("result", "FP32 [3]: (mean loss, top-1 fraction, top-5 fraction)")
_LAM = tensor("lam", "FP32 [1]: the mixup op's lam; the target mixes y and the reversed batch's y", optional=True)

SOFTMAX_CE_FWD = native_op(
    "softmax_ce_fwd", "probs = softmax(logits); result = (mean loss, top-1, top-5).",
    tensor("logits", "[n, k]"), _LABELS, tensor("probs", "[n, k]"), _RESULT, _LAM, *_SIZES, _LS)

SOFTMAX_CE_BWD = native_op(
    "softmax_ce_bwd", "dlogits = (probs - smoothed one-hot) * float(double(scale[0]) / double(div ? div[0] : n)).",
    tensor("probs", "[n, k]: the forward's"), _LABELS, tensor("scale", "FP32 [1]: the loss scale"),
    tensor("dlogits", "[n, k]"),
    tensor("div", "FP32 [1]: the count in n's place (a gradient-accumulation window's samples)", optional=True),
    _LAM, *_SIZES, _LS)

SOFTMAX_CE_INF = native_op(
    "softmax_ce_inf", "result = (mean loss, top-1, top-5); pred = the argmax when given.",
    tensor("logits", "[n, k]"), _LABELS, _RESULT,
    tensor("pred", "INT32 [n]: each sample's argmax; absent: not written", optional=True), *_SIZES, _LS)

OPS = (SOFTMAX_CE_FWD, SOFTMAX_CE_BWD, SOFTMAX_CE_INF)
