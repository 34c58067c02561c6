"""The argument rules of the attention family (attention_fwd, attention_bwd), written once.

Tokens are NHWC [N,1,T,C]: H = 1, the T tokens along W. qkv [N,1,T,3D] holds q, k and v of D channels each per
token; y and dy are [N,1,T,D] and dqkv has qkv's shape. Every token tensor of one call has one float dtype (FP32,
FP16 or BF16); stats (each softmax row's log-sum-exp) is FP32 [N,1,heads,T], written by attention_fwd in training
(inference passes none) and read by attention_bwd. Attributes: heads (an integer >= 1
dividing D) and scale (the scores' factor, a finite number > 0, usually 1 / sqrt(D / heads)); both required.

Dropout on the probabilities: the attribute ``dropout`` (p in [0, 1); absent: 0). With p > 0 the forward is a
training one (stats given) and takes the dropout stream ``seed`` (INT32[2], advanced by the launch) and the layer's
``key`` (INT32[2], where the forward leaves the draw's key), and the backward takes that key; with p = 0 neither
is given, so a call without dropout is exactly the call of a model that has none.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from tr.backend.binding import FLOATS, CallBinder
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError


@dataclass(frozen=True, slots=True)
class AttentionCall:
    n: int  # samples
    t: int  # tokens
    d: int  # y's channels: the heads' outputs concatenated
    heads: int
    scale: float
    stats: bool  # attention_fwd: the log-sum-exp is saved (training)
    dropout: float = 0.0  # the probabilities' drop probability (0: none)

    @property
    def dh(self) -> int:  # channels a head
        return self.d // self.heads


def _tokens(b: CallBinder, name: str) -> tuple[int, int, int]:
    """(N, T, C) of a token tensor, which must be [N,1,T,C]."""
    t = b.tensor(name)
    if t.shape.h != 1:
        b.fail(f"{name} {t.shape} must be [N,1,T,C]: tokens lie along W, with H = 1", ShapeError)
    n, _, w, c = t.shape.dims
    return n, w, c


def _same_dtype(b: CallBinder, names: tuple[str, ...]) -> None:
    dt = b.dtype("qkv")
    if dt not in FLOATS:
        b.fail(f"qkv is {dt.name}; attention takes FP32, FP16 or BF16 tokens", DTypeError)
    for name in names:
        if b.dtype(name) is not dt:
            b.fail(f"{name} is {b.dtype(name).name} but qkv is {dt.name}; an attention call has one float dtype",
                   DTypeError)


def _attrs(b: CallBinder) -> tuple[int, float]:
    heads = b.int_attr("heads", lo=1)
    v = b.attr("scale")
    scale = float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else math.nan
    if not (math.isfinite(scale) and scale > 0):  # also refuses NaN: a typo'd scale fails here, not in training
        b.fail(f"attribute 'scale' must be a finite number > 0, got {v!r}")
    return heads, scale


def _rules(b: CallBinder, y_like: tuple[str, ...], qkv_like: tuple[str, ...],
           keys: tuple[str, ...]) -> AttentionCall:
    heads, scale = _attrs(b)
    n, t, c3 = _tokens(b, "qkv")
    if c3 % 3:
        b.fail(f"qkv {b.tensor('qkv').shape} has {c3} channels; it must hold q, k and v of D channels each "
               "(C = 3 * D)", ShapeError)
    d = c3 // 3
    for name in y_like:
        yn, yt, yc = _tokens(b, name)
        if (yn, yt) != (n, t):
            b.fail(f"{name} {b.tensor(name).shape} must have qkv's N = {n} and T = {t} "
                   f"(qkv {b.tensor('qkv').shape})", ShapeError)
        if yc * 3 != c3:
            b.fail(f"{name} {b.tensor(name).shape} has {yc} channels; qkv's {c3} must be 3 times as many "
                   f"(q, k, v of D = {d} each)", ShapeError)
    for name in qkv_like:
        if b.tensor(name).shape != b.tensor("qkv").shape:
            b.fail(f"{name} {b.tensor(name).shape} must have qkv's shape {b.tensor('qkv').shape}", ShapeError)
    if d % heads:
        b.fail(f"attribute 'heads' = {heads} must divide D = {d} (y's channels: qkv's {c3} / 3)")
    if b.has("stats"):  # (attention_bwd's is required: the catalogue check refuses a call without it)
        st = b.tensor("stats")
        if st.shape.dims != (n, 1, heads, t):
            b.fail(f"stats {st.shape} must be [{n},1,{heads},{t}] ([N,1,heads,T]: one log-sum-exp per softmax "
                   "row)", ShapeError)
        if st.dtype is not DType.FP32:
            b.fail(f"stats is {st.dtype.name}; the softmax rows' log-sum-exp is FP32", DTypeError)
    _same_dtype(b, y_like + qkv_like)
    return AttentionCall(n, t, d, heads, scale, b.has("stats"), _dropout(b, keys))


def _dropout(b: CallBinder, keys: tuple[str, ...]) -> float:
    """The attribute dropout (0 when absent), checked with the INT32[2] tensors ``keys`` it needs when > 0."""
    p = b.float_attr("dropout", 0.0, lo=0.0)
    if p >= 1.0:
        b.fail(f"attribute 'dropout' (the probabilities' drop probability) must be in [0, 1), got {p}")
    if p == 0.0:
        given = [name for name in keys if b.has(name)]
        if given:
            b.fail(f"{' and '.join(given)} given without dropout: they are read only with dropout > 0")
        return 0.0
    if "seed" in keys and not b.has("stats"):
        b.fail(f"dropout = {p} is a training forward's, which saves stats; inference passes no stats and no dropout")
    for name in keys:
        if not b.has(name):
            b.fail(f"dropout = {p} needs {name!r} (INT32[2]: one uint64; the forward advances the dropout stream "
                   "'seed' and leaves the draw's 'key' for the backward)")
        b.expect_dtype(name, DType.INT32)
        b.expect_numel(name, 2)
    return p


def attention_fwd_rules(b: CallBinder) -> AttentionCall:
    return _rules(b, ("y",), (), ("seed", "key"))


def attention_bwd_rules(b: CallBinder) -> AttentionCall:
    return _rules(b, ("y", "dy"), ("dqkv",), ("key",))
