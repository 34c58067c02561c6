"""Binary cross-entropy with logits and the mean squared error against the one-hot label, with top-1/top-5
(csrc/ops/onehot_loss.cu): one block per sample, then one fixed-order reduction; no atomics. A label outside
[0, K) makes the loss NaN (the CPU backend raises DataError at launch)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.onehot_loss import ONEHOT_LOSS_BWD, ONEHOT_LOSS_FWD, ONEHOT_LOSS_INF
from tr.backend.rules import onehot_loss as rules
from tr.backend.rules.onehot_loss import OneHotLoss


def _params(r: OneHotLoss) -> dict[str, Any]:
    return {"n": r.n, "k": r.k, "loss": r.code, "label_smoothing": r.smoothing}


@cuda_op("onehot_loss_fwd")
def onehot_loss_fwd(b: CudaBinder) -> Any:
    r = rules.onehot_loss_fwd(b)
    return b.make(ONEHOT_LOSS_FWD, logits=b.dev("logits"), labels=b.dev("labels"), result=b.dev("result"),
                  **_params(r))


@cuda_op("onehot_loss_inf")
def onehot_loss_inf(b: CudaBinder) -> Any:
    r = rules.onehot_loss_inf(b)
    return b.make(ONEHOT_LOSS_INF, logits=b.dev("logits"), labels=b.dev("labels"), result=b.dev("result"),
                  pred=b.dev("pred"), **_params(r))


@cuda_op("onehot_loss_bwd")
def onehot_loss_bwd(b: CudaBinder) -> Any:
    r = rules.onehot_loss_bwd(b)
    return b.make(ONEHOT_LOSS_BWD, logits=b.dev("logits"), labels=b.dev("labels"), scale=b.dev("scale"),
                  dlogits=b.dev("dlogits"), div=b.dev("div"), **_params(r))
