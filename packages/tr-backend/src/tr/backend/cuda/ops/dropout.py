"""Dropout with the counter-based Philox mask shared with the CPU backend (csrc/ops/dropout.cu): the seed
(INT32[2] holding one uint64) is advanced by splitmix64 on the device before every forward."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.dropout import DROPOUT_BWD, DROPOUT_FWD
from tr.backend.rules import dropout as rules


@cuda_op("dropout_fwd")
def dropout_fwd(b: CudaBinder) -> Any:
    n, p = rules.dropout_fwd(b)
    return b.make(DROPOUT_FWD, x=b.dev("x"), y=b.dev("y"), mask=b.dev("mask"), seed=b.dev("seed"), n=n, p=float(p))


@cuda_op("dropout_bwd")
def dropout_bwd(b: CudaBinder) -> Any:
    n, p = rules.dropout_bwd(b)
    return b.make(DROPOUT_BWD, dy=b.dev("dy"), mask=b.dev("mask"), dx=b.dev("dx"), n=n, p=float(p))
