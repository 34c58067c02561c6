"""Softmax cross-entropy with label smoothing: the config value and its reference math.

For a sample with logits z (K classes), label y and smoothing ls:

    log p_c = z_c - max(z) - log(sum_j exp(z_j - max(z)))
    loss    = -(1 - ls) * log p_y - (ls / K) * sum_c log p_c          (mean over the B rows)
    dL/dz_c = (p_c - ls / K - (1 - ls) * [c == y]) * scaling / B

This is exactly ``torch.nn.functional.cross_entropy(z, y, label_smoothing=ls)``. The seed adds 1e-8 inside
both logs and to the softmax denominator, which caps each log term at log(1e-8) ~ -18.4: for confident
models its loss is smaller than the true value (the gradient is the same up to that 1e-8). We use the exact
math; backends compute log p as a log-softmax, never as log(p).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from tr.algo import _validate as v
from tr.core.errors import DataError, ShapeError


@dataclass(frozen=True, kw_only=True)
class CrossEntropyLoss:
    """``CrossEntropyLoss().label_smoothing(0.1)``; ``smoothing`` holds the value.

    Label smoothing must be in [0, 1). The seed only accepts [0, 0.2]; larger values are legal here
    (torch accepts [0, 1]; 1 is refused because the label would carry no information).
    """

    kind: ClassVar[str] = "softmax_ce"  # the loss layer the compiler appends (tr.graph's CompileSpec.loss)
    smoothing: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoothing", v.unit_open("label_smoothing", self.smoothing))

    def label_smoothing(self, ls: float) -> CrossEntropyLoss:
        return replace(self, smoothing=ls)

    def forward(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """Mean loss over the batch (reference for the backend's forward op)."""
        return cross_entropy_loss(logits, labels, self.smoothing)

    def backward(self, logits: np.ndarray, labels: np.ndarray, scaling: float = 1.0) -> np.ndarray:
        """Gradient of ``scaling * loss`` with respect to the logits, in the logits' shape and dtype."""
        return cross_entropy_grad(logits, labels, self.smoothing, scaling)


def _rows(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Logits as float64 [B, K] (accepts [B, K] or NHWC [B, 1, 1, K]) and labels as int64 [B]."""
    z = np.asarray(logits)
    if z.ndim == 4:
        if z.shape[1] != 1 or z.shape[2] != 1:
            raise ShapeError(f"NHWC logits must be [B, 1, 1, K], got shape {z.shape}")
        z = z.reshape(z.shape[0], z.shape[3])
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1:
        raise ShapeError(f"logits must be [B, K] or [B, 1, 1, K] with B, K >= 1, got shape {np.shape(logits)}")
    y = np.asarray(labels)
    if y.size != z.shape[0]:
        raise ShapeError(f"expected {z.shape[0]} labels for logits of shape {np.shape(logits)}, got {y.size}")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"labels must be integers, got dtype {y.dtype}")
    y = y.reshape(-1).astype(np.int64)
    bad = (y < 0) | (y >= z.shape[1])
    if bad.any():
        raise DataError(f"label {int(y[bad][0])} is outside [0, {z.shape[1]}) (K = {z.shape[1]} classes)")
    return z.astype(np.float64), y


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of a float [B, K] array, max-shifted for stability."""
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def cross_entropy_per_sample(logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0) -> np.ndarray:
    """float64 [B]: each sample's loss."""
    ls = v.unit_open("label_smoothing", label_smoothing)
    z, y = _rows(logits, labels)
    logp = log_softmax(z)
    k = z.shape[1]
    nll = -logp[np.arange(z.shape[0]), y]
    return (1.0 - ls) * nll - (ls / k) * logp.sum(axis=1)


def cross_entropy_loss(logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0) -> float:
    """The batch loss: mean of the per-sample losses over the B rows given (the local batch)."""
    return float(cross_entropy_per_sample(logits, labels, label_smoothing).mean())


def cross_entropy_grad(
    logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0, scaling: float = 1.0
) -> np.ndarray:
    """dL/dlogits times ``scaling`` (the AMP loss scale, 1 in FP32), same shape and float dtype as the logits."""
    ls = v.unit_open("label_smoothing", label_smoothing)
    s = v.positive("scaling", scaling)
    z, y = _rows(logits, labels)
    b, k = z.shape
    p = np.exp(log_softmax(z))
    target = np.full_like(p, ls / k)
    target[np.arange(b), y] += 1.0 - ls
    g = (p - target) * (s / b)
    src = np.asarray(logits)
    dtype = src.dtype if np.issubdtype(src.dtype, np.floating) else np.float32
    return g.reshape(src.shape).astype(dtype)


def top_k_correct(logits: np.ndarray, labels: np.ndarray, k: int = 1) -> int:
    """How many rows have their label among the k largest logits; ties go to the lower class index.

    With k = 1 this is "argmax, first maximum wins" (the seed's top-1). Softmax is monotonic, so ranking
    logits or probabilities gives the same classes (up to probabilities that underflow to equal values).
    """
    kk = v.integer("k", k, 1)
    z, y = _rows(logits, labels)
    kk = min(kk, z.shape[1])
    order = np.argsort(-z, axis=1, kind="stable")[:, :kk]
    return int((order == y[:, None]).any(axis=1).sum())
