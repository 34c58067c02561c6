"""Channel padding: [N,H,W,C] -> [N,H,W,C'] with C' = C rounded up to a multiple (8: the seed's C -> ceil8), the
new channels zero. The backward keeps the first C channels of the gradient; as the first layer it has no input
gradient to write, so it emits nothing."""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.shape import Shape
from tr.graph.layers.base import IO, LayerKind, positive_int


def padded(c: int, multiple: int) -> int:
    return -(-c // multiple) * multiple


class ChannelPadKind(LayerKind):
    kinds = ("channel_pad",)

    def check(self, layer) -> None:
        positive_int("channel_padding multiple", layer.params["multiple"])

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        x = ins[0]
        return Shape(x.n, x.h, x.w, padded(x.c, layer.params["multiple"]))

    def forward(self, layer, io: IO) -> None:
        io.op("channel_pad_fwd", x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        if dx is not None:
            io.op("channel_pad_bwd", dy=io.dy, dx=dx)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("channel_pad_fwd", x=io.x[0], y=io.y)
        return io.y
