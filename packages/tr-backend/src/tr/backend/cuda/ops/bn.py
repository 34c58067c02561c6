"""Batch normalisation over N*H*W per channel with the following relu, relu6 or silu and residual add fused in
(csrc/ops/bn.cu): 16-byte vector loads, chunked fixed-order float64 reductions (deterministic, no atomics),
running statistics with the unbiased batch variance. Argument rules: tr.backend.rules.bn."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.bn import BN_BWD, BN_FWD, BN_INF, BN_UPDATE_EQ
from tr.backend.rules.bn import bn_bwd_rules, bn_fwd_rules, bn_inf_rules, bn_update_eq_rules


@cuda_op("bn_fwd")
def bn_fwd(b: CudaBinder) -> Any:
    r = bn_fwd_rules(b)  # z, when given, is the residual
    return b.make(BN_FWD, x=b.dev("x"), gamma=b.dev("gamma"), beta=b.dev("beta"), mean_in=b.dev("mean_in"),
                  var_in=b.dev("var_in"), mean_out=b.dev("mean_out"), var_out=b.dev("var_out"), y=b.dev("y"),
                  saved_mean=b.dev("saved_mean"), saved_inv_std=b.dev("saved_inv_std"), z=b.dev("z"), m=r.m,
                  c=r.c, act=r.act_code, momentum=r.momentum, eps=r.eps)


@cuda_op("bn_bwd")
def bn_bwd(b: CudaBinder) -> Any:
    r = bn_bwd_rules(b)
    # beta and y only as the mask's source: the kernels read neither otherwise (and y would narrow the vectors)
    return b.make(BN_BWD, x=b.dev("x"), dy=b.dev("dy"), dx=b.dev("dx"), gamma=b.dev("gamma"),
                  saved_mean=b.dev("saved_mean"), saved_inv_std=b.dev("saved_inv_std"), dgamma=b.dev("dgamma"),
                  dbeta=b.dev("dbeta"), beta=b.dev("beta") if r.mask == "x" else None,
                  y=b.dev("y") if r.mask == "y" else None, dz=b.dev("dz"), dy2=b.dev("dy2"), m=r.m, c=r.c,
                  mask=r.mask_code)


@cuda_op("bn_inf")
def bn_inf(b: CudaBinder) -> Any:
    r = bn_inf_rules(b)
    return b.make(BN_INF, x=b.dev("x"), scale=b.dev("scale"), bias=b.dev("bias"), y=b.dev("y"), z=b.dev("z"),
                  m=r.m, c=r.c, act=r.act_code)


@cuda_op("bn_update_eq")
def bn_update_eq(b: CudaBinder) -> Any:
    c, eps = bn_update_eq_rules(b)
    return b.make(BN_UPDATE_EQ, gamma=b.dev("gamma"), beta=b.dev("beta"), mean=b.dev("mean"), var=b.dev("var"),
                  scale=b.dev("scale"), bias=b.dev("bias"), c=c, eps=eps)
