"""Batch normalisation over N*H*W per channel with the following relu, relu6 or silu and residual add fused in
(csrc/ops/bn.cu): 16-byte vector loads, chunked fixed-order float64 reductions (deterministic, no atomics),
running statistics with the unbiased batch variance. Argument rules: tr.backend.rules.bn."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules.bn import bn_bwd_rules, bn_fwd_rules, bn_inf_rules, bn_update_eq_rules


@cuda_op("bn_fwd")
def bn_fwd(b: CudaBinder) -> Any:
    r = bn_fwd_rules(b)
    names = ["x", "y", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std"]
    return b.native("bn_fwd", names + (["z"] if r.residual else []),
                    ints={"m": r.m, "c": r.c, "act": r.act_code, "residual": r.residual},
                    floats={"momentum": r.momentum, "eps": r.eps})


@cuda_op("bn_bwd")
def bn_bwd(b: CudaBinder) -> Any:
    r = bn_bwd_rules(b)
    names = ["x", "dy", "dx", "gamma", "saved_mean", "saved_inv_std", "dgamma", "dbeta"]
    names += {"": [], "x": ["beta"], "y": ["y"]}[r.mask] + (["dz"] if r.dz else []) + (["dy2"] if r.dy2 else [])
    return b.native("bn_bwd", names, ints={"m": r.m, "c": r.c, "mask": r.mask_code, "dz": r.dz})


@cuda_op("bn_inf")
def bn_inf(b: CudaBinder) -> Any:
    r = bn_inf_rules(b)
    return b.native("bn_inf", ["x", "scale", "bias", "y"] + (["z"] if r.residual else []),
                    ints={"m": r.m, "c": r.c, "act": r.act_code, "residual": r.residual})


@cuda_op("bn_update_eq")
def bn_update_eq(b: CudaBinder) -> Any:
    c, eps = bn_update_eq_rules(b)
    return b.native("bn_update_eq", ["gamma", "beta", "mean", "var", "scale", "bias"], ints={"c": c},
                    floats={"eps": eps})
