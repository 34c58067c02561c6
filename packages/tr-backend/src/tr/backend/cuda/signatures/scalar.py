"""Native ops of csrc/ops/scalar.cu: device-side scalars (step counters, the skipped-step counter, the
learning-rate table lookup, the loss scale), one tiny kernel each."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import flag, i64, native_op, tensor

_FLAG = tensor("flag", "INT32 [1]: the step's NaN/Inf flag")
_HOLD = tensor("hold", "INT32 [1]: gradient accumulation's (a micro-step inside its window); set: nothing is done",
               optional=True)

COUNT_FLAG = native_op(
    "count_flag", "count += 1 when flag != 0.",
    _FLAG, tensor("count", "INT32 [1]"), _HOLD)

SCALAR_INCREMENT = native_op(
    "scalar_increment", "x += 1.",
    tensor("x", "INT32 or FP32 [n]"), _HOLD, i64("n", "elements"))

LR_LOOKUP = native_op(
    "lr_lookup", "lr = table[step], step clamped to [0, len - 1].",
    tensor("table", "FP32 [len]"), tensor("step", "INT32 [1]"), tensor("lr", "FP32 [1]"),
    i64("len", "entries of the table (>= 1)"))

LOSS_SCALE_UPDATE = native_op(
    "loss_scale_update", "After a step: static, halve scale on overflow (never below 1, never grow); dynamic "
    "(torch.amp.GradScaler's rule), halve on overflow, double after growth_interval clean steps in a row.",
    _FLAG, tensor("scale", "FP32 [1]"),
    tensor("tracker", "INT32 [1]: clean steps in a row; the dynamic rule's", optional=True), _HOLD,
    flag("dynamic", "the dynamic rule (needs tracker); False: the static one"),
    i64("growth_interval", "the dynamic rule's clean steps before doubling, in [1, 2^31); unused when static"))

OPS = (COUNT_FLAG, SCALAR_INCREMENT, LR_LOOKUP, LOSS_SCALE_UPDATE)
