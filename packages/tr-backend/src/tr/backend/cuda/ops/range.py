"""Range ops: one native op per byte range of whole regions, however many layers the model has.

Spans other than range_clear/range_copy/range_cast hold FP32 elements (bytes / 4, slot padding included:
it is zero and stays zero). The NaN/Inf flag is INT32. range_allreduce_mean is one in-place
ncclAllReduce(ncclAvg) when the backend has an NCCL communicator, and records nothing with one rank without one.
"""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import DTYPE_CODES, CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.dtype import DType
from tr.core.errors import ShapeError
from tr.core.ops import OPTIMIZER_RULES


def _same_length(b: CudaBinder, a: str, c: str, an: int, cn: int) -> None:
    if an != cn:
        b.fail(f"span {a} has {an} elements but {c} has {cn}; expected equal ranges", ShapeError)


@cuda_op("range_clear")
def range_clear(b: CudaBinder) -> Any:
    ptr, nbytes = b.span("span")
    return b.native("memset", ptrs={"dst": ptr}, ints={"nbytes": nbytes}) if nbytes else None


@cuda_op("range_copy")
def range_copy(b: CudaBinder) -> Any:
    (src, sn), (dst, dn) = b.span("src"), b.span("dst")
    _same_length(b, "src", "dst", sn, dn)
    if not sn:
        return None
    if not b.has("flag"):
        return b.native("memcpy", ptrs={"src": src, "dst": dst}, ints={"nbytes": sn})
    b.expect_dtype("flag", DType.INT32)  # a skipped step (flag != 0) keeps the destination as it was
    return b.native("copy_unless_flagged", ["flag"], ptrs={"src": src, "dst": dst}, ints={"nbytes": sn})


@cuda_op("range_cast")
def range_cast(b: CudaBinder) -> Any:
    try:
        sdt, ddt = DType.parse(b.attr("src_dtype")), DType.parse(b.attr("dst_dtype"))
    except ValueError as e:
        b.fail(str(e))
    for dt in (sdt, ddt):
        if not dt.is_float:
            b.fail(f"range_cast converts between float types, got {dt.name}")
    src, sn = b.span_elems("src", sdt.itemsize)
    dst, dn = b.span_elems("dst", ddt.itemsize)
    n = min(sn, dn)  # an FP32 slot is exactly twice its FP16 twin: elements line up
    return b.native("range_cast", ptrs={"src": src, "dst": dst},
                    ints={"n": n, "src_dt": DTYPE_CODES[sdt], "dst_dt": DTYPE_CODES[ddt]}) if n else None


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
    decay = b.float_attr("decay", lo=0.0, hi=1.0)
    src, sn = b.span_elems("src")
    dst, dn = b.span_elems("dst")
    _same_length(b, "src", "dst", sn, dn)
    if b.has("flag"):  # a skipped step (flag != 0) leaves the EMA weights as they were
        b.expect_dtype("flag", DType.INT32)
        b.expect_numel("flag", 1)
    return b.native("range_ema", ["flag"], ptrs={"src": src, "dst": dst}, ints={"n": sn},
                    floats={"decay": decay}) if sn else None


@cuda_op("accum_metrics")
def accum_metrics(b: CudaBinder) -> Any:
    n = b.tensor("result").numel
    b.expect_numel("accum", n)
    b.expect_dtype("result", DType.FP32)
    b.expect_dtype("accum", DType.FP32)
    b.expect_dtype("batch", DType.FP32, DType.INT32)
    if b.has("flag"):  # a skipped step (flag != 0) adds nothing
        b.expect_dtype("flag", DType.INT32)
        b.expect_numel("flag", 1)
    if b.has("samples"):
        b.expect_dtype("samples", DType.FP32)
        b.expect_numel("samples", 1)
    return b.native("accum_metrics", ["result", "accum", "batch", "flag", "samples"], ints={"n": n})


@cuda_op("range_optimizer")
def range_optimizer(b: CudaBinder) -> Any:
    rule = b.attr("rule")
    if rule not in OPTIMIZER_RULES:
        b.fail(f"optimizer rule {rule!r} is not one of {list(OPTIMIZER_RULES)}")
    adam = rule in ("adam", "adamw")
    needs = {"m": rule != "sgd", "v": adam, "step": adam}
    for name, needed in needs.items():
        if needed and not b.has(name):
            b.fail(f"rule {rule!r} needs argument {name!r}")
    b1 = b.float_attr("beta1", 0.9, 0.0, 1.0)
    b2 = b.float_attr("beta2", 0.999, 0.0, 1.0)
    eps = b.float_attr("eps", 1e-8, 0.0)
    wd = b.float_attr("weight_decay", 0.0, 0.0)
    if adam and (b1 >= 1.0 or b2 >= 1.0):
        b.fail(f"adam needs beta1, beta2 < 1, got {b1}, {b2}")
    w, n = b.span_elems("w")
    ptrs = {"w": w}
    for name in ("g", "m", "v"):
        if needs.get(name, True):
            p, k = b.span_elems(name)
            if k != n:
                b.fail(f"span {name!r} has {k} FP32 elements but w has {n}; expected equal ranges", ShapeError)
            ptrs[name] = p
    b.expect_dtype("lr", DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    b.expect_dtype("grad_scale", DType.FP32)
    tensors = ["lr", "flag", "grad_scale"]
    if adam:
        b.expect_dtype("step", DType.INT32)
        tensors.append("step")
    if not n:
        return None
    return b.native("range_optimizer", tensors, ptrs=ptrs, ints={"n": n, "rule": OPTIMIZER_RULES.index(rule)},
                    floats={"beta1": b1, "beta2": b2, "eps": eps, "weight_decay": wd})


@cuda_op("lars_update")
def lars_update(b: CudaBinder) -> Any:
    for name in ("w", "g", "m"):
        b.expect_dtype(name, DType.FP32)
    n = b.tensor("w").numel
    b.expect_numel("g", n)
    b.expect_numel("m", n)
    b.expect_dtype("lr", DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    b.expect_dtype("grad_scale", DType.FP32)
    b.expect_dtype("ratio", DType.FP32)
    return b.native("lars_update", ["w", "g", "m", "lr", "flag", "grad_scale", "ratio"],
                    ints={"n": n, "nesterov": bool(b.attr("nesterov", False))},
                    floats={"momentum": b.float_attr("momentum", 0.9, 0.0, 1.0),
                            "weight_decay": b.float_attr("weight_decay", 0.0, 0.0),
                            "trust_coefficient": b.float_attr("trust_coefficient", 0.001, 0.0),
                            "eps": b.float_attr("eps", 1e-8, 0.0),
                            "trust_clip": b.float_attr("trust_clip", 100.0, 0.0)})
