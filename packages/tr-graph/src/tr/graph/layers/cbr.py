"""CBR: conv -> batch norm [-> + residual] [-> relu, relu6 or silu] [-> max pool] as one ArchLayer (fused).

The layer emits conv_fwd and one bn_fwd that also applies the relu (and adds the residual z, the block's
shortcut, before it): the BN output never exists as a tensor of its own, and the backward's bn_bwd takes the
gradient of the layer's output, masks it and reduces it in one pass over the conv output. Without a
residual the relu mask is recomputed from the conv output (which bn_bwd reads anyway), so the layer's
output need not live until the backward; with one it is read from the output (y > 0) and bn_bwd writes the
shortcut's gradient on the way. With a max pool (after the relu, no residual) bn_maxpool_fwd/_bwd pool as
they normalise: the layer's output is the pooled one, and the full-resolution activation and its gradient are
not tensors of the plan. Inputs: (x) or (x, shortcut); params: the conv's and the BN's, act (None, "relu" or
"relu6": MobileNet's, whose mask 0 < y < 6 is recomputed the same way, or "silu": EfficientNet's, whose
slope is recomputed from the conv output too; not with a residual), residual, pool (None or (kernel,
stride, padding)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tr.core.shape import Shape
from tr.graph.layers.base import IO, Decl, DeclCtx, LayerKind, LayerProblem, spatial_out
from tr.graph.layers.bn import bn_backward, bn_decls, bn_forward, bn_inference, check_bn
from tr.graph.layers.conv import check_conv, conv_attrs, conv_decls, conv_out_shape, describe_conv, groups

CBR_ACTS = (None, "relu", "relu6", "silu")  # the activations the BN kernels apply (tr.backend.rules.bn)


@dataclass(frozen=True, slots=True)
class CBRParams:
    out: int
    k: int
    s: int = 1
    p: int = 0
    g: int = 1
    momentum: float = 0.1
    eps: float = 1e-5
    act: str | None = None  # one of CBR_ACTS
    residual: bool = False  # a second input added before the activation
    pool: tuple[int, int, int] | None = None  # a max pool (kernel, stride, padding) after the relu


def _pool_attrs(pool: tuple[int, int, int]) -> dict[str, int]:
    return {"kernel": pool[0], "stride": pool[1], "padding": pool[2]}


class CBRKind(LayerKind):
    kinds = ("cbr",)
    schema = CBRParams
    spatial = True
    bn_stats = True
    first_ok = True

    def describe(self, layer) -> str:
        p = self.typed(layer)
        s = describe_conv(layer) + ("+add" if p.residual else "") + (f"+{p.act}" if p.act else "")
        return s + ("+maxpool k{} s{} p{}".format(*p.pool) if p.pool else "")

    def num_params(self, layer, ins, out) -> int:
        conv_w = layer.params["out"] * layer.params["k"] ** 2 * (ins[0].c // groups(layer))
        return conv_w + 2 * out.c  # the conv's, gamma, beta

    def check(self, layer) -> None:
        check_conv(layer)
        check_bn(layer.params["momentum"], layer.params["eps"])
        if layer.params["act"] not in CBR_ACTS:
            raise LayerProblem(f"cbr activation must be one of {CBR_ACTS}, got {layer.params['act']!r}")
        if layer.params["act"] == "silu" and layer.params["residual"]:
            raise LayerProblem("a cbr adds a residual before relu or relu6 only (silu's backward recomputes its "
                               "input from the conv output, which a residual changes)")
        if layer.params["pool"] is not None and (layer.params["act"] != "relu" or layer.params["residual"]):
            raise LayerProblem("a cbr pools only after its relu and without a residual")

    def out_shape(self, layer, ins: Sequence[Shape]) -> Shape:
        y = conv_out_shape(layer, ins[0])
        if layer.params["residual"]:
            z = ins[1]
            if (z.h, z.w, z.c) != (y.h, y.w, y.c):
                raise LayerProblem(f"the residual {z} must have the conv output's shape {y}")
        pool = layer.params["pool"]
        if pool is not None:
            ho, wo = spatial_out(y, pool[0], pool[1], pool[2], "maxpool")
            return Shape(y.n, ho, wo, y.c)
        return y

    def has_params(self, layer) -> bool:
        return True

    def takes_second_gradient(self, layer) -> bool:
        # bn_bwd adds a branch point's two gradients as it reads them; not when the pooled op runs instead,
        # nor when the residual's gradient would be the sum itself (no relu: it is borrowed, not written)
        p = layer.params
        return p["pool"] is None and (not p["residual"] or p["act"] is not None)

    def declare(self, layer, ins: Sequence[Shape], out: Shape, cx: DeclCtx) -> list[Decl]:
        full = conv_out_shape(layer, ins[0])
        d = (conv_decls(layer, ins[0], cx) + bn_decls(out.c, layer.params["eps"], cx)
             + [cx.feature("conv_y", full, "train"), cx.feature("conv_y@inf", full, "inf"), cx.grad("bn_dx", full)])
        if layer.params["pool"] is not None:
            d += [cx.mask("mask", out), cx.feature("act@inf", full, "inf")]
        return d

    def forward(self, layer, io: IO) -> None:
        p = layer.params
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), y=io.t("conv_y"))
        if p["pool"] is not None:
            io.op("bn_maxpool_fwd", {"momentum": p["momentum"], "eps": p["eps"], **_pool_attrs(p["pool"])},
                  x=io.t("conv_y"), gamma=io.t("gamma"), beta=io.t("beta"), mean_in=io.t("prev_mean"),
                  var_in=io.t("prev_var"), mean_out=io.t("next_mean"), var_out=io.t("next_var"), y=io.y,
                  mask=io.t("mask"), saved_mean=io.t("saved_mean"), saved_inv_std=io.t("saved_inv_std"))
            return
        bn_forward(io, p["momentum"], p["eps"], io.t("conv_y"), io.y, act=p["act"],
                   z=io.x[1] if p["residual"] else None)

    def backward(self, layer, io: IO) -> list[str | None]:
        p = layer.params
        residual, act = bool(p["residual"]), p["act"]
        dz = io.dx_or_none(1) if residual and act else None
        if p["pool"] is not None:
            io.op("bn_maxpool_bwd", {"eps": p["eps"], **_pool_attrs(p["pool"])}, x=io.t("conv_y"), gamma=io.t("gamma"),
                  beta=io.t("beta"), dy=io.dy, mask=io.t("mask"), saved_mean=io.t("saved_mean"),
                  saved_inv_std=io.t("saved_inv_std"), dgamma=io.t("gamma.grad"), dbeta=io.t("beta.grad"),
                  dx=io.t("bn_dx"))
        else:
            bn_backward(io, p["eps"], io.t("conv_y"), io.dy, io.t("bn_dx"), act=act,
                        y=io.y if residual and act else None, dz=dz, dy2=io.dy2)
        dx = io.dx_or_none(0)
        io.op("conv_bwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), dy=io.t("bn_dx"), dw=io.dw("w"), dx=dx)
        if not residual:
            return [dx]
        # without a relu the residual's gradient is the output's gradient itself: borrow it
        return [dx, dz if act else (io.dy if io.need[1] else None)]

    def inference(self, layer, io: IO) -> str:
        p = layer.params
        io.op("conv_fwd", conv_attrs(layer), x=io.x[0], w=io.w("w"), y=io.t("conv_y@inf"))
        if p["pool"] is not None:
            bn_inference(io, io.t("conv_y@inf"), io.t("act@inf"), act=p["act"])
            io.op("maxpool_inf", _pool_attrs(p["pool"]), x=io.t("act@inf"), y=io.y)
            return io.y
        bn_inference(io, io.t("conv_y@inf"), io.y, act=p["act"], z=io.x[1] if p["residual"] else None)
        return io.y
