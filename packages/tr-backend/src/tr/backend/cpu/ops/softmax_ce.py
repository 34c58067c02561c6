"""Softmax cross-entropy with label smoothing, fused with top-1/top-5 accuracy.

Per sample with K classes and smoothing ls, from the exact log-softmax l_c = z_c - max z - log sum exp:
loss_b = -(1-ls) l_y - (ls/K) sum_c l_c; result = [mean_b loss_b, top-1 fraction, top-5 fraction].
Ranks follow "first max wins": class c ranks above y iff z_c > z_y, or z_c == z_y and c < y, so top-1 is
argmax (first maximal index) == y and top-k is rank(y) < k; a sample whose logits hold any NaN or Inf is a
miss in both (a diverged model must not score 100 %). Backward:
dlogits = (p - ls/K - (1-ls)[c = y]) * fl32(scale[0] / N), the quotient in float64 (N: div[0] when the optional div
is given, a gradient-accumulation window's samples). A label outside [0, K) raises at launch.
With lam (the mixup op's FP32 [1]) sample n's target is lam * smooth(onehot(y_n)) + (1-lam) * smooth(onehot(y_r)),
r = N-1-n (timm's mixup_target): loss_b = -(1-ls) (lam l_y + (1-lam) l_yr) - (ls/K) sum_c l_c, and the backward
subtracts fl32((1-ls) lam) at y, then fl32((1-ls) fl32(1-lam)) at y_r.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import mixup as mixup_rules
from tr.backend.rules import softmax_ce as rules
from tr.core.errors import DataError
from tr.core.metrics import top1_top5


def label_check(labels: np.ndarray, k: int, where: str) -> None:
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= k:
        bad = lo if lo < 0 else hi
        raise DataError(f"{where}: label {bad} is outside [0, {k})")


class _Softmax:
    """Float32 softmax statistics of a [N, K] batch, in scratch arrays taken once at capture."""

    def __init__(self, b: Binder, n: int, k: int) -> None:
        self.n, self.k = n, k
        self.rows = np.arange(n)
        self.cls = np.arange(k, dtype=np.int32)[None, :]
        self.shifted = b.scratch((n, k))
        self.mx = b.scratch((n, 1))
        self.lse = b.scratch((n, 1))

    def run(self, z: np.ndarray, probs: np.ndarray) -> None:
        """shifted = z - max z; lse = log sum exp(shifted); probs = exp(shifted) / sum."""
        np.max(z, axis=1, keepdims=True, out=self.mx)
        np.subtract(z, self.mx, out=self.shifted)
        np.exp(self.shifted, out=probs)
        np.sum(probs, axis=1, keepdims=True, out=self.lse)
        np.divide(probs, self.lse, out=probs)
        np.log(self.lse, out=self.lse)

    def loss(self, labels: np.ndarray, ls: float, lam: np.ndarray | None = None) -> float:
        s, lse = self.shifted, self.lse[:, 0].astype(np.float64)
        logp_y = s[self.rows, labels].astype(np.float64) - lse
        if lam is not None:  # the mixed target: lam of y's one-hot, 1 - lam of the reversed batch's
            a = float(lam[0])
            logp_y = a * logp_y + (1.0 - a) * (s[self.rows, labels[::-1]].astype(np.float64) - lse)
        loss = -(1.0 - ls) * logp_y
        if ls:
            sum_logp = s.sum(axis=1, dtype=np.float64) - self.k * lse
            loss -= (ls / self.k) * sum_logp
        return float(loss.mean())

    def accuracy(self, z: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
        return top1_top5(z, labels, self.rows, self.cls)


def result_view(b: Binder) -> tuple[np.ndarray, Step | None]:
    r, store = b.store("result", (b.tensor("result").numel,))
    return r[:3], store


def _forward(sm: _Softmax, z: np.ndarray, probs: np.ndarray, labels: np.ndarray, result: np.ndarray, k: int,
             ls: float, where: str, lam: np.ndarray | None = None) -> Step:
    """The forward's step (training and inference): the softmax into ``probs``, then the loss, top-1 and top-5
    into ``result``."""

    def core() -> None:
        label_check(labels, k, where)
        sm.run(z, probs)
        top1, top5 = sm.accuracy(z, labels)
        result[0] = sm.loss(labels, ls, lam)
        result[1] = top1
        result[2] = top5

    return core


@cpu_op("softmax_ce_fwd")
def softmax_ce_fwd(b: Binder) -> Step:
    n, k, ls = rules.softmax_ce_fwd(b)
    z, load_z = b.load("logits", (n, k))
    probs, store_p = b.store("probs", (n, k))
    labels = b.view("labels", (n,))
    result, store_r = result_view(b)
    sm = _Softmax(b, n, k)
    lam = b.view("lam", (1,)) if mixup_rules.lam(b) else None
    return seq(load_z, _forward(sm, z, probs, labels, result, k, ls, b.where, lam), store_p, store_r)


@cpu_op("softmax_ce_inf")
def softmax_ce_inf(b: Binder) -> Step:
    n, k, ls = rules.softmax_ce_inf(b)
    z, load_z = b.load("logits", (n, k))
    labels = b.view("labels", (n,))
    result, store_r = result_view(b)
    sm = _Softmax(b, n, k)
    probs = b.scratch((n, k))
    pred_step = None
    if b.has("pred"):
        idx = b.scratch((n,), np.intp)  # argmax writes the platform index type only
        pred_step = seq(partial(np.argmax, z, axis=1, out=idx),
                        partial(np.copyto, b.view("pred", (n,)), idx, casting="unsafe"))
    return seq(load_z, _forward(sm, z, probs, labels, result, k, ls, b.where), pred_step, store_r)


@cpu_op("softmax_ce_bwd")
def softmax_ce_bwd(b: Binder) -> Step:
    n, k, ls = rules.softmax_ce_bwd(b)
    p, load_p = b.load("probs", (n, k))
    d, store_d = b.store("dlogits", (n, k))
    labels = b.view("labels", (n,))
    scale = b.view("scale", (-1,))
    div = b.view("div", (-1,)) if b.has("div") else None
    lam = b.view("lam", (1,)) if mixup_rules.lam(b) else None
    rows = np.arange(n)
    off, hit = np.float32(ls / k), np.float32(1.0 - ls)
    where = b.where

    def core() -> None:
        label_check(labels, k, where)
        np.subtract(p, off, out=d)
        if lam is None:
            d[rows, labels] -= hit
        else:  # y's share, then the reversed batch's (the CUDA kernel's order)
            a = np.float32(lam[0])
            d[rows, labels] -= hit * a
            d[rows, labels[::-1]] -= hit * (np.float32(1.0) - a)
        count = n if div is None else float(div[0])  # float64 either way: div[0] == N gives the same factor
        np.multiply(d, np.float32(float(scale[0]) / count), out=d)

    return seq(load_p, core, store_d)
