"""Batch norm + relu + max pooling as one op pair (csrc/ops/bn_pool.cu). Argument rules: tr.backend.rules.bn."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.bn_pool import BN_MAXPOOL_BWD, BN_MAXPOOL_FWD
from tr.backend.rules.bn import bn_maxpool_bwd_rules, bn_maxpool_fwd_rules

_FWD = ("x", "y", "mask", "gamma", "beta", "mean_in", "var_in", "mean_out", "var_out", "saved_mean", "saved_inv_std")
_BWD = ("x", "dy", "mask", "dx", "gamma", "beta", "saved_mean", "saved_inv_std", "dgamma", "dbeta")


@cuda_op("bn_maxpool_fwd")
def bn_maxpool_fwd(b: CudaBinder) -> Any:
    r = bn_maxpool_fwd_rules(b)
    return b.make(BN_MAXPOOL_FWD, **{name: b.dev(name) for name in _FWD}, m=r.m, **r.geo.as_ints(),
                  momentum=r.momentum, eps=r.eps)


@cuda_op("bn_maxpool_bwd")
def bn_maxpool_bwd(b: CudaBinder) -> Any:
    r = bn_maxpool_bwd_rules(b)
    return b.make(BN_MAXPOOL_BWD, **{name: b.dev(name) for name in _BWD}, m=r.m, **r.geo.as_ints())
