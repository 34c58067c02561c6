"""Flatten: [N,H,W,C] -> [N,1,1,H*W*C] in NHWC order (a compacting copy when channels are padded)."""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.shape import Shape
from tr.graph.blueprint import Flatten
from tr.graph.layers.base import IO, Expansion, LayerKind


class FlattenKind(LayerKind):
    kinds = ("flatten",)
    nodes = (Flatten,)
    first_ok = True
    flat_output = True

    def expand(self, node: Flatten, channels: int | None) -> Expansion:
        return Expansion("flatten", {}, None)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return Shape(ins[0].n, 1, 1, ins[0].per_sample())

    def forward(self, layer, io: IO) -> None:
        io.op("flatten_fwd", x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("flatten_bwd", dy=io.dy, dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        io.op("flatten_fwd", x=io.x[0], y=io.y)
        return io.y
