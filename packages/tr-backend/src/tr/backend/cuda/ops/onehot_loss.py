"""Binary cross-entropy with logits and the mean squared error against the one-hot label, with top-1/top-5
(csrc/ops/onehot_loss.cu): one block per sample, then one fixed-order reduction; no atomics. A label outside
[0, K) makes the loss NaN (the CPU backend raises DataError at launch)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import onehot_loss as rules
from tr.backend.rules.onehot_loss import OneHotLoss


def _params(r: OneHotLoss) -> dict[str, Any]:
    return {"ints": {"n": r.n, "k": r.k, "loss": r.code}, "floats": {"label_smoothing": r.smoothing}}


@cuda_op("onehot_loss_fwd")
def onehot_loss_fwd(b: CudaBinder) -> Any:
    return b.native("onehot_loss_fwd", ["logits", "labels", "result"], **_params(rules.onehot_loss_fwd(b)))


@cuda_op("onehot_loss_inf")
def onehot_loss_inf(b: CudaBinder) -> Any:
    return b.native("onehot_loss_inf", ["logits", "labels", "result", "pred"], **_params(rules.onehot_loss_inf(b)))


@cuda_op("onehot_loss_bwd")
def onehot_loss_bwd(b: CudaBinder) -> Any:
    return b.native("onehot_loss_bwd", ["logits", "labels", "scale", "dlogits"], **_params(rules.onehot_loss_bwd(b)))
