"""Channel padding: [N,H,W,C] -> [N,H,W,C'] with C' = C rounded up to a multiple (8: the seed's C -> ceil8), the
new channels zero. The backward keeps the first C channels of the gradient; as the first layer it has no input
gradient to write, so it emits nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import ChannelPadding
from tr.graph.layers.base import IO, Expansion, LayerKind, positive_int


@dataclass(frozen=True, slots=True)
class ChannelPadParams:
    multiple: int = 8


def padded(c: int, multiple: int) -> int:
    return -(-c // multiple) * multiple


class ChannelPadKind(LayerKind):
    kinds = ("channel_pad",)
    schema = ChannelPadParams
    nodes = (ChannelPadding,)
    first_ok = True

    def expand(self, node: ChannelPadding, channels: int | None) -> Expansion:
        good = channels is not None and isinstance(node.multiple, int) and node.multiple >= 1  # (check names it)
        return Expansion("channel_pad", {"multiple": node.multiple},
                         padded(channels, node.multiple) if good else channels)

    def describe(self, layer) -> str:
        return f"channel_pad {layer.params['multiple']}"

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
