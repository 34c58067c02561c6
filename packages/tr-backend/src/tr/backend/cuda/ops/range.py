"""Range ops: one native op per byte range of whole regions, however many layers the model has.

Spans other than range_clear/range_copy/range_cast hold FP32 elements (bytes / 4, slot padding included:
it is zero and stays zero). The NaN/Inf flag is INT32. range_allreduce_mean is one in-place
ncclAllReduce(ncclAvg) when the backend has an NCCL communicator, and records nothing with one rank without one.
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import range as rules
from tr.core.dtype import DType
from tr.core.ops import OPTIMIZER_RULES


@cuda_op("range_clear")
def range_clear(b: CudaBinder) -> Any:
    ptr, nbytes = b.span("span")
    return b.native("memset", ptrs={"dst": ptr}, ints={"nbytes": nbytes}) if nbytes else None


@cuda_op("range_copy")
def range_copy(b: CudaBinder) -> Any:
    sn = rules.range_copy(b)
    (src, _), (dst, _) = b.span("src"), b.span("dst")
    if not sn:
        return None
    if not b.has("flag"):
        return b.native("memcpy", ptrs={"src": src, "dst": dst}, ints={"nbytes": sn})
    # a skipped step (flag != 0) keeps the destination as it was
    return b.native("copy_unless_flagged", ["flag"], ptrs={"src": src, "dst": dst}, ints={"nbytes": sn})


@cuda_op("range_cast")
def range_cast(b: CudaBinder) -> Any:
    sdt, ddt, n = rules.range_cast(b)
    src, dst = b.span("src")[0], b.span("dst")[0]
    return b.native("range_cast", ptrs={"src": src, "dst": dst},
                    ints={"n": n, "src_dt": sdt.code, "dst_dt": ddt.code}) if n else None


@cuda_op("range_check_finite")
def range_check_finite(b: CudaBinder) -> Any:
    ptr, n = b.span_elems("span")
    b.expect_dtype("flag", DType.INT32)
    clip = b.float_attr("clip", 0.0, 0.0)
    accumulate = b.bool_attr("accumulate", False)
    if accumulate and not n:
        return None  # OR-ing nothing into the flag
    return b.native("range_check_finite", ["flag"], ptrs={"span": ptr}, ints={"n": n, "accumulate": int(accumulate)},
                    floats={"clip": clip})


@cuda_op("range_scale")
def range_scale(b: CudaBinder) -> Any:
    ptr, n = b.span_elems("span")
    b.expect_dtype("factor", DType.FP32)
    return b.native("range_scale", ["factor"], ptrs={"span": ptr}, ints={"n": n}) if n else None


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
    return b.native("nccl_allreduce_mean", ptrs={"span": ptr, "comm": nccl.handle}, ints={"n": n}) if n else None


@cuda_op("range_ema")
def range_ema(b: CudaBinder) -> Any:
    sn, decay = rules.range_ema(b)  # a skipped step (flag != 0) leaves the EMA weights as they were
    src, dst = b.span("src")[0], b.span("dst")[0]
    return b.native("range_ema", ["flag"], ptrs={"src": src, "dst": dst}, ints={"n": sn},
                    floats={"decay": decay}) if sn else None


@cuda_op("accum_metrics")
def accum_metrics(b: CudaBinder) -> Any:
    n = rules.accum_metrics(b)  # a skipped step (flag != 0) adds nothing
    return b.native("accum_metrics", ["result", "accum", "batch", "flag", "samples"], ints={"n": n})


@cuda_op("range_optimizer")
def range_optimizer(b: CudaBinder) -> Any:
    r = rules.range_optimizer(b)
    ptrs = {name: b.span(name)[0] for name in ["w", "g"] + ["m"] * r.m + ["v"] * r.v}
    tensors = ["lr", "flag", "grad_scale"] + (["step"] if r.adam else [])
    if not r.n:
        return None
    return b.native("range_optimizer", tensors, ptrs=ptrs, ints={"n": r.n, "rule": OPTIMIZER_RULES.index(r.rule)},
                    floats={"beta1": r.beta1, "beta2": r.beta2, "eps": r.eps, "weight_decay": r.weight_decay})


@cuda_op("lars_update")
def lars_update(b: CudaBinder) -> Any:
    r = rules.lars_update(b)
    return b.native("lars_update", ["w", "g", "m", "lr", "flag", "grad_scale", "ratio"],
                    ints={"n": r.n, "nesterov": r.nesterov},
                    floats={"momentum": r.momentum, "weight_decay": r.weight_decay,
                            "trust_coefficient": r.trust_coefficient, "eps": r.eps, "trust_clip": r.trust_clip})
