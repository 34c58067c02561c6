"""Batch norm (BN2d over N*H*W per channel; BN1d is the same op on [N,1,1,C]).

Tensors: gamma (group bn_w, ones) and beta (group bn_b, zeros) with their gradients and moments;
running mean/var in role RUNNING (read) and RUNNING_NEXT (written by the forward; UPDATE_RUNNING copies next to
prev once per step, so every BN's statistics move with one range copy); the folded inference scale and
bias in role FOLDED (FOLD_RUNNING); the saved batch mean and inverse std for the backward in the FP32
temporaries (pooled: they only live from forward to backward).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.memory import Region, Role
from tr.core.shape import Shape
from tr.graph.blueprint import BN
from tr.graph.layers.base import IO, Decl, DeclCtx, Expansion, Init, LayerKind, LayerProblem
from tr.graph.layers.groups import BN_B, BN_W, FOLDED_BIAS, FOLDED_SCALE, MEAN, VAR


@dataclass(frozen=True, slots=True)
class BNParams:
    momentum: float = 0.1
    eps: float = 1e-5


def check_bn(momentum: object, eps: object) -> None:
    for name, v in (("bn momentum", momentum), ("bn eps", eps)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise LayerProblem(f"{name} must be a finite number, got {v!r}")
    if not 0.0 <= momentum <= 1.0:  # type: ignore[operator]
        raise LayerProblem(f"bn momentum must be in [0, 1], got {momentum}")
    if eps <= 0.0:  # type: ignore[operator]
        raise LayerProblem(f"bn eps must be > 0, got {eps}")


def bn_decls(c: int, eps: float, cx: DeclCtx) -> list[Decl]:
    s = Shape(1, 1, 1, c)
    d = cx.param("gamma", BN_W, s, Init("ones")) + cx.param("beta", BN_B, s, Init("zeros"))
    d += [cx.state("prev_mean", Region(Role.RUNNING, MEAN), s, Init("zeros")),
          cx.state("prev_var", Region(Role.RUNNING, VAR), s, Init("ones")),
          cx.state("next_mean", Region(Role.RUNNING_NEXT, MEAN), s, Init("zeros")),
          cx.state("next_var", Region(Role.RUNNING_NEXT, VAR), s, Init("ones")),
          # consistent with gamma = 1, beta = 0, mean = 0, var = 1 until the first FOLD_RUNNING
          cx.state("eq_scale", Region(Role.FOLDED, FOLDED_SCALE), s, Init("const", value=1.0 / math.sqrt(1.0 + eps))),
          cx.state("eq_bias", Region(Role.FOLDED, FOLDED_BIAS), s, Init("zeros")),
          cx.stat("saved_mean", s), cx.stat("saved_inv_std", s)]
    return d


def bn_forward(io: IO, momentum: float, eps: float, x: str, y: str, act: str | None = None,
               z: str | None = None) -> None:
    """y = act(bn(x) + z)."""
    io.op("bn_fwd", {"momentum": momentum, "eps": eps, "activation": act}, x=x, gamma=io.t("gamma"),
          beta=io.t("beta"), mean_in=io.t("prev_mean"), var_in=io.t("prev_var"), mean_out=io.t("next_mean"),
          var_out=io.t("next_var"), y=y, saved_mean=io.t("saved_mean"), saved_inv_std=io.t("saved_inv_std"), z=z)


def bn_backward(io: IO, eps: float, x: str, dy: str, dx: str, act: str | None = None, y: str | None = None,
                dz: str | None = None, dy2: str | None = None) -> None:
    """dy (+ dy2): the gradient of bn_forward's y. A relu's or relu6's mask comes from y when given, else it
    is recomputed from x (beta is passed for that); dz receives the residual's gradient."""
    io.op("bn_bwd", {"eps": eps, "activation": act}, x=x, gamma=io.t("gamma"), dy=dy, saved_mean=io.t("saved_mean"),
          saved_inv_std=io.t("saved_inv_std"), dgamma=io.t("gamma.grad"), dbeta=io.t("beta.grad"), dx=dx,
          beta=io.t("beta") if act and y is None else None, y=y, dz=dz, dy2=dy2 or None)


def bn_inference(io: IO, x: str, y: str, act: str | None = None, z: str | None = None) -> None:
    io.op("bn_inf", {"activation": act}, x=x, scale=io.t("eq_scale"), bias=io.t("eq_bias"), y=y, z=z)


def bn_update_eq(io: IO, eps: float) -> None:
    io.op("bn_update_eq", {"eps": eps}, gamma=io.t("gamma"), beta=io.t("beta"), mean=io.t("prev_mean"),
          var=io.t("prev_var"), scale=io.t("eq_scale"), bias=io.t("eq_bias"))


class BNKind(LayerKind):
    kinds = ("bn", "bn1d", "bn2d")  # "bn" until the name_bn pass says which (by what it reads)
    schema = BNParams
    nodes = (BN,)
    bn_stats = True

    def expand(self, node: BN, channels: int | None) -> Expansion:
        return Expansion("bn", {"momentum": node.momentum, "eps": node.eps}, channels)

    def num_params(self, layer, ins, out) -> int:
        return 2 * out.c  # gamma, beta

    def check(self, layer) -> None:
        check_bn(layer.params["momentum"], layer.params["eps"])

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        return ins[0]

    def has_params(self, layer) -> bool:
        return True

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        return bn_decls(ins[0].c, layer.params["eps"], cx)

    def forward(self, layer, io: IO) -> None:
        bn_forward(io, layer.params["momentum"], layer.params["eps"], io.x[0], io.y)

    def backward(self, layer, io: IO) -> list[str | None]:
        # bn_bwd always writes dx (in place over x is allowed); a gradient nobody needs is just not read
        bn_backward(io, layer.params["eps"], io.x[0], io.dy, io.dx[0])
        return [io.dx[0]]

    def inference(self, layer, io: IO) -> str:
        bn_inference(io, io.x[0], io.y)
        return io.y
