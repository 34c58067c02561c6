"""The rules of the token ops (a Vision Transformer's token sequence; tokens are [N, 1, T, C] in tr's shapes).

tokens_fwd: x [N, H, W, C] (a patch embedding's output, its H*W positions the patch tokens in row order) -> y
[N, 1, T, C] with T = H*W + 1 when a class token cls [1, 1, 1, C] leads the sequence, else H*W; a position
embedding pos [1, 1, T, C], when given, is added to every sample's tokens. cls and pos are FP32 (masters: the
kernels read them whatever the feature type); x and y any float. tokens_bwd: dx, and the sums over the batch of
dy into dcls (token 0) and dpos, FP32. token_pick_fwd / token_pick_bwd: token 0 of x [N, 1, T, C] as y
[N, 1, 1, C] (class-token pooling), and its gradient (zero at the other tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.errors import DTypeError, ShapeError
from tr.core.shape import Shape


@dataclass(frozen=True)
class TokenSizes:
    n: int  # samples
    p: int  # patch tokens (the input's H*W)
    t: int  # tokens of the sequence: p + 1 with a class token
    c: int  # channels
    cls: bool
    pos: bool


def _fp32_param(b: CallBinder, name: str, shape: Shape) -> bool:
    if not b.has(name):
        return False
    t = b.tensor(name)
    if t.shape != shape:
        b.fail(f"{name} {t.shape} must be {shape}", ShapeError)
    if t.dtype is not DType.FP32:
        b.fail(f"{name} must be FP32 (a master parameter), got {t.dtype.name}", DTypeError)
    return True


def _sizes(b: CallBinder, x_name: str, y_name: str, cls_name: str, pos_name: str) -> TokenSizes:
    x, y = b.tensor(x_name).shape, b.tensor(y_name).shape
    p = x.h * x.w
    if y.h != 1 or y.n != x.n or y.c != x.c or y.w not in (p, p + 1):
        b.fail(f"{y_name} {y} must be [{x.n}, 1, T, {x.c}] with T = {p} patch tokens (+ 1 with a class token) "
               f"of {x_name} {x}", ShapeError)
    cls = _fp32_param(b, cls_name, Shape(1, 1, 1, x.c))
    if cls != (y.w == p + 1):
        b.fail(f"{y_name} holds {y.w} tokens for {p} patches: a class token ({cls_name}) is "
               f"{'given' if cls else 'absent'}", ShapeError)
    pos = _fp32_param(b, pos_name, Shape(1, 1, y.w, x.c))
    b.expect_float(x_name, y_name)
    return TokenSizes(x.n, p, y.w, x.c, cls, pos)


def tokens_fwd(b: CallBinder) -> TokenSizes:
    return _sizes(b, "x", "y", "cls", "pos")


def tokens_bwd(b: CallBinder) -> TokenSizes:
    """dx may be absent (nothing before the tokens is trained): the patch count is then dy's tokens less the class
    token's (dcls given)."""
    if b.has("dx"):
        return _sizes(b, "dx", "dy", "dcls", "dpos")
    dy = b.tensor("dy").shape
    cls = _fp32_param(b, "dcls", Shape(1, 1, 1, dy.c))
    if dy.h != 1 or dy.w - int(cls) < 1:
        b.fail(f"dy {dy} must be tokens [N, 1, T, C] with at least one patch token", ShapeError)
    pos = _fp32_param(b, "dpos", Shape(1, 1, dy.w, dy.c))
    b.expect_float("dy")
    return TokenSizes(dy.n, dy.w - int(cls), dy.w, dy.c, cls, pos)


def token_pick(b: CallBinder, x_name: str, y_name: str) -> tuple[int, int, int]:
    """(N, T, C) of token_pick_fwd (x, y) and token_pick_bwd (dx, dy)."""
    x, y = b.tensor(x_name).shape, b.tensor(y_name).shape
    if x.h != 1 or x.w < 1 or y != Shape(x.n, 1, 1, x.c):
        b.fail(f"{y_name} {y} must be [{x.n}, 1, 1, {x.c}]: token 0 of {x_name} {x} ([N, 1, T, C])", ShapeError)
    b.expect_float(x_name, y_name)
    return x.n, x.w, x.c
