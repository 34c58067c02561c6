"""The rules of gradient accumulation's ops (task.accumulate: a window of k micro-steps makes one optimizer step):
accum_window (one INT32 position, hold and first each, one FP32 div; attributes k >= 2, S >= 1 micro-steps an
epoch, m >= 1 samples a micro-batch, the epoch's last micro-batch's in [1, m]), range_accumulate (two FP32 spans of
one size, GRAD and its GRAD_ACCUM twins, whose pairing tr.graph's memory plan checks; hold and first) and
window_result (an FP32 result row of n values, an FP32 window of n + 1, an FP32 batch, hold and first)."""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.backend.rules.scalar import one_int32
from tr.core.dtype import DType
from tr.core.errors import ShapeError

_INT32_MAX = 2**31 - 1
_FP32_EXACT = 2**24  # div is FP32: every integer up to it is exact


@dataclass(frozen=True, slots=True)
class Window:
    k: int  # micro-steps a window
    steps: int  # micro-steps an epoch (S)
    batch: int  # samples a micro-batch (m)
    last_batch: int  # the epoch's last micro-batch's samples

    def at(self, p: int) -> tuple[int, int, float, int]:
        """(hold, first, div, the next position) of micro-step ``p`` in [0, S): what both backends compute."""
        w0 = p - p % self.k
        n = min(self.k, self.steps - w0)
        div = (n - 1) * self.batch + (self.last_batch if w0 + n == self.steps else self.batch)
        return int(p != w0 + n - 1), int(p == w0), float(div), 0 if p + 1 == self.steps else p + 1


def accum_window(b: CallBinder) -> Window:
    for name in ("pos", "hold", "first"):
        one_int32(b, name, required=True)
    b.expect_dtype("div", DType.FP32)
    b.expect_numel("div", 1)
    k = b.int_attr("accumulate", lo=2)
    steps = b.int_attr("steps", lo=1)
    m = b.int_attr("batch", lo=1)
    last = b.int_attr("last_batch", lo=1)
    if steps > _INT32_MAX:
        b.fail(f"attribute 'steps' = {steps} does not fit the INT32 position (at most {_INT32_MAX})")
    if last > m:
        b.fail(f"attribute 'last_batch' = {last} must be in [1, batch = {m}]")
    if k * m >= _FP32_EXACT:
        b.fail(f"a window of accumulate x batch = {k} x {m} samples does not fit FP32's exact integers (< 2^24)")
    return Window(k, steps, m, last)


def range_accumulate(b: CallBinder) -> int:
    """FP32 elements of src (and of acc)."""
    sn, an = b.span_size("src", 4), b.span_size("acc", 4)
    if sn != an:
        b.fail(f"span src has {sn} FP32 elements but acc has {an}; expected equal ranges", ShapeError)
    one_int32(b, "hold", required=True)
    one_int32(b, "first", required=True)
    return sn


def window_result(b: CallBinder) -> int:
    """The result's values (the window holds their sums and the samples)."""
    b.expect_dtype("result", DType.FP32)
    b.expect_dtype("window", DType.FP32)
    n = b.tensor("result").numel
    b.expect_numel("window", n + 1)
    b.expect_dtype("batch", DType.FP32)
    b.expect_numel("batch", 1)
    one_int32(b, "hold", required=True)
    one_int32(b, "first", required=True)
    return n
