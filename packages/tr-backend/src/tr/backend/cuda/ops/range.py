"""Range ops: one native op per byte range of whole regions, however many layers the model has.

Spans other than range_clear/range_copy/range_cast hold FP32 elements (bytes / 4, slot padding included:
it is zero and stays zero). The NaN/Inf flag is INT32. range_allreduce_mean is one in-place
ncclAllReduce(ncclAvg) when the backend has an NCCL communicator, and records nothing with one rank without one.
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.native import require_native
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.collective import NCCL_ALLREDUCE_MEAN
from tr.backend.cuda.signatures.copy import COPY_UNLESS_FLAGGED, MEMCPY
from tr.backend.cuda.signatures.optimizer import LARS_UPDATE, RANGE_OPTIMIZER
from tr.backend.cuda.signatures.range import (
    ACCUM_METRICS,
    MEMSET,
    RANGE_CAST,
    RANGE_CHECK_FINITE,
    RANGE_EMA,
    RANGE_SCALE,
)
from tr.backend.rules import range as rules
from tr.core.dtype import DType
from tr.core.ops import OPTIMIZER_RULE_CODES


@cuda_op("range_clear")
def range_clear(b: CudaBinder) -> Any:
    ptr, nbytes = b.span("span")
    return b.make(MEMSET, dst=ptr, nbytes=nbytes) if nbytes else None


@cuda_op("range_copy")
def range_copy(b: CudaBinder) -> Any:
    sn = rules.range_copy(b)
    (src, _), (dst, _) = b.span("src"), b.span("dst")
    if not sn:
        return None
    if not b.has("flag"):
        return b.make(MEMCPY, src=src, dst=dst, nbytes=sn)
    # a skipped step (flag != 0) keeps the destination as it was
    return b.make(COPY_UNLESS_FLAGGED, src=src, dst=dst, flag=b.dev("flag"), nbytes=sn)


@cuda_op("range_cast")
def range_cast(b: CudaBinder) -> Any:
    sdt, ddt, n = rules.range_cast(b)
    src, dst = b.span("src")[0], b.span("dst")[0]
    if not n:
        return None
    dev = require_native().Dev  # a span of one dtype, as the native op reads a tensor
    return b.make(RANGE_CAST, src=dev(src, sdt.code), dst=dev(dst, ddt.code), n=n)


@cuda_op("range_check_finite")
def range_check_finite(b: CudaBinder) -> Any:
    r = rules.range_check_finite(b)
    ptr, n = b.span_elems("span")
    if r.accumulate and not n:
        return None  # OR-ing nothing into the flag
    # hold (gradient accumulation's) is read on the device: set, the span is not read and the flag is set
    return b.make(RANGE_CHECK_FINITE, span=ptr, flag=b.dev("flag"), hold=b.dev("hold"), n=n, clip=float(r.clip),
                  accumulate=r.accumulate)


@cuda_op("range_scale")
def range_scale(b: CudaBinder) -> Any:
    ptr, n = b.span_elems("span")
    b.expect_dtype("factor", DType.FP32)
    return b.make(RANGE_SCALE, span=ptr, factor=b.dev("factor"), n=n) if n else None


@cuda_op("range_allreduce_mean")
def range_allreduce_mean(b: CudaBinder) -> Any:
    nccl = b.backend.nccl
    if nccl is None:
        if b.backend.world_size == 1:
            return None  # the mean over one rank is the identity
        b.fail(f"range_allreduce_mean over {b.backend.world_size} ranks needs an NCCL communicator; make the "
               "CudaBackend with nccl=NcclCollective.from_store(...) (tr.task.distributed.backend_options does)")
    ptr, n = b.span_elems("span")
    # in place, ncclAvg, on the graph's stream: captured into the CUDA graph like every other op
    return b.make(NCCL_ALLREDUCE_MEAN, span=ptr, comm=nccl.handle, n=n) if n else None


@cuda_op("range_ema")
def range_ema(b: CudaBinder) -> Any:
    r = rules.range_ema(b)  # a skipped step (flag != 0) leaves the EMA weights as they were
    src, dst = b.span("src")[0], b.span("dst")[0]
    if not r.n:
        return None
    return b.make(RANGE_EMA, src=src, dst=dst, flag=b.dev("flag"), step=b.dev("step") if r.warmup > 0 else None,
                  n=r.n, decay=float(r.decay), warmup=float(r.warmup))


@cuda_op("accum_metrics")
def accum_metrics(b: CudaBinder) -> Any:
    n = rules.accum_metrics(b)  # a skipped step (flag != 0) adds nothing
    return b.make(ACCUM_METRICS, result=b.dev("result"), accum=b.dev("accum"), batch=b.dev("batch"), flag=b.dev("flag"),
                  samples=b.dev("samples"), n=n)


@cuda_op("range_optimizer")
def range_optimizer(b: CudaBinder) -> Any:
    r = rules.range_optimizer(b)
    w, g = b.span("w")[0], b.span("g")[0]
    m = b.span("m")[0] if r.m else None  # the moments (and Adam's step) only where the rule reads them
    v = b.span("v")[0] if r.v else None
    if not r.n:
        return None
    return b.make(RANGE_OPTIMIZER, w=w, g=g, m=m, v=v, lr=b.dev("lr"), flag=b.dev("flag"),
                  grad_scale=b.dev("grad_scale"), step=b.dev("step") if r.adam else None, n=r.n,
                  rule=OPTIMIZER_RULE_CODES[r.rule], beta1=float(r.beta1), beta2=float(r.beta2), eps=float(r.eps),
                  weight_decay=float(r.weight_decay), lr_scale=float(r.lr_scale))


@cuda_op("tensor_optimizer")
def tensor_optimizer(b: CudaBinder) -> Any:
    r = rules.tensor_optimizer(b)  # the native range update, over one tensor and its twins
    if not r.n:
        return None
    return b.make(RANGE_OPTIMIZER, w=b.ptr("w"), g=b.ptr("g"), m=b.ptr("m") if r.m else None,
                  v=b.ptr("v") if r.v else None, lr=b.dev("lr"), flag=b.dev("flag"), grad_scale=b.dev("grad_scale"),
                  step=b.dev("step") if r.adam else None, n=r.n, rule=OPTIMIZER_RULE_CODES[r.rule],
                  beta1=float(r.beta1), beta2=float(r.beta2), eps=float(r.eps), weight_decay=float(r.weight_decay),
                  lr_scale=float(r.lr_scale))


@cuda_op("lars_update")
def lars_update(b: CudaBinder) -> Any:
    r = rules.lars_update(b)
    return b.make(LARS_UPDATE, w=b.dev("w"), g=b.dev("g"), m=b.dev("m"), lr=b.dev("lr"), flag=b.dev("flag"),
                  grad_scale=b.dev("grad_scale"), ratio=b.dev("ratio"), n=r.n, nesterov=r.nesterov,
                  momentum=float(r.momentum), weight_decay=float(r.weight_decay),
                  trust_coefficient=float(r.trust_coefficient), eps=float(r.eps), trust_clip=float(r.trust_clip))
