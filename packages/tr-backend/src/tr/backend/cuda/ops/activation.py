"""Element-wise activations (tr.core.ops.ACTIVATIONS): forward with the optional INT8 mask [x > 0],
backward recomputed from x (or read from relu's mask), inference. Formulas: csrc/ops/activation.cu."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.activation import ACT_BWD, ACT_FWD, ACT_INF
from tr.backend.rules import activation as rules


@cuda_op("act_fwd")
def act_fwd(b: CudaBinder) -> Any:
    r = rules.act_fwd(b, True)
    return b.make(ACT_FWD, x=b.dev("x"), y=b.dev("y"), mask=b.dev("mask"), n=r.n, kind=r.code)


@cuda_op("act_inf")
def act_inf(b: CudaBinder) -> Any:
    r = rules.act_fwd(b, False)
    return b.make(ACT_INF, x=b.dev("x"), y=b.dev("y"), n=r.n, kind=r.code)


@cuda_op("act_bwd")
def act_bwd(b: CudaBinder) -> Any:
    r = rules.act_bwd(b)  # the mask is read only for relu: another kind's derivative comes from x
    return b.make(ACT_BWD, x=b.dev("x"), dy=b.dev("dy"), dx=b.dev("dx"), mask=b.dev("mask") if r.mask else None,
                  n=r.n, kind=r.code)
