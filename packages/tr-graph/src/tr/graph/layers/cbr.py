"""CBR: conv -> batch norm -> relu as one ArchPlan layer (formed under AMP by the fusion pass).

The catalogue has no fused CBR op, so the layer emits conv_fwd + bn_fwd + act_fwd (and their backward
and inference counterparts); the unit still matters: the conv output and the BN output are internal
tensors of the layer, and a CBR that opens the network is the first layer as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from tr.core.shape import Shape
from tr.graph.layers.activation import act_backward
from tr.graph.layers.base import IO, Decl, DeclCtx, LayerKind
from tr.graph.layers.bn import bn_backward, bn_decls, bn_forward, bn_inference, check_bn
from tr.graph.layers.conv import check_conv, conv_attrs, conv_decls, conv_out_shape


class CBRKind(LayerKind):
    kinds = ("cbr",)

    def check(self, layer) -> None:
        check_conv(layer)
        check_bn(layer.params["momentum"], layer.params["eps"])

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return conv_out_shape(layer, ins[0])

    def has_params(self, layer) -> bool:
        return True

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return (conv_decls(layer, ins[0], cx) + bn_decls(out.c, layer.params["eps"], cx)
                + [cx.feature("conv_y", out, "train"), cx.feature("bn_y", out, "train"),
                   cx.feature("conv_y@inf", out, "inf"), cx.feature("bn_y@inf", out, "inf"),
                   cx.grad("relu_dx", out), cx.grad("bn_dx", out)])

    def forward(self, layer, io: IO) -> None:
        p = layer.params
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), y=io.t("conv_y"))
        bn_forward(io, p["momentum"], p["eps"], io.t("conv_y"), io.t("bn_y"))
        io.op("act_fwd", {"kind": p["act"]}, x=io.t("bn_y"), y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        p = layer.params
        act_backward(io, p["act"], io.t("bn_y"), io.y, io.dy, io.t("relu_dx"))
        bn_backward(io, p["eps"], io.t("conv_y"), io.t("relu_dx"), io.t("bn_dx"))
        dx = io.dx_or_none(0)
        io.op("conv_bwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), dy=io.t("bn_dx"), dw=io.dw("w"), dx=dx)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        p = layer.params
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), y=io.t("conv_y@inf"))
        bn_inference(io, io.t("conv_y@inf"), io.t("bn_y@inf"))
        io.op("act_inf", {"kind": p["act"]}, x=io.t("bn_y@inf"), y=io.y)
        return io.y
