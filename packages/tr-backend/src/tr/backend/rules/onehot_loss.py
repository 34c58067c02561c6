"""The rules of the one-hot losses (onehot_loss_fwd, onehot_loss_inf, onehot_loss_bwd): logits [N, K] of a float
dtype, INT32 labels one per sample, the loss 'bce_logits' or 'mse', label smoothing in [0, 1), an FP32 result of
(loss, top-1, top-5), dlogits of the logits' size, an FP32 loss scale, an optional INT32 prediction per sample.
The logits, labels, result, prediction and the backward's optional divisor follow softmax cross-entropy's rules
(rules/softmax_ce.py)."""

from __future__ import annotations

from typing import NamedTuple

from tr.backend.binding import CallBinder
from tr.backend.rules import softmax_ce
from tr.core.dtype import DType
from tr.core.ops import ONEHOT_LOSS_CODES


class OneHotLoss(NamedTuple):
    n: int
    k: int
    loss: str
    smoothing: float

    @property
    def code(self) -> int:
        return ONEHOT_LOSS_CODES[self.loss]


def _common(b: CallBinder) -> OneHotLoss:
    loss = b.attr("loss")
    if loss not in ONEHOT_LOSS_CODES:
        b.fail(f"attribute 'loss' must be one of {sorted(ONEHOT_LOSS_CODES)}, got {loss!r}")
    n, k = softmax_ce.label_dims(b, "logits")
    ls = b.float_attr("label_smoothing", 0.0, 0.0, 1.0)
    if ls >= 1.0:
        b.fail(f"attribute 'label_smoothing' = {ls!r} must be < 1")
    return OneHotLoss(n, k, loss, ls)


def onehot_loss_fwd(b: CallBinder) -> OneHotLoss:
    r = _common(b)
    softmax_ce.result(b)
    return r


def onehot_loss_inf(b: CallBinder) -> OneHotLoss:
    r = _common(b)
    softmax_ce.result(b)
    softmax_ce.prediction(b, r.n)
    return r


def onehot_loss_bwd(b: CallBinder) -> OneHotLoss:
    r = _common(b)
    softmax_ce.same_size(b, "dlogits", "logits", r.n, r.k)
    b.expect_dtype("scale", DType.FP32)
    softmax_ce.divisor(b)
    return r
