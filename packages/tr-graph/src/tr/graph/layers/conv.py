"""Convolution: NHWC cross-correlation, square kernel, weight KRSC [out, k, k, C / g], and with params "bias"
a bias b [out] (in the bias group, as an fc's: no weight decay), initialised as the policy's biases.
With g groups (params "g", default 1) input channel group i (C / g of them) feeds only output channels
i*out/g .. (i+1)*out/g - 1; g = C = out is the depthwise convolution.

The first layer's weight is in group first_conv (its gradient is reduced after the first layer's backward and
it has no input gradient); every other conv's in group deep_conv (tr.graph.layers.groups).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import Conv
from tr.graph.layers.base import (
    IO,
    Decl,
    DeclCtx,
    Expansion,
    Init,
    LayerKind,
    LayerProblem,
    non_negative_int,
    positive_int,
    spatial_out,
)
from tr.graph.layers.groups import DEEP_CONV, FC_B, FIRST_CONV


@dataclass(frozen=True, slots=True)
class ConvParams:
    out: int
    k: int  # square kernel
    s: int = 1
    p: int = 0
    g: int = 1  # groups
    bias: bool = False


def groups(layer) -> int:
    return layer.params["g"]


def describe_conv(layer) -> str:
    p = layer.params
    return f"{layer.kind} {p['out']} k{p['k']} s{p['s']} p{p['p']}" + (f" g{p['g']}" if p["g"] > 1 else "")


def conv_attrs(layer) -> dict[str, int]:
    attrs = {"kernel": layer.params["k"], "stride": layer.params["s"], "padding": layer.params["p"]}
    return {**attrs, "groups": groups(layer)} if groups(layer) > 1 else attrs


def check_conv(layer) -> None:
    positive_int("conv out channels", layer.params["out"])
    positive_int("conv kernel", layer.params["k"])
    positive_int("conv stride", layer.params["s"])
    non_negative_int("conv padding", layer.params["p"])
    g = positive_int("conv groups", groups(layer))
    if layer.params["out"] % g:
        raise LayerProblem(f"conv groups {g} must divide its out channels {layer.params['out']}")


def conv_out_shape(layer, x: Shape) -> Shape:
    g = groups(layer)
    if x.c % g:
        raise LayerProblem(f"conv groups {g} must divide its input's {x.c} channels")
    ho, wo = spatial_out(x, layer.params["k"], layer.params["s"], layer.params["p"], "conv")
    return Shape(x.n, ho, wo, layer.params["out"])


def conv_decls(layer, x: Shape, cx: DeclCtx, bias: bool = False) -> list[Decl]:
    k, out, cg = layer.params["k"], layer.params["out"], x.c // groups(layer)
    group = FIRST_CONV if layer.first else DEEP_CONV
    # fans as torch's: fan_in the weights one output reads (C/g*k*k), fan_out out*k*k
    fan_in, fan_out = cg * k * k, out * k * k
    decls = cx.param("w", group, Shape(out, k, k, cg), Init("weight", fan_in, fan_out, family="conv"))
    if bias:
        decls += cx.param("b", FC_B, Shape(1, 1, 1, out), Init("bias", fan_in, fan_out))
    return decls


class ConvKind(LayerKind):
    kinds = ("conv",)
    schema = ConvParams
    nodes = (Conv,)
    spatial = True
    first_ok = True

    def expand(self, node: Conv, channels: int | None) -> Expansion:
        return Expansion("conv", {"out": node.out, "k": node.k, "s": node.s, "p": node.p, "g": node.groups,
                                  "bias": node.bias}, node.out)

    def describe(self, layer) -> str:
        return describe_conv(layer) + (" bias" if layer.params["bias"] else "")

    def num_params(self, layer, ins, out) -> int:
        o = layer.params["out"]
        return o * layer.params["k"] ** 2 * (ins[0].c // groups(layer)) + (o if layer.params["bias"] else 0)

    def check(self, layer) -> None:
        check_conv(layer)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return conv_out_shape(layer, ins[0])

    def has_params(self, layer) -> bool:
        return True

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return conv_decls(layer, ins[0], cx, layer.params["bias"])

    def forward(self, layer, io: IO) -> None:
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), b=_bias(layer, io), y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        db = io.t("b.grad") if layer.params["bias"] else None
        io.op("conv_bwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), dy=io.dy, dw=io.dw("w"), db=db, dx=dx)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), b=_bias(layer, io), y=io.y)
        return io.y


def _bias(layer, io: IO) -> str | None:
    """The bias as the op reads it (the FP16 copy under AMP), or None."""
    return io.w("b") if layer.params["bias"] else None
