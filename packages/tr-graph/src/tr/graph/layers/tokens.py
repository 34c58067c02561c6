"""A Vision Transformer's token sequence and class-token pooling (ops: the tokens family).

Tokens live in tr's shapes as [N, 1, T, C] (H = 1, W = T tokens, C channels): a patch embedding (a strided conv
with bias) writes [N, H, W, C] and its H*W positions are the patch tokens in row order, with no copy of layout; a
per-token linear layer is a 1x1 conv, LayerNorm normalises each token's C values, gap is mean pooling.

``tokens``: y = [cls; x's tokens] + pos. The class token [1,1,1,C] (zeros at the start, as torchvision's) and the
position embedding [1,1,T,C] (a normal of std Initializer.embedding_std cut at 2 sigma) live in the group "tokens":
no weight decay (the ViT recipe's), no 16-bit working copy (the kernels read the FP32 masters whatever the feature
type, as LayerNorm's do), FP32 gradients summed over the batch. ``class_token``: token 0 of [N,1,T,C] as [N,1,1,C].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.memory import Group
from tr.core.shape import Shape
from tr.graph.blueprint import ClassToken, Tokens
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, Init, LayerKind, LayerProblem

TOKENS = Group("tokens")


@dataclass(frozen=True, slots=True)
class TokensParams:
    cls: bool = True
    pos: bool = True


class TokensKind(LayerKind):
    kinds = ("tokens",)
    schema = TokensParams
    nodes = (Tokens,)

    def expand(self, node: Tokens, channels: int | None) -> Expansion:
        return Expansion("tokens", {"cls": node.cls, "pos": node.pos}, channels)

    def describe(self, layer) -> str:
        p = layer.params
        return "tokens" + ("" if p["cls"] else " no-cls") + ("" if p["pos"] else " no-pos")

    def check(self, layer) -> None:
        if not all(isinstance(layer.params.get(k), bool) for k in ("cls", "pos")):
            raise LayerProblem(f"tokens cls and pos must be True or False, got {layer.params}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        x = ins[0]
        return Shape(x.n, 1, x.h * x.w + int(layer.params["cls"]), x.c)

    def check_producers(self, layer, producers, shapes) -> None:
        # a patch embedding (kernel = stride, no padding) that does not tile the image drops its last rows or
        # columns without a word, as any strided conv may; for tokens that is a lost part of the image, and
        # torchvision's VisionTransformer refuses such an image size too
        conv = producers[0]
        if conv is None or conv.kind != "conv":
            return
        k, s, p = conv.params["k"], conv.params["s"], conv.params["p"]
        x = shapes[conv.inputs[0]]
        if k == s > 1 and p == 0 and (x.h % k or x.w % k):
            raise LayerProblem(f"its patch embedding (conv {k}x{k} stride {s}) does not tile the {x.h}x{x.w} image: "
                               f"the last {x.h % k} rows and {x.w % k} columns would be dropped; use an image size "
                               f"divisible by the patch {k}")

    def num_params(self, layer, ins, out) -> int:
        return out.c * (int(layer.params["cls"]) + out.w * int(layer.params["pos"]))

    def has_params(self, layer) -> bool:
        return layer.params["cls"] or layer.params["pos"]

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        out_decls: list[Decl] = []
        if layer.params["cls"]:
            out_decls += cx.param("cls", TOKENS, Shape(1, 1, 1, out.c), Init("zeros"))
        if layer.params["pos"]:
            out_decls += cx.param("pos", TOKENS, Shape(1, 1, out.w, out.c),
                                  Init("weight", fan_in=1, fan_out=1, family="embedding"))
        return out_decls

    def _params(self, layer, io: IO, suffix: str = "") -> dict[str, str]:
        names = {"cls": "dcls" if suffix else "cls", "pos": "dpos" if suffix else "pos"}
        return {names[k]: io.t(k + suffix) for k in ("cls", "pos") if layer.params[k]}

    def forward(self, layer, io: IO) -> None:
        io.op("tokens_fwd", x=io.x[0], y=io.y, **self._params(layer, io))

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        io.op("tokens_bwd", dy=io.dy, dx=dx, **self._params(layer, io, ".grad"))
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("tokens_fwd", x=io.x[0], y=io.y, **self._params(layer, io))
        return io.y


class ClassTokenKind(LayerKind):
    kinds = ("class_token",)
    nodes = (ClassToken,)
    flat_output = True

    def expand(self, node: ClassToken, channels: int | None) -> Expansion:
        return Expansion("class_token", {}, channels)

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        x = ins[0]
        if x.h != 1:
            raise LayerProblem(f"class_token pools tokens [N, 1, T, C], got {x} (tokens() makes them)")
        return Shape(x.n, 1, 1, x.c)

    def forward(self, layer, io: IO) -> None:
        io.op("token_pick_fwd", x=io.x[0], y=io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        if dx is not None:
            io.op("token_pick_bwd", dy=io.dy, dx=dx)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("token_pick_fwd", x=io.x[0], y=io.y)
        return io.y
