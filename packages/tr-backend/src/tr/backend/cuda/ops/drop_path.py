"""Stochastic depth with the counter-based Philox keep decision shared with the CPU backend (csrc/ops/drop_path.cu):
the seed (INT32[2] holding one uint64) is advanced by splitmix64 on the device before every forward, then one
decision a sample."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.drop_path import DROP_PATH_BWD, DROP_PATH_FWD
from tr.backend.rules import drop_path as rules


@cuda_op("drop_path_fwd")
def drop_path_fwd(b: CudaBinder) -> Any:
    r = rules.drop_path_fwd(b)
    return b.make(DROP_PATH_FWD, x=b.dev("x"), y=b.dev("y"), mask=b.dev("mask"), seed=b.dev("seed"), n=r.n,
                  per_sample=r.per_sample, p=float(r.p))


@cuda_op("drop_path_bwd")
def drop_path_bwd(b: CudaBinder) -> Any:
    r = rules.drop_path_bwd(b)
    return b.make(DROP_PATH_BWD, dy=b.dev("dy"), mask=b.dev("mask"), dx=b.dev("dx"), n=r.n, per_sample=r.per_sample,
                  p=float(r.p))
