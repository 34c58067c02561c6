"""Pooling: max (with an INT8 argmax mask for the backward), average (padding excluded), global average."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.blueprint import GAP, AvgPool, MaxPool
from tr.graph.layers.base import (
    IO,
    Decl,
    DeclCtx,
    Expansion,
    LayerKind,
    LayerProblem,
    non_negative_int,
    positive_int,
    spatial_out,
)

MAX_MASK_KERNEL = 11  # the INT8 mask stores kh*k+kw, so k*k - 1 must fit in 127


@dataclass(frozen=True, slots=True)
class PoolParams:
    k: int  # square window
    s: int
    p: int = 0


def pool_attrs(layer) -> dict[str, int]:
    return {"kernel": layer.params["k"], "stride": layer.params["s"], "padding": layer.params["p"]}


class _WindowPool(LayerKind):
    schema = PoolParams
    spatial = True
    name = ""

    def expand(self, node: MaxPool | AvgPool, channels: int | None) -> Expansion:
        return Expansion(self.name, {"k": node.k, "s": node.s, "p": node.p}, channels)

    def describe(self, layer) -> str:
        p = layer.params
        return f"{layer.kind} k{p['k']} s{p['s']} p{p['p']}"

    def check(self, layer) -> None:
        k = positive_int(f"{self.name} kernel", layer.params["k"])
        positive_int(f"{self.name} stride", layer.params["s"])
        p = non_negative_int(f"{self.name} padding", layer.params["p"])
        if p > k // 2:  # as torch: padding beyond half the window would make all-padding windows
            raise LayerProblem(f"{self.name} padding {p} must be at most half the kernel {k}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        x = ins[0]
        ho, wo = spatial_out(x, layer.params["k"], layer.params["s"], layer.params["p"], self.name)
        return Shape(x.n, ho, wo, x.c)


class MaxPoolKind(_WindowPool):
    kinds = ("maxpool",)
    nodes = (MaxPool,)
    name = "maxpool"

    def check(self, layer) -> None:
        super().check(layer)
        if layer.params["k"] > MAX_MASK_KERNEL:
            raise LayerProblem(f"maxpool kernel {layer.params['k']} exceeds {MAX_MASK_KERNEL} (INT8 argmax mask)")

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return [cx.mask("mask", out)]

    def forward(self, layer, io: IO) -> None:
        io.op("maxpool_fwd", pool_attrs(layer), x=io.x[0], y=io.y, mask=io.t("mask"))

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("maxpool_bwd", pool_attrs(layer), dy=io.dy, mask=io.t("mask"), dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        io.op("maxpool_inf", pool_attrs(layer), x=io.x[0], y=io.y)
        return io.y


class AvgPoolKind(_WindowPool):
    kinds = ("avgpool",)
    nodes = (AvgPool,)
    name = "avgpool"

    def forward(self, layer, io: IO) -> None:
        io.op("avgpool_fwd", pool_attrs(layer), x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("avgpool_bwd", pool_attrs(layer), dy=io.dy, dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        io.op("avgpool_fwd", pool_attrs(layer), x=io.x[0], y=io.y)
        return io.y


class GapKind(LayerKind):
    kinds = ("gap",)
    nodes = (GAP,)
    spatial = True
    flat_output = True

    def expand(self, node: GAP, channels: int | None) -> Expansion:
        return Expansion("gap", {}, channels)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return Shape(ins[0].n, 1, 1, ins[0].c)

    def forward(self, layer, io: IO) -> None:
        io.op("gap_fwd", x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        io.op("gap_bwd", dy=io.dy, dx=io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        io.op("gap_fwd", x=io.x[0], y=io.y)
        return io.y
