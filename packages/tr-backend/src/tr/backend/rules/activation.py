"""The rules of the element-wise activations (act_fwd, act_inf, act_bwd; kinds tr.core.ops.ACTIVATIONS): x, y
(dy, dx) of one element count and any float, dx of dy's dtype, and an optional INT8 mask [x > 0] of that
count, which relu's backward reads instead of x."""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.ops import ACTIVATION_CODES, ACTIVATIONS


@dataclass(frozen=True, slots=True)
class Activation:
    kind: str
    n: int
    mask: bool  # the forward writes the mask / the backward reads it

    @property
    def code(self) -> int:  # the native ops' kind number (csrc/ops/codes.hpp's ActKind)
        return ACTIVATION_CODES[self.kind]


def _kind(b: CallBinder) -> str:
    kind = b.attr("kind")
    if kind not in ACTIVATIONS:
        b.fail(f"activation kind {kind!r} is not one of {list(ACTIVATIONS)}")
    return kind


def act_fwd(b: CallBinder, with_mask: bool) -> Activation:
    """act_fwd (``with_mask``: writes the mask when given) or act_inf."""
    kind = _kind(b)
    n = b.same_numel("x", "y", "mask")
    b.expect_float("x", "y")
    mask = with_mask and b.has("mask")
    if mask:
        b.expect_dtype("mask", DType.INT8)
    return Activation(kind, n, mask)


def act_bwd(b: CallBinder) -> Activation:
    kind = _kind(b)
    n = b.same_numel("x", "dy", "dx", "mask")
    b.expect_float("x", "dy", "dx")
    if b.dtype("dx") is not b.dtype("dy"):
        b.fail(f"dx is {b.dtype('dx').name} but dy is {b.dtype('dy').name}; expected one dtype")
    mask = kind == "relu" and b.has("mask")
    if mask:
        b.expect_dtype("mask", DType.INT8)
    return Activation(kind, n, mask)
