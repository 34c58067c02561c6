"""Channel scaling y = x * s, the join of a squeeze-excitation (blueprint.se): x [H,W,C] a sample, s [1,1,C] its
factors (the gate branch's sigmoid). Backward: ds sums dy * x over H and W; dx = dy * s (when x needs it)."""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.shape import Shape
from tr.graph.layers.base import IO, LayerKind, LayerProblem


class ScaleKind(LayerKind):
    kinds = ("scale",)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        x, s = ins
        if (s.h, s.w, s.c) != (1, 1, x.c):
            raise LayerProblem(f"se join: the gate gives {s} but x {x} needs one factor per channel, [1,1,{x.c}]")
        return x

    def forward(self, layer, io: IO) -> None:
        io.op("scale_fwd", x=io.x[0], s=io.x[1], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("scale_bwd", x=io.x[0], s=io.x[1], dy=io.dy, ds=io.dx[1], dx=io.dx_or_none(0))
        return [io.dx[0] if io.need[0] else None, io.dx[1]]

    def inference(self, layer, io: IO) -> str:
        io.op("scale_fwd", x=io.x[0], s=io.x[1], y=io.y)
        return io.y
