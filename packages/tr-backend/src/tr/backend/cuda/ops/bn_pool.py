"""Batch norm + relu + max pooling as one op pair (csrc/ops/bn_pool.cu). Argument rules: tr.backend.rules.bn."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules.bn import bn_maxpool_bwd_rules, bn_maxpool_fwd_rules

_FWD = ["x", "y", "mask", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std"]
_BWD = ["x", "dy", "mask", "dx", "gamma", "beta", "saved_mean", "saved_inv_std", "dgamma", "dbeta"]


@cuda_op("bn_maxpool_fwd")
def bn_maxpool_fwd(b: CudaBinder) -> Any:
    r = bn_maxpool_fwd_rules(b)
    return b.native("bn_maxpool_fwd", _FWD, ints={"m": r.m, **r.geo.as_ints()},
                    floats={"momentum": r.momentum, "eps": r.eps})


@cuda_op("bn_maxpool_bwd")
def bn_maxpool_bwd(b: CudaBinder) -> Any:
    r = bn_maxpool_bwd_rules(b)
    return b.native("bn_maxpool_bwd", _BWD, ints={"m": r.m, **r.geo.as_ints()})
