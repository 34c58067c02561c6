"""Layer norm: each N*H*W position of x [N,H,W,C] normalised over its C values (ViT's LayerNorm over the
embedding, the tokens as positions; after a flatten, over a sample's whole row), then scaled by gamma and
shifted by beta.

Tensors: gamma (ones) and beta (zeros), [1,1,1,C], in the kind's own parameter groups ln_w and ln_b. Both are
bias-like (no weight decay, no LARS trust ratio) and keep no FP16 working copy or FP16 gradient under AMP: the
kernels read FP32 gamma and beta whatever the feature dtype and write FP32 gradients, as batch norm's do. The
memory plan places the groups by these traits (tr.core.memory.Group), so the optimizer's bias-like range, the
gradient clear and the EMA cover them with no change elsewhere. Training saves each row's mean and 1/std (FP32
[N,H,W,1], pooled temporaries: they live from the forward to the backward); inference saves nothing. No running
statistics: training and inference compute the same function.

Fused with the residual join before it (``residual``, set by tr.graph.passes.fuse_add_norm where an add is followed
by the layernorm that reads it, a pre-norm transformer's block boundary): ln_fwd reads the add's two inputs as x and
z and writes their sum (the add's value, which the add no longer computes) beside y, in one pass over the row; in
inference the sum is written only where another layer reads it (``shared``). Whatever its input, the backward adds
the gradient contributions its input already has (the skip path's, from the readers after it) into the dx it writes
(ln_bwd's dx2), where an accumulate op would otherwise follow it. Both give the unfused ops' bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.memory import Group
from tr.core.shape import Shape
from tr.graph.blueprint import LayerNorm
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, Init, LayerKind, LayerProblem

LN_W = Group("ln_w", norm=True)
LN_B = Group("ln_b", norm=True)


@dataclass(frozen=True, slots=True)
class LayerNormParams:
    eps: float = 1e-5
    residual: bool = False  # its input is the add before it, whose sum its ln_fwd computes (fuse_add_norm)
    shared: bool = False  # (with residual) other layers read that sum too: inference writes it as well


class LayerNormKind(LayerKind):
    kinds = ("layernorm",)
    schema = LayerNormParams
    nodes = (LayerNorm,)
    # Not element-wise (it mixes a row's values), not spatial (it reads no window: after a flatten it normalises
    # the flattened row). Not a first layer: a model starts with its embedding (a conv or an fc), and the input
    # batch is no place for a learned per-channel scale.

    def expand(self, node: LayerNorm, channels: int | None) -> Expansion:
        return Expansion("layernorm", {"eps": node.eps}, channels)

    def describe(self, layer) -> str:
        eps = layer.params["eps"]
        name = "layernorm+add" if layer.params["residual"] else "layernorm"
        return name if eps == LayerNormParams.eps else f"{name} eps={eps:g}"

    def check(self, layer) -> None:
        eps = layer.params["eps"]
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
            raise LayerProblem(f"layernorm eps must be a finite number > 0, got {eps!r}")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def num_params(self, layer, ins, out) -> int:
        return 2 * out.c  # gamma, beta

    def has_params(self, layer) -> bool:
        return True

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        x = ins[0]
        s = Shape(1, 1, 1, x.c)
        rows = Shape(x.n, x.h, x.w, 1)  # one statistic per normalised row
        return (cx.param("gamma", LN_W, s, Init("ones")) + cx.param("beta", LN_B, s, Init("zeros"))
                + [cx.stat("saved_mean", rows), cx.stat("saved_rstd", rows)])

    def computes_input(self, layer) -> bool:
        return layer.params["residual"]

    def adds_input_gradient(self, layer) -> bool:
        return True

    def _input(self, layer, io: IO, keep_sum: bool) -> dict[str, str | None]:
        """ln_fwd's input arguments: x, or the add's terms as x and z and (``keep_sum``) the sum it writes."""
        if not layer.params["residual"]:
            return {"x": io.x[0]}
        shortcut, stem = io.terms
        return {"x": shortcut, "z": stem, "sum": io.x[0] if keep_sum else None}

    def forward(self, layer, io: IO) -> None:
        io.op("ln_fwd", {"eps": layer.params["eps"]}, **self._input(layer, io, True), gamma=io.t("gamma"),
              beta=io.t("beta"), y=io.y, saved_mean=io.t("saved_mean"), saved_rstd=io.t("saved_rstd"))

    def backward(self, layer, io: IO) -> list[str | None]:
        dx = io.dx_or_none(0)
        io.op("ln_bwd", x=io.x[0], gamma=io.t("gamma"), dy=io.dy, saved_mean=io.t("saved_mean"),
              saved_rstd=io.t("saved_rstd"), dx=dx, dgamma=io.t("gamma.grad"), dbeta=io.t("beta.grad"),
              dx2=io.dx2 or None)
        return [dx]

    def inference(self, layer, io: IO) -> str:
        io.op("ln_fwd", {"eps": layer.params["eps"]}, **self._input(layer, io, layer.params["shared"]),
              gamma=io.t("gamma"), beta=io.t("beta"), y=io.y)
        return io.y
