"""The argument rules of the batch-norm family (bn_fwd, bn_bwd, bn_inf, bn_update_eq), written once.

Both backends call these at capture and keep only execution. Every feature tensor of one call (x, y, z,
dy, dz, dx) has one dtype, and every per-channel tensor (gamma, beta, running and saved statistics, folded
scale and bias, their gradients) is FP32 with one element per channel of x.
"""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder, Geometry, window_geometry
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError
from tr.core.ops import BN_ACTIVATION_CODES, BN_ACTIVATIONS, BN_MASK_CODES

_FWD_VEC = ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std")
_BWD_VEC = ("gamma", "beta", "saved_mean", "saved_inv_std", "dgamma", "dbeta")


@dataclass(frozen=True, slots=True)
class BnShape:
    m: int  # rows: N*H*W
    c: int  # channels
    act: str | None  # None, "relu", "relu6" or "silu"

    @property
    def act_code(self) -> int:  # the native ops' act (csrc/ops/codes.hpp's BnAct)
        return BN_ACTIVATION_CODES[self.act]


@dataclass(frozen=True, slots=True)
class BnFwd(BnShape):
    momentum: float
    eps: float
    residual: bool  # z is added before the activation


@dataclass(frozen=True, slots=True)
class BnBwd(BnShape):
    mask: str  # "" (no activation), "y" (read from y) or "x" (recomputed from x, gamma, beta)
    dz: bool  # the residual's gradient is written
    dy2: bool  # a second gradient contribution is added to dy

    @property
    def mask_code(self) -> int:  # the native op's mask (csrc/ops/codes.hpp's BnMask)
        return BN_MASK_CODES[self.mask, self.act]


def _activation(b: CallBinder) -> str | None:
    act = b.attr("activation", None)
    if act not in BN_ACTIVATIONS:
        b.fail(f"activation must be one of {BN_ACTIVATIONS}, got {act!r}")
    return act


def features(b: CallBinder, names: tuple[str, ...], what: str = "a BN call") -> tuple[int, int]:
    """Rows and channels of x; every present feature tensor has x's shape and dtype (the per-channel families,
    batch and layer norm, share it)."""
    x = b.tensor("x")
    b.expect_float("x")
    for name in names:
        if not b.has(name):
            continue
        t = b.tensor(name)
        if t.shape != x.shape:
            b.fail(f"{name} {t.shape} must have x's shape {x.shape}", ShapeError)
        if t.dtype is not x.dtype:
            b.fail(f"{name} is {t.dtype.name} but x is {x.dtype.name}; {what} has one feature dtype",
                   DTypeError)
    c = x.shape.c
    return x.numel // c, c


def _per_channel(b: CallBinder, c: int, names: tuple[str, ...]) -> None:
    for name in names:
        if not b.has(name):
            continue
        t = b.tensor(name)
        if t.numel != c:
            b.fail(f"{name} has {t.numel} elements, expected {c} (one per channel)", ShapeError)
        if t.dtype is not DType.FP32:
            b.fail(f"{name} is {t.dtype.name}; per-channel BN tensors are FP32", DTypeError)


def bn_fwd_rules(b: CallBinder) -> BnFwd:
    m, c = features(b, ("y", "z"))
    _per_channel(b, c, _FWD_VEC)
    act = _activation(b)
    if act == "silu" and b.has("z"):
        b.fail("a residual joins before relu or relu6 only: silu's backward recomputes its input from x alone")
    return BnFwd(m, c, act, b.float_attr("momentum", 0.1, 0.0, 1.0), b.float_attr("eps", 1e-5, 0.0), b.has("z"))


def bn_bwd_rules(b: CallBinder) -> BnBwd:
    m, c = features(b, ("dy", "dx", "y", "dz", "dy2"))
    _per_channel(b, c, _BWD_VEC)
    act = _activation(b)
    b.float_attr("eps", 1e-5, 0.0)
    if act is None:
        mask = ""
    elif act == "silu" and (b.has("y") or b.has("dz")):
        b.fail("silu's slope is recomputed from x alone (pass beta, not y): no residual can join before it")
    elif b.has("y"):
        mask = "y"
    elif b.has("beta"):
        if b.has("dz"):
            b.fail(f"with a residual, activation {act!r}'s mask must be read from y: recomputing it from x would "
                   "leave out the residual")
        mask = "x"
    else:
        b.fail(f"activation {act!r} needs the forward's output y or beta (to recompute the mask from x)")
    return BnBwd(m, c, act, mask, b.has("dz"), b.has("dy2"))


@dataclass(frozen=True, slots=True)
class BnPool:
    m: int  # rows of x: N*H*W
    c: int
    geo: Geometry  # the pooling window over x -> y
    momentum: float
    eps: float


MAX_TAPS = 127  # the INT8 mask holds the window position


def _pool(b: CallBinder, full: str, pooled: str) -> tuple[int, int, Geometry]:
    """x (and dx) at full resolution, y (or dy) pooled with x's dtype and channels, the INT8 mask like it."""
    m, c = features(b, ("dx",))
    geo = window_geometry(b, full, pooled)
    p = b.tensor(pooled)
    if p.shape.c != c or p.dtype is not b.tensor("x").dtype:
        b.fail(f"{pooled} {p.shape} {p.dtype.name} must have x's channels and dtype ({c}, "
               f"{b.tensor('x').dtype.name})", ShapeError)
    if geo.kh * geo.kw > MAX_TAPS:
        b.fail(f"a {geo.kh}x{geo.kw} window has {geo.kh * geo.kw} positions; the INT8 mask holds at most {MAX_TAPS}")
    b.expect_dtype("mask", DType.INT8)
    if b.tensor("mask").shape != p.shape:
        b.fail(f"mask {b.tensor('mask').shape} must have {pooled}'s shape {p.shape}", ShapeError)
    return m, c, geo


def bn_maxpool_fwd_rules(b: CallBinder) -> BnPool:
    m, c, geo = _pool(b, "x", "y")
    _per_channel(b, c, _FWD_VEC)
    return BnPool(m, c, geo, b.float_attr("momentum", 0.1, 0.0, 1.0), b.float_attr("eps", 1e-5, 0.0))


def bn_maxpool_bwd_rules(b: CallBinder) -> BnPool:
    m, c, geo = _pool(b, "x", "dy")
    _per_channel(b, c, _BWD_VEC)
    return BnPool(m, c, geo, 0.0, b.float_attr("eps", 1e-5, 0.0))


def bn_inf_rules(b: CallBinder) -> BnFwd:
    m, c = features(b, ("y", "z"))
    _per_channel(b, c, ("scale", "bias"))
    return BnFwd(m, c, _activation(b), 0.0, 0.0, b.has("z"))


def bn_update_eq_rules(b: CallBinder) -> tuple[int, float]:
    c = b.tensor("gamma").numel
    _per_channel(b, c, ("gamma", "beta", "mean", "var", "scale", "bias"))
    return c, b.float_attr("eps", 1e-5, 0.0)
