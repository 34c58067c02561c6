"""Native ops of csrc/ops/onehot_loss.cu: binary cross-entropy with logits or the mean squared error against the
(smoothed) one-hot label, fused with top-1/top-5 accuracy (logits and dlogits FP32, FP16 or BF16; labels INT32,
one per sample)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import code, f64, i64, native_op, tensor

_FIELDS = (i64("n", "samples"), i64("k", "classes"),
           code("loss", "onehot_loss", "tr.core.ops.ONEHOT_LOSS_CODES: bce_logits or mse"),
           f64("label_smoothing", "label smoothing, in [0, 1)"))
_LABELS = tensor("labels", "INT32 [n]: a label outside [0, k) makes the sample's loss NaN")
_RESULT = tensor("result", "FP32 [3]: (mean loss over n * k, top-1 fraction, top-5 fraction)")

ONEHOT_LOSS_FWD = native_op(
    "onehot_loss_fwd", "result = (mean loss, top-1, top-5).",
    tensor("logits", "[n, k]"), _LABELS, _RESULT, *_FIELDS)

ONEHOT_LOSS_BWD = native_op(
    "onehot_loss_bwd", "dlogits = dl/dz * scale[0] / (n * k): sigmoid(z) - t (bce_logits) or 2 (z - t) (mse).",
    tensor("logits", "[n, k]"), _LABELS, tensor("scale", "FP32 [1]: the loss scale"),
    tensor("dlogits", "[n, k]; may be logits"),
    tensor("div", "FP32 [1]: the count in n's place (a gradient-accumulation window's samples)", optional=True),
    *_FIELDS)

ONEHOT_LOSS_INF = native_op(
    "onehot_loss_inf", "result = (mean loss, top-1, top-5); pred = the argmax when given.",
    tensor("logits", "[n, k]"), _LABELS, _RESULT,
    tensor("pred", "INT32 [n]: each sample's argmax; absent: not written", optional=True), *_FIELDS)

OPS = (ONEHOT_LOSS_FWD, ONEHOT_LOSS_BWD, ONEHOT_LOSS_INF)
