"""Native ops of csrc/ops/accum.cu: gradient accumulation (task.accumulate), a window of k micro-steps a step.
Every decision is the device's: the position, hold and first are INT32 [1] tensors the kernels read."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import i64, native_op, ptr, tensor

_HOLD = tensor("hold", "INT32 [1]: set while the window goes on (accum_window's)")
_FIRST = tensor("first", "INT32 [1]: set on the window's first micro-step (accum_window's)")

ACCUM_WINDOW = native_op(
    "accum_window", "One thread: p = pos, w0 = p - p % k, n = min(k, steps - w0); hold = (p != w0 + n - 1), first = "
    "(p == w0), div = (n - 1) * batch + (w0 + n == steps ? last_batch : batch), pos = (p + 1 == steps ? 0 : p + 1).",
    tensor("pos", "INT32 [1]: the micro-step of the epoch, in [0, steps)"), tensor("hold", "INT32 [1]"),
    tensor("first", "INT32 [1]"), tensor("div", "FP32 [1]: the window's samples"),
    i64("k", "micro-steps a window, >= 2"), i64("steps", "micro-steps an epoch, in [1, 2^31)"),
    i64("batch", "samples a micro-batch, >= 1"), i64("last_batch", "the epoch's last micro-batch's, in [1, batch]"))

RANGE_ACCUMULATE = native_op(
    "range_accumulate", "Element-wise FP32: hold: acc = first ? src : acc + src; else src = first ? src : acc + src.",
    ptr("src", "device address of n FP32 values (the gradients)"),
    ptr("acc", "device address of n FP32 values (their sums so far)"), _HOLD, _FIRST, i64("n", "elements"))

WINDOW_RESULT = native_op(
    "window_result", "In float32: first: window = 0; window[:n] += result * batch[0]; window[n] += batch[0]; not "
    "hold: result = window[:n] / window[n].",
    tensor("result", "FP32 [n]: the micro-step's result row"), tensor("window", "FP32 [n + 1]: the sums, the samples"),
    tensor("batch", "FP32 [1]: the micro-batch's samples"), _HOLD, _FIRST, i64("n", "values of the result"))

OPS = (ACCUM_WINDOW, RANGE_ACCUMULATE, WINDOW_RESULT)
