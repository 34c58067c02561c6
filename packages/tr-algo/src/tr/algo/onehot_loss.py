"""Elementwise losses against the one-hot target of the class label: binary cross-entropy with logits and the
mean squared error. The config values and their reference math.

For a batch of B samples with K classes, label y and smoothing ls, the target of sample b and class c is

    t_bc = (1 - ls) * [c == y_b] + ls / K                  (timm's BinaryCrossEntropy smoothing)

and both losses are means over the B*K elements (torch's ``reduction="mean"``):

    bce:  l = max(z, 0) - z * t + log(1 + exp(-|z|))       dl/dz = sigmoid(z) - t
    mse:  l = (z - t)^2                                    dl/dz = 2 (z - t)

so ``BCEWithLogitsLoss()`` is ``F.binary_cross_entropy_with_logits(z, one_hot(y))`` and ``MSELoss()`` is
``F.mse_loss(z, one_hot(y))`` (with ls = 0). The gradient the backends write is dl/dz * scaling / (B*K).
Accuracy is ranked on the logits as for the softmax loss (tr.algo.loss.top_k_correct).

Targets are the dataset's class labels: multi-label or regression targets (a float vector per sample) need a
label pipeline tr does not have yet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from tr.algo import _validate as v
from tr.algo.loss import _rows


@dataclass(frozen=True, kw_only=True)
class _OneHotLoss:
    kind: ClassVar[str] = ""
    smoothing: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoothing", v.unit_open("label_smoothing", self.smoothing))

    def label_smoothing(self, ls: float) -> _OneHotLoss:
        return replace(self, smoothing=ls)

    def forward(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """Mean loss over the batch's B*K elements (reference for the backend's forward op)."""
        return onehot_loss(self.kind, logits, labels, self.smoothing)

    def backward(self, logits: np.ndarray, labels: np.ndarray, scaling: float = 1.0) -> np.ndarray:
        """Gradient of ``scaling * loss`` with respect to the logits, in the logits' shape and dtype."""
        return onehot_loss_grad(self.kind, logits, labels, self.smoothing, scaling)


@dataclass(frozen=True, kw_only=True)
class BCEWithLogitsLoss(_OneHotLoss):
    """``BCEWithLogitsLoss().label_smoothing(0.1)``: a sigmoid per class against the one-hot label."""

    kind: ClassVar[str] = "bce_logits"


@dataclass(frozen=True, kw_only=True)
class MSELoss(_OneHotLoss):
    """``MSELoss()``: the squared distance of the logits from the one-hot label."""

    kind: ClassVar[str] = "mse"


ONEHOT_LOSSES = {c.kind: c for c in (BCEWithLogitsLoss, MSELoss)}


def onehot_target(labels: np.ndarray, k: int, label_smoothing: float = 0.0) -> np.ndarray:
    """float64 [B, K]: (1 - ls) * one_hot(labels) + ls / K."""
    ls = v.unit_open("label_smoothing", label_smoothing)
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    t = np.full((y.size, k), ls / k)
    t[np.arange(y.size), y] += 1.0 - ls
    return t


def _kind(kind: str) -> str:
    if kind not in ONEHOT_LOSSES:
        raise ValueError(f"loss kind must be one of {sorted(ONEHOT_LOSSES)}, got {kind!r}")
    return kind


def onehot_loss_elements(kind: str, logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0) -> np.ndarray:
    """float64 [B, K]: each element's loss."""
    z, y = _rows(logits, labels)
    t = onehot_target(y, z.shape[1], label_smoothing)
    if _kind(kind) == "mse":
        return (z - t) ** 2
    return np.maximum(z, 0.0) - z * t + np.log1p(np.exp(-np.abs(z)))


def onehot_loss(kind: str, logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0) -> float:
    return float(onehot_loss_elements(kind, logits, labels, label_smoothing).mean())


def onehot_loss_grad(kind: str, logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0,
                     scaling: float = 1.0) -> np.ndarray:
    """dL/dlogits times ``scaling``, same shape and float dtype as the logits."""
    s = v.positive("scaling", scaling)
    z, y = _rows(logits, labels)
    t = onehot_target(y, z.shape[1], label_smoothing)
    g = 2.0 * (z - t) if _kind(kind) == "mse" else 1.0 / (1.0 + np.exp(-z)) - t
    g *= s / z.size
    src = np.asarray(logits)
    dtype = src.dtype if np.issubdtype(src.dtype, np.floating) else np.float32
    return g.reshape(src.shape).astype(dtype)
