"""Native ops of csrc/ops/copy.cu: device-to-device copies (whole, unless a step is skipped, rows with a zeroed
tail), y += x, the residual add, and a launch that fails on purpose (tests of capture-failure reporting)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import flag, i64, native_op, ptr, tensor

_N = i64("n", "elements")
_NBYTES = i64("nbytes", "bytes to copy; 0: nothing")

DEBUG_INVALID_LAUNCH = native_op(
    "debug_invalid_launch", "A kernel launch with an empty grid, which fails with 'invalid configuration' (for "
    "tests of capture-failure reporting).")

MEMCPY = native_op(
    "memcpy", "dst = src, nbytes bytes (one cudaMemcpyAsync, device to device).",
    ptr("src", "device address (a tensor's or a span's)"), ptr("dst", "device address (a tensor's or a span's)"),
    _NBYTES)

COPY_UNLESS_FLAGGED = native_op(
    "copy_unless_flagged", "dst = src, nbytes bytes, unless flag != 0 (a skipped step keeps dst as it was).",
    ptr("src", "device address of a span"), ptr("dst", "device address of a span"),
    tensor("flag", "INT32 [1]: the step's NaN/Inf flag"), _NBYTES)

ACCUMULATE = native_op(
    "accumulate", "y += x, element-wise in float (each FP32, FP16 or BF16).",
    tensor("x", "[n]"), tensor("y", "[n]"), _N)

ROW_COPY = native_op(
    "row_copy", "dst[r, j] = src[r, j] for j < cols, 0 for cols <= j < dst_cols (channel padding).",
    ptr("src", "device address of [rows, src_cols]"), ptr("dst", "device address of [rows, dst_cols]"),
    i64("rows", "rows"), i64("src_cols", "elements per source row"), i64("dst_cols", "elements per destination row"),
    i64("cols", "elements copied per row"), i64("esize", "bytes per element: 1, 2 or 4"))

ADD_FWD = native_op(
    "add_fwd", "y = a + b, then relu when relu is set (each FP32, FP16 or BF16; y may be a or b).",
    tensor("a", "[n]"), tensor("b", "[n]"), tensor("y", "[n]"), _N,
    flag("relu", "apply relu after the add (NaN stays NaN)"))

OPS = (DEBUG_INVALID_LAUNCH, MEMCPY, COPY_UNLESS_FLAGGED, ACCUMULATE, ROW_COPY, ADD_FWD)
