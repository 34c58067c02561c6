"""Native ops of csrc/ops/range.cu: clear, cast, finite check (+clip), scale and EMA over byte ranges of whole
regions (spans, one launch however many layers), and the metric accumulation. Span elements are FP32 unless the
op says otherwise; the NaN/Inf flag is INT32 [1]."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, flag, i64, native_op, ptr, tensor

_N = i64("n", "elements")
_SKIP = "INT32 [1]: the step's NaN/Inf flag; set: nothing is written"

MEMSET = native_op(
    "memset", "dst = 0, nbytes bytes (one cudaMemsetAsync).",
    ptr("dst", "device address of a span"), i64("nbytes", "bytes to clear; 0: nothing"))

RANGE_CAST = native_op(
    "range_cast", "dst = src rounded to dst's dtype (each FP32, FP16 or BF16).",
    tensor("src", "[n]: a span's address and its elements' dtype"),
    tensor("dst", "[n]: a span's address and its elements' dtype"), _N)

RANGE_CHECK_FINITE = native_op(
    "range_check_finite", "flag = 1 when a value of the span is not finite, else 0; with clip > 0 the values are "
    "clamped to [-clip, clip] (NaN stays NaN). With hold set nothing is read and flag = 1 (unless accumulate).",
    ptr("span", "device address of n FP32 values"), tensor("flag", "INT32 [1]"),
    tensor("hold", "INT32 [1]: gradient accumulation's; set: the span is not read, flag = 1 (accumulate: as it is)",
           optional=True), _N,
    f64("clip", "> 0: the clamp's bound; 0: no clamp"),
    flag("accumulate", "OR into flag (which is then not cleared first)"))

RANGE_SCALE = native_op(
    "range_scale", "span *= factor.",
    ptr("span", "device address of n FP32 values"), tensor("factor", "FP32 [1]"), _N)

RANGE_EMA = native_op(
    "range_ema", "dst = dst * decay + src * (1 - decay), in float32.",
    ptr("src", "device address of n FP32 values"), ptr("dst", "device address of n FP32 values"),
    tensor("flag", _SKIP, optional=True),
    tensor("step", "INT32 [1]: the step counter (steps taken, this one included); with a warmup", optional=True),
    _N, f64("decay", "in [0, 1]"),
    f64("warmup", "> 0: the decay is decay * (1 - exp(-step / warmup)), in float64; 0: constant", default=0.0))

ACCUM_METRICS = native_op(
    "accum_metrics", "accum += result * batch[0] (the product in float32, the sum in float64, as the CPU "
    "backend); samples += batch[0].",
    tensor("result", "FP32 [n]: the step's values"), tensor("accum", "FP32 [n]"),
    tensor("batch", "FP32 or INT32 [1]: the step's samples"), tensor("flag", _SKIP, optional=True),
    tensor("samples", "FP32 [1]; absent: not counted", optional=True), _N)

OPS = (MEMSET, RANGE_CAST, RANGE_CHECK_FINITE, RANGE_SCALE, RANGE_EMA, ACCUM_METRICS)
