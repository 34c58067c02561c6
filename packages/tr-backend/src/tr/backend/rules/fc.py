"""The argument rules of the fully connected family (fc_fwd, fc_bwd), written once.

x [N, H, W, C] is read as [N, K = H*W*C], w is [O, 1, 1, K], b has O elements, y and dy are [N, ..., O]. x, w
(and dy) share one dtype: the GEMMs take one input type; y, b, dw, db and dx are any float (AMP: FP16 x, w, dy,
y and bias, FP32 dw and db). Both backends call these at capture and keep only execution.

The relu mask (fc_fwd's optional output, fc_bwd's optional input: the backward of a relu fused into the next
FC's dx GEMM) is cuBLASLt's RELU_AUX layout: per sample ``ld = mask_ld(features)`` bits, bit f of sample n at
bit n*ld + f, least significant bit first, stored as INT8 [N, 1, 1, ld/8] (tr.core.ops.relu_mask_ld).
"""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError
from tr.core.ops import relu_mask_bytes as mask_bytes
from tr.core.ops import relu_mask_ld as mask_ld

ACTIVATIONS = (None, "relu")


@dataclass(frozen=True, slots=True)
class FcShape:
    n: int  # rows (samples)
    k: int  # inputs per sample
    o: int  # outputs per sample


def _dims(b: CallBinder) -> FcShape:
    xt, wt = b.tensor("x"), b.tensor("w")
    n, k = xt.shape.n, xt.shape.per_sample()
    o = wt.shape.n
    if wt.shape.per_sample() != k:
        b.fail(f"w {wt.shape} holds {wt.shape.per_sample()} inputs per output but x {xt.shape} has {k}", ShapeError)
    if xt.dtype is not wt.dtype:
        b.fail(f"x is {xt.dtype.name} but w is {wt.dtype.name}; the GEMM needs one input dtype", DTypeError)
    return FcShape(n, k, o)


def _rows(b: CallBinder, name: str, n: int, per: int) -> None:
    t = b.tensor(name)
    if t.shape.n != n or t.shape.per_sample() != per:
        b.fail(f"{name} {t.shape} must be [{n}, ..., {per} per sample]", ShapeError)


def _mask(b: CallBinder, n: int, features: int, what: str) -> None:
    b.expect_dtype("mask", DType.INT8)
    t = b.tensor("mask")
    if t.shape.n != n or t.shape.per_sample() != mask_bytes(features):
        b.fail(f"mask {t.shape} must be [{n}, 1, 1, {mask_bytes(features)}]: {mask_ld(features)} bits a sample for "
               f"the {features} {what}", ShapeError)


def fwd(b: CallBinder) -> tuple[FcShape, bool]:
    """fc_fwd's shape and whether a ReLU follows."""
    s = _dims(b)
    _rows(b, "y", s.n, s.o)
    act = b.attr("activation", None)
    if act not in ACTIVATIONS:
        b.fail(f"activation must be None or 'relu', got {act!r}")
    b.expect_float("x", "w", "b", "y")
    if b.has("b"):
        b.expect_numel("b", s.o)
    if b.has("mask"):
        if act != "relu":
            b.fail("a mask is the relu's: fc_fwd writes one only with activation 'relu'")
        _mask(b, s.n, s.o, "outputs")
    return s, act == "relu"


def bwd(b: CallBinder) -> FcShape:
    """fc_bwd's shape: dw always, db and dx when given."""
    s = _dims(b)
    _rows(b, "dy", s.n, s.o)
    b.expect_numel("dw", s.o * s.k)
    b.expect_float("x", "w", "dy", "dw", "db", "dx")
    if b.dtype("dy") is not b.dtype("x"):
        b.fail(f"dy is {b.dtype('dy').name} but x is {b.dtype('x').name}; the GEMMs need one input dtype",
               DTypeError)
    if b.has("db"):
        b.expect_numel("db", s.o)
    if b.has("dx"):
        _rows(b, "dx", s.n, s.k)
    if b.has("mask"):
        if not b.has("dx"):
            b.fail("a mask applies the input's relu to dx; fc_bwd has no dx here")
        _mask(b, s.n, s.k, "inputs")
    return s
