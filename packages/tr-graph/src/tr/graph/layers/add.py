"""Residual join y = a + b (a: shortcut, b: stem), optionally with the block's relu fused in.

Backward: the join passes its output gradient to both branches unchanged, so it emits no op of its
own (only the fused relu's ``act_bwd``); both inputs borrow the same gradient tensor and the compiler
sums the branch contributions where the branches meet again.

With ``norm`` (tr.graph.passes.fuse_add_norm: a pre-norm transformer's join followed by the next block's layernorm)
the layernorm after it computes the sum in its own ln_fwd and writes it as this layer's output, so the join emits no
op at all; its value is still the sum, which the other readers (the next join's skip path) and the layernorm's
backward read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.layers.activation import act_backward
from tr.graph.layers.base import IO, Decl, DeclCtx, LayerKind, LayerProblem


@dataclass(frozen=True, slots=True)
class AddParams:
    activation: str | None = None  # the block's relu, fused in
    norm: bool = False  # the next layer, a layernorm, computes and writes the sum (fuse_add_norm)


class AddKind(LayerKind):
    kinds = ("add",)
    schema = AddParams
    epilogue_acts = ("relu",)

    def describe(self, layer) -> str:
        act = layer.params["activation"]
        if layer.params["norm"]:
            return "add (in next layernorm)"
        return "add" + (f"+{act}" if act else "")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        a, b = ins
        if a.c != b.c:
            raise LayerProblem(
                f"add2 channel mismatch: the shortcut gives {a.c} channels but the stem gives {b.c} "
                f"(shapes {a} and {b}); use a projection (conv + bn) in the shortcut")
        if (a.h, a.w) != (b.h, b.w):
            raise LayerProblem(
                f"add2 spatial mismatch: the shortcut gives {a.h}x{a.w} but the stem gives {b.h}x{b.w}")
        return a

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return [cx.grad("act_dx", out)] if layer.params["activation"] else []

    def forward(self, layer, io: IO) -> None:
        if layer.params["norm"]:  # (the next layer's ln_fwd writes io.y)
            return
        io.op("add_fwd", {"activation": layer.params["activation"]}, a=io.x[0], b=io.x[1], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        g = io.dy
        act = layer.params["activation"]
        if act:
            act_backward(io, act, "", io.y, io.dy, io.t("act_dx"))
            g = io.t("act_dx")
        return [g if io.need[0] else None, g if io.need[1] else None]

    def inference(self, layer, io: IO) -> str:
        self.forward(layer, io)
        return io.y
