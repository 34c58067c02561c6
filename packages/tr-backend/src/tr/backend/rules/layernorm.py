"""The argument rules of the layer-norm family (ln_fwd, ln_bwd), written once.

x [N,H,W,C] is normalised row by row: each of its N*H*W positions over its C values. Every feature tensor of
one call (x, y, dy, dx) has x's shape and one float dtype (FP32, FP16 or BF16); gamma and beta (and their
gradients dgamma, dbeta) are FP32 [1,1,1,C]; the saved statistics are FP32 [N,H,W,1], one value per row of x.
ln_fwd writes the saved statistics in training (both or neither); ln_bwd reads them, and writes dx unless it
is None (a first layer).

The residual join fused in (tr.graph.passes.fuse_add_norm): ln_fwd's z, a feature tensor like x, makes the normalised
row x + z, which sum (optional, only with z) receives; ln_bwd's dx2, a feature tensor like dx and only with it, is
added to dx.
"""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.backend.rules.bn import features
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError

STATS = ("saved_mean", "saved_rstd")


@dataclass(frozen=True, slots=True)
class LnCall:
    rows: int  # N*H*W
    c: int  # values normalised together
    eps: float  # ln_fwd's; 0 for ln_bwd (the saved rstd includes it)
    stats: bool  # ln_fwd: the saved statistics are written (training)
    dx: bool  # ln_bwd: the input gradient is written
    residual: bool = False  # ln_fwd: z is given (the row is x + z); ln_bwd: dx2 is added to dx
    sum: bool = False  # ln_fwd: x + z is written to sum


def _features(b: CallBinder, names: tuple[str, ...]) -> tuple[int, int]:
    """(rows, C) of x, an [N,H,W,C] tensor; every given feature tensor has x's shape and dtype."""
    if len(b.tensor("x").shape.dims) != 4:
        b.fail(f"x {b.tensor('x').shape} must be [N,H,W,C]", ShapeError)
    return features(b, names, "a layer-norm call")


def _fp32(b: CallBinder, name: str, dims: tuple[int, ...], what: str) -> None:
    t = b.tensor(name)
    if t.shape.dims != dims:
        b.fail(f"{name} {t.shape} must be [{','.join(map(str, dims))}] ({what})", ShapeError)
    if t.dtype is not DType.FP32:
        b.fail(f"{name} is {t.dtype.name}; {what} is FP32", DTypeError)


def _per_channel(b: CallBinder, c: int, names: tuple[str, ...]) -> None:
    for name in names:
        _fp32(b, name, (1, 1, 1, c), "one value per channel of x")


def _stats(b: CallBinder) -> None:
    n, h, w, _ = b.tensor("x").shape.dims
    for name in STATS:
        _fp32(b, name, (n, h, w, 1), "one statistic per row of x")


def ln_fwd_rules(b: CallBinder) -> LnCall:
    rows, c = _features(b, ("y", "z", "sum"))
    if b.has("sum") and not b.has("z"):
        b.fail("sum is given without z: it receives x + z, the residual join fused in")
    _per_channel(b, c, ("gamma", "beta"))
    given = [name for name in STATS if b.has(name)]
    if len(given) == 1:
        missing = next(name for name in STATS if name not in given)
        b.fail(f"{given[0]} is given without {missing}: training writes both saved statistics, inference neither")
    if given:
        _stats(b)
    eps = b.float_attr("eps", 1e-5, 0.0)
    if eps <= 0:  # a constant row would give 0 * inf = NaN
        b.fail(f"attribute 'eps' = {eps!r} must be > 0")
    return LnCall(rows, c, eps, bool(given), False, b.has("z"), b.has("sum"))


def ln_bwd_rules(b: CallBinder) -> LnCall:
    # (the saved statistics are required arguments: the catalogue check refuses a call without them)
    rows, c = _features(b, ("dy", "dx", "dx2"))
    if b.has("dx2") and not b.has("dx"):
        b.fail("dx2 is given without dx: it is added to the input gradient dx")
    _per_channel(b, c, ("gamma", "dgamma", "dbeta"))
    _stats(b)
    return LnCall(rows, c, 0.0, True, b.has("dx"), b.has("dx2"))
