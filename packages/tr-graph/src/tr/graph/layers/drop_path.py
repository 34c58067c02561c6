"""Stochastic depth (drop path): one counter-based keep decision a sample (INT8 [N] mask, pooled) from the
dropout_seed scalar, as dropout's; the identity at inference, and drop_path(0) is removed by the passes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import DropPath
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, LayerKind, LayerProblem


@dataclass(frozen=True, slots=True)
class DropPathParams:
    p: float  # the probability of zeroing a sample's value, in [0, 1)


class DropPathKind(LayerKind):
    kinds = ("drop_path",)
    schema = DropPathParams
    nodes = (DropPath,)
    elementwise = True  # y = x * (a factor per sample): a bn after it normalises what came before it

    def expand(self, node: DropPath, channels: int | None) -> Expansion:
        return Expansion("drop_path", {"p": node.p}, channels)

    def describe(self, layer) -> str:
        return f"drop_path {layer.params['p']}"

    def is_identity(self, layer) -> bool:
        return layer.params["p"] == 0

    def check(self, layer) -> None:
        p = layer.params["p"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 <= p < 1.0:
            raise LayerProblem(f"drop_path p must be in [0, 1), got {p!r}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return [cx.mask("mask", Shape(out.n, 1, 1, 1))]  # one keep decision a sample

    def forward(self, layer, io: IO) -> None:
        io.op("drop_path_fwd", {"p": layer.params["p"]}, x=io.x[0], y=io.y, mask=io.t("mask"), seed="dropout_seed")

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("drop_path_bwd", {"p": layer.params["p"]}, dy=io.dy, mask=io.t("mask"), dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        return io.x[0]  # identity at inference: no op, the next layer reads the input
