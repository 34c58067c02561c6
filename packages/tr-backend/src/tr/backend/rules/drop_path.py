"""The rules of stochastic depth (drop_path_fwd, drop_path_bwd): p in [0, 1); x and y (dy and dx) of one shape and
any float dtype, whose first dimension N counts the samples; an INT8 keep mask of N elements, one a sample; for the
forward an INT32[2] seed (one uint64, advanced by each launch)."""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import ShapeError


@dataclass(frozen=True, slots=True)
class DropPathCall:
    n: int  # samples: one keep decision each
    per_sample: int  # elements of one sample
    p: float  # the probability of dropping a sample's branch


def _p(b: CallBinder) -> float:
    p = b.float_attr("p", lo=0.0)
    if p >= 1.0:
        b.fail(f"drop path probability p must be in [0, 1), got {p}")
    return p


def _call(b: CallBinder, x: str, y: str) -> DropPathCall:
    p = _p(b)
    xt, yt = b.tensor(x), b.tensor(y)
    if yt.shape != xt.shape:
        b.fail(f"{y} {yt.shape} must have {x}'s shape {xt.shape}", ShapeError)
    n = xt.shape.n
    b.expect_dtype("mask", DType.INT8)
    b.expect_numel("mask", n)  # one keep decision a sample
    b.expect_float(x, y)
    return DropPathCall(n, xt.numel // n, p)


def drop_path_fwd(b: CallBinder) -> DropPathCall:
    r = _call(b, "x", "y")
    b.expect_dtype("seed", DType.INT32)
    b.expect_numel("seed", 2)
    return r


def drop_path_bwd(b: CallBinder) -> DropPathCall:
    return _call(b, "dy", "dx")
