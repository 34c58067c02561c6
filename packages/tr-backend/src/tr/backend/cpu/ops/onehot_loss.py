"""Binary cross-entropy with logits and the mean squared error against the (smoothed) one-hot label, fused with
top-1/top-5 accuracy (tr.algo.onehot_loss is the math).

With t = (1-ls) onehot + ls/K: bce l = max(z,0) - z t + log(1 + e^-|z|), mse l = (z - t)^2, result =
[mean of l over the N*K elements (summed in float64), top-1, top-5] ranked as softmax cross-entropy ranks.
Backward: dlogits = (sigmoid(z) - t) or 2 (z - t), times scale[0] / (N*K) (the factor in float64, N: div[0] when
the optional div is given), computed in float32 in place where dlogits is the logits (sigmoid as (1 + tanh(z/2)) /
2: no overflow). A label outside [0, K) raises at launch.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.cpu.ops.softmax_ce import label_check, result_view
from tr.backend.rules import onehot_loss as rules
from tr.backend.rules.onehot_loss import OneHotLoss
from tr.core.metrics import top1_top5


def _loss(r: OneHotLoss, z: np.ndarray, labels: np.ndarray) -> float:
    z64 = z.astype(np.float64)
    t = np.full_like(z64, r.smoothing / r.k)
    t[np.arange(r.n), labels] += 1.0 - r.smoothing
    if r.loss == "mse":
        el = (z64 - t) ** 2
    else:
        el = np.maximum(z64, 0.0) - z64 * t + np.log1p(np.exp(-np.abs(z64)))
    return float(el.mean())


def _forward(b: Binder, r: OneHotLoss, pred: bool) -> Step:
    z, load_z = b.load("logits", (r.n, r.k))
    labels = b.view("labels", (r.n,))
    result, store_r = result_view(b)
    rows, cls = np.arange(r.n), np.arange(r.k, dtype=np.int32)[None, :]
    pred_step = None
    if pred and b.has("pred"):
        idx = b.scratch((r.n,), np.intp)  # argmax writes the platform index type only
        pred_step = seq(partial(np.argmax, z, axis=1, out=idx),
                        partial(np.copyto, b.view("pred", (r.n,)), idx, casting="unsafe"))
    where = b.where

    def core() -> None:
        label_check(labels, r.k, where)
        result[0] = _loss(r, z, labels)
        result[1], result[2] = top1_top5(z, labels, rows, cls)

    return seq(load_z, core, pred_step, store_r)


@cpu_op("onehot_loss_fwd")
def onehot_loss_fwd(b: Binder) -> Step:
    return _forward(b, rules.onehot_loss_fwd(b), pred=False)


@cpu_op("onehot_loss_inf")
def onehot_loss_inf(b: Binder) -> Step:
    return _forward(b, rules.onehot_loss_inf(b), pred=True)


@cpu_op("onehot_loss_bwd")
def onehot_loss_bwd(b: Binder) -> Step:
    r = rules.onehot_loss_bwd(b)
    z, load_z = b.load("logits", (r.n, r.k))
    d, store_d = b.store("dlogits", (r.n, r.k))
    labels = b.view("labels", (r.n,))
    scale = b.view("scale", (-1,))
    div = b.view("div", (-1,)) if b.has("div") else None
    rows = np.arange(r.n)
    off, hit = np.float32(r.smoothing / r.k), np.float32(1.0 - r.smoothing)
    mse = r.loss == "mse"
    where = b.where

    def core() -> None:
        label_check(labels, r.k, where)
        if mse:
            np.copyto(d, z)
        else:  # sigmoid(z) = (1 + tanh(z / 2)) / 2
            np.multiply(z, np.float32(0.5), out=d)
            np.tanh(d, out=d)
            np.multiply(d, np.float32(0.5), out=d)
            np.add(d, np.float32(0.5), out=d)
        np.subtract(d, off, out=d)
        d[rows, labels] -= hit
        count = r.n * r.k if div is None else float(div[0]) * r.k  # float64: div[0] == N gives the same factor
        np.multiply(d, np.float32((2.0 if mse else 1.0) * float(scale[0]) / count), out=d)

    return seq(load_z, core, store_d)
