"""The argument rules of the fully connected family (fc_fwd, fc_bwd), written once.

x [N, H, W, C] is read as [N, K = H*W*C], w is [O, 1, 1, K], b has O elements, y and dy are [N, ..., O]. x, w
(and dy) share one dtype: the GEMMs take one input type; y, b, dw, db and dx are any float (AMP: FP16 x, w, dy,
y and bias, FP32 dw and db). Both backends call these at capture and keep only execution.
"""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.errors import DTypeError, ShapeError

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
    return s
