"""Device-side scalars: step counters, the learning-rate table lookup, the only-halving loss scale."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.dtype import DType


@cuda_op("scalar_increment")
def scalar_increment(b: CudaBinder) -> Any:
    b.expect_dtype("x", DType.INT32, DType.FP32)
    return b.native("scalar_increment", ["x"], ints={"n": b.tensor("x").numel})


@cuda_op("lr_lookup")
def lr_lookup(b: CudaBinder) -> Any:
    b.expect_dtype("step", DType.INT32)
    b.expect_dtype("table", DType.FP32)
    b.expect_dtype("lr", DType.FP32)
    return b.native("lr_lookup", ["table", "step", "lr"], ints={"len": b.tensor("table").numel})


@cuda_op("count_flag")
def count_flag(b: CudaBinder) -> Any:
    b.expect_dtype("flag", DType.INT32)
    b.expect_dtype("count", DType.INT32)
    return b.native("count_flag", ["flag", "count"])


@cuda_op("loss_scale_update")
def loss_scale_update(b: CudaBinder) -> Any:
    b.expect_dtype("scale", DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    return b.native("loss_scale_update", ["flag", "scale"])
