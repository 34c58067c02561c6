"""Device-side scalars: step counters, the learning-rate table lookup, the loss scale (static or dynamic)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.core.dtype import DType
from tr.core.ops import DEFAULT_GROWTH_INTERVAL, LOSS_SCALE_RULES


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
    rule = b.attr("rule", "static")
    if rule not in LOSS_SCALE_RULES:
        b.fail(f"loss-scale rule {rule!r} is not one of {list(LOSS_SCALE_RULES)}")
    if rule == "static":
        return b.native("loss_scale_update", ["flag", "scale"], ints={"dynamic": 0})
    if not b.has("tracker"):
        b.fail("rule 'dynamic' needs argument 'tracker' (INT32: clean steps in a row)")
    b.expect_dtype("tracker", DType.INT32)
    return b.native("loss_scale_update", ["flag", "scale", "tracker"],
                    ints={"dynamic": 1, "growth_interval": b.int_attr("growth_interval", DEFAULT_GROWTH_INTERVAL, 1)})
