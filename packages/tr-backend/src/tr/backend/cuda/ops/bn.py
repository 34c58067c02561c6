"""Batch normalisation over N*H*W per channel: one block per channel, fixed-order float64 reductions
(csrc/ops/bn.cu); running statistics use the unbiased batch variance."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.errors import ShapeError


def _channels(b: CudaBinder, x: str, *per_channel: str) -> tuple[int, int]:
    xt = b.tensor(x)
    c = xt.shape.c
    for name in per_channel:
        if b.has(name):
            b.expect_numel(name, c)
    return xt.numel // c, c


def _same_shape(b: CudaBinder, a: str, c: str) -> None:
    if b.tensor(a).shape != b.tensor(c).shape:
        b.fail(f"{c} {b.tensor(c).shape} must have {a}'s shape {b.tensor(a).shape}", ShapeError)


_FWD = ("gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std")


@cuda_op("bn_fwd")
def bn_fwd(b: CudaBinder) -> Any:
    m, c = _channels(b, "x", *_FWD)
    _same_shape(b, "x", "y")
    mom = b.float_attr("momentum", 0.1, 0.0, 1.0)
    eps = b.float_attr("eps", 1e-5, 0.0)
    b.expect_float("x", "y", *_FWD)
    return b.native("bn_fwd", ["x", "y", *_FWD], ints={"m": m, "c": c}, floats={"momentum": mom, "eps": eps})


@cuda_op("bn_bwd")
def bn_bwd(b: CudaBinder) -> Any:
    m, c = _channels(b, "x", "gamma", "saved_mean", "saved_inv_std", "dgamma", "dbeta")
    _same_shape(b, "x", "dy")
    _same_shape(b, "x", "dx")
    b.expect_float("x", "dy", "dx", "gamma", "saved_mean", "saved_inv_std", "dgamma", "dbeta")
    return b.native("bn_bwd", ["x", "dy", "dx", "gamma", "saved_mean", "saved_inv_std", "dgamma", "dbeta"],
                    ints={"m": m, "c": c})


@cuda_op("bn_inf")
def bn_inf(b: CudaBinder) -> Any:
    _, c = _channels(b, "x", "scale", "bias")
    _same_shape(b, "x", "y")
    b.expect_float("x", "y", "scale", "bias")
    return b.native("bn_inf", ["x", "scale", "bias", "y"], ints={"n": b.tensor("x").numel, "c": c})


@cuda_op("bn_update_eq")
def bn_update_eq(b: CudaBinder) -> Any:
    c = b.tensor("gamma").numel
    for name in ("beta", "mean", "var", "scale", "bias"):
        b.expect_numel(name, c)
    eps = b.float_attr("eps", 1e-5, 0.0)
    names = ["gamma", "beta", "mean", "var", "scale", "bias"]
    b.expect_float(*names)
    return b.native("bn_update_eq", names, ints={"c": c}, floats={"eps": eps})
