"""Fully connected layer: y[N,1,1,out] = x[N, H*W*C] @ w[out,1,1,in]^T + b, optionally with a fused relu.

The input is read as [N, H*W*C] directly (NHWC order), so no flatten is needed in front of an FC unless
padded channels make the rows non-contiguous (see the ArchPlan's flatten placement).

Where the fuse pass pairs an fc(relu) with the fc that alone reads it (tr.graph.passes.fuse_drelu), the first
has ``relu_mask``: its forward also writes the relu's bit mask (INT8, relu_mask_bytes(out) a sample), and its
backward takes its output gradient as already through the relu; the second has ``drelu``: its fc_bwd reads
that mask and writes the relu's input gradient as its dx.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.ops import relu_mask_bytes
from tr.core.shape import Shape
from tr.graph.blueprint import FC
from tr.graph.layers.activation import act_backward
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, Init, LayerKind, positive_int
from tr.graph.layers.groups import FC_B, FC_W


@dataclass(frozen=True, slots=True)
class FCParams:
    out: int
    bias: bool = True
    activation: str | None = None  # a relu fused into the GEMM's epilogue (the fuse pass sets it)
    relu_mask: bool = False  # writes the relu's bit mask for the next fc's DRELU (TR_FC_DRELU=1)
    drelu: bool = False  # its dx GEMM applies its input's relu backward from that mask


class FCKind(LayerKind):
    kinds = ("fc",)
    schema = FCParams
    nodes = (FC,)
    first_ok = True
    flat_output = True
    reads_rows = True
    epilogue_acts = ("relu",)

    def expand(self, node: FC, channels: int | None) -> Expansion:
        return Expansion("fc", {"out": node.out, "bias": node.bias}, node.out)

    def describe(self, layer) -> str:
        p = self.typed(layer)
        return f"fc {p.out}" + ("" if p.bias else " nobias") + (f"+{p.activation}" if p.activation else "")

    def num_params(self, layer, ins, out) -> int:
        o = layer.params["out"]
        return o * ins[0].per_sample() + (o if layer.params["bias"] else 0)

    def check(self, layer) -> None:
        positive_int("fc out", layer.params["out"])

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return Shape(ins[0].n, 1, 1, layer.params["out"])

    def has_params(self, layer) -> bool:
        return True

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        fan_in, k = ins[0].per_sample(), layer.params["out"]
        decls = cx.param("w", FC_W, Shape(k, 1, 1, fan_in), Init("weight", fan_in, k, family="fc"))
        if layer.params["bias"]:
            decls += cx.param("b", FC_B, Shape(1, 1, 1, k), Init("bias", fan_in, k))
        if layer.params["relu_mask"]:
            decls.append(cx.mask("relu_mask", Shape(out.n, 1, 1, relu_mask_bytes(k))))
        elif layer.params["activation"]:
            decls.append(cx.grad("act_dx", out))
        return decls

    def forward(self, layer, io: IO) -> None:
        b = io.w("b") if layer.params["bias"] else None  # FP16 under AMP: the GEMM's epilogue adds it
        mask = io.t("relu_mask") if layer.params["relu_mask"] else None
        io.op("fc_fwd", {"activation": layer.params["activation"]}, x=io.x[0], w=io.w("w"), b=b, y=io.y,
              mask=mask)

    def backward(self, layer, io: IO) -> list[str | None]:
        dy = io.dy
        act = layer.params["activation"]
        if act and not layer.params["relu_mask"]:  # (with the mask, the reader's dx GEMM applied it)
            act_backward(io, act, "", io.y, dy, io.t("act_dx"))
            dy = io.t("act_dx")
        db = io.t("b.grad") if layer.params["bias"] else None
        dx = io.dx_or_none(0)
        mask = io.key(layer.inputs[0], "relu_mask") if layer.params["drelu"] and dx else None
        io.op("fc_bwd", x=io.x[0], w=io.w("w"), dy=dy, dw=io.dw("w"), db=db, dx=dx, mask=mask)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        b = io.w("b") if layer.params["bias"] else None
        io.op("fc_fwd", {"activation": layer.params["activation"]}, x=io.x[0], w=io.w("w"), b=b, y=io.y)
        return io.y
