"""Convolution: NHWC cross-correlation, square kernel, weight KRSC [out, k, k, C], no bias (a BN follows).

The first layer's weight lives in W_FIRST_CONV (its gradient is reduced in the first communication
bucket and it has no input gradient); every other conv's in W_DEEP_CONV.
"""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.shape import Shape
from tr.graph.layers.base import IO, Decl, DeclCtx, Init, LayerKind, non_negative_int, positive_int, spatial_out


def conv_attrs(layer) -> dict[str, int]:
    return {"kernel": layer.params["k"], "stride": layer.params["s"], "padding": layer.params["p"]}


def check_conv(layer) -> None:
    positive_int("conv out channels", layer.params["out"])
    positive_int("conv kernel", layer.params["k"])
    positive_int("conv stride", layer.params["s"])
    non_negative_int("conv padding", layer.params["p"])


def conv_out_shape(layer, x: Shape) -> Shape:
    ho, wo = spatial_out(x, layer.params["k"], layer.params["s"], layer.params["p"], "conv")
    return Shape(x.n, ho, wo, layer.params["out"])


def conv_decls(layer, x: Shape, cx: DeclCtx) -> list[Decl]:
    k, out = layer.params["k"], layer.params["out"]
    group = "first_conv" if layer.first else "deep_conv"
    return cx.param("w", group, Shape(out, k, k, x.c), Init("weight", x.c * k * k, out * k * k))


class ConvKind(LayerKind):
    kinds = ("conv",)
    spatial = True

    def num_params(self, layer, ins, out) -> int:
        return layer.params["out"] * layer.params["k"] ** 2 * ins[0].c

    def check(self, layer) -> None:
        check_conv(layer)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return conv_out_shape(layer, ins[0])

    def has_params(self, layer) -> bool:
        return True

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return conv_decls(layer, ins[0], cx)

    def forward(self, layer, io: IO) -> None:
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        io.op("conv_bwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), dy=io.dy, dw=io.dw("w"), dx=dx)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), y=io.y)
        return io.y
