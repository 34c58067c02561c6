"""Dropout: counter-based keep mask (INT8, pooled) from the dropout_seed scalar; absent from inference."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import Dropout
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, LayerKind, LayerProblem


@dataclass(frozen=True, slots=True)
class DropoutParams:
    p: float  # the probability of zeroing an element, in [0, 1)


class DropoutKind(LayerKind):
    kinds = ("dropout",)
    schema = DropoutParams
    nodes = (Dropout,)
    elementwise = True

    def expand(self, node: Dropout, channels: int | None) -> Expansion:
        return Expansion("dropout", {"p": node.p}, channels)

    def describe(self, layer) -> str:
        return f"dropout {layer.params['p']}"

    def is_identity(self, layer) -> bool:
        return layer.params["p"] == 0

    def check(self, layer) -> None:
        p = layer.params["p"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 <= p < 1.0:
            raise LayerProblem(f"dropout p must be in [0, 1), got {p!r}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return [cx.mask("mask", out)]

    def forward(self, layer, io: IO) -> None:
        io.op("dropout_fwd", {"p": layer.params["p"]}, x=io.x[0], y=io.y, mask=io.t("mask"), seed="dropout_seed")

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("dropout_bwd", {"p": layer.params["p"]}, dy=io.dy, mask=io.t("mask"), dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        return io.x[0]  # identity at inference: no op, the next layer reads the input
