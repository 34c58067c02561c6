"""Multi-head scaled dot-product self-attention on tokens (ops: the attention family).

The layer reads the fused QKV projection's output [N, 1, T, 3D] (a 1x1 conv with bias of D -> 3D channels: per
token q, k and v, each split into ``heads`` heads of D / heads channels, torch.nn.MultiheadAttention's packed
in_proj layout) and writes the heads' outputs concatenated, [N, 1, T, D]; the output projection is the 1x1 conv
after it. So a ViT block's attention is layernorm -> conv(3D, 1, bias) -> attention(heads) -> conv(D, 1, bias)
inside a residual add, every piece a layer of its own. scale = 1 / sqrt(D / heads) (torch's default). Training
saves each softmax row's log-sum-exp (FP32 [N, 1, heads, T]) for the backward, which recomputes the
probabilities from it (flash attention's scheme: no [T, T] tensor lives between the passes); inference saves none.

``attention(heads, dropout=p)`` drops probabilities in training (torch.nn.MultiheadAttention's dropout): the forward
advances the dropout_seed stream, as a dropout layer does (so each layer, and each step, draws its own bits), and
leaves the draw's key in an INT32[2] of the layer's (MASK role, pooled like a mask) for the backward, which redraws
the same bits from it; no [T, T] mask is saved. p = 0 emits exactly the calls of an attention without dropout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.dtype import DType
from tr.core.memory import Region, Role
from tr.core.shape import Shape
from tr.graph.blueprint import Attention
from tr.graph.layers.base import IO, MASK, TRAIN, Decl, DeclCtx, Expansion, LayerKind, LayerProblem, positive_int


@dataclass(frozen=True, slots=True)
class AttentionParams:
    heads: int = 1
    dim: int = 0  # D, the output's channels: set by expand from the channels before the layer
    dropout: float = 0.0  # the probability of dropping an attention probability in training, in [0, 1)


class AttentionKind(LayerKind):
    kinds = ("attention",)
    schema = AttentionParams
    nodes = (Attention,)

    def expand(self, node: Attention, channels: int | None) -> Expansion:
        if channels is None:
            raise LayerProblem("attention reads tokens of a known channel count (it cannot follow a flatten)")
        if channels % 3:
            raise LayerProblem(f"attention reads q, k and v: its input's {channels} channels must divide by 3")
        return Expansion("attention", {"heads": node.heads, "dim": channels // 3, "dropout": node.dropout},
                         channels // 3)

    def describe(self, layer) -> str:
        p = layer.params["dropout"]
        return f"attention heads={layer.params['heads']}" + (f" dropout={p}" if p else "")

    def check(self, layer) -> None:
        heads, dim = positive_int("attention heads", layer.params["heads"]), layer.params["dim"]
        if dim % heads:
            raise LayerProblem(f"attention with {heads} heads needs a width D divisible by them, got D = {dim}")
        p = layer.params["dropout"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0.0 <= p < 1.0:
            raise LayerProblem(f"attention dropout must be in [0, 1), got {p!r}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        x, heads = ins[0], layer.params["heads"]
        if x.h != 1:
            raise LayerProblem(f"attention reads tokens [N, 1, T, 3D], got {x}: tokens() makes them")
        if x.c % 3 or (x.c // 3) % heads:
            raise LayerProblem(f"attention with {heads} heads reads [N, 1, T, 3D] with D divisible by the heads, got "
                               f"{x.c} channels ({x.c / 3:g} a projection)")
        return Shape(x.n, 1, x.w, x.c // 3)

    def _attrs(self, layer) -> dict:
        heads = layer.params["heads"]
        return {"heads": heads, "scale": 1.0 / math.sqrt(layer.params["dim"] // heads)}

    def _training(self, layer, io: IO, forward: bool) -> tuple[dict, dict]:
        """The training calls' attributes and dropout arguments (the forward draws from the stream into the layer's
        key, the backward reads the key): none at all without dropout."""
        p = layer.params["dropout"]
        if not p:
            return self._attrs(layer), {}
        args = {"key": io.t("key"), **({"seed": "dropout_seed"} if forward else {})}
        return {**self._attrs(layer), "dropout": p}, args

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        decls = [cx.stat("lse", Shape(out.n, 1, layer.params["heads"], out.w))]
        if layer.params["dropout"]:  # the forward's draw key (one uint64), read back by the backward
            decls.append(Decl("key", Region(Role.MASK), DType.INT32, Shape(1, 1, 1, 2), 1, MASK, TRAIN))
        return decls

    def forward(self, layer, io: IO) -> None:
        attrs, drop = self._training(layer, io, forward=True)
        io.op("attention_fwd", attrs, qkv=io.x[0], y=io.y, stats=io.t("lse"), **drop)

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        if dx is not None:
            attrs, drop = self._training(layer, io, forward=False)
            io.op("attention_bwd", attrs, qkv=io.x[0], y=io.y, dy=io.dy, stats=io.t("lse"), dqkv=dx, **drop)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("attention_fwd", self._attrs(layer), qkv=io.x[0], y=io.y)
        return io.y
