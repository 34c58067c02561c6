"""The rules of the step's scalar ops: scalar_increment (INT32 or FP32), lr_lookup (an FP32 table read at
an INT32 step into an FP32 lr), count_flag (INT32 flag and count) and loss_scale_update (an FP32 scale, an
INT32 flag, the rule, and for the dynamic rule an INT32 tracker and its growth interval). scalar_increment,
count_flag and loss_scale_update take an optional hold, one INT32 (gradient accumulation's: set, the op does
nothing), checked by :func:`one_int32`, which the range and accum rules use for their flags too."""

from __future__ import annotations

from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.core.dtype import DType
from tr.core.ops import DEFAULT_GROWTH_INTERVAL, LOSS_SCALE_RULES


def one_int32(b: CallBinder, name: str, required: bool = False) -> bool:
    """Argument ``name`` is one INT32 (a flag, hold, first or position) or, unless ``required``, absent; whether
    it is given."""
    if not required and not b.has(name):
        return False
    b.expect_dtype(name, DType.INT32)
    b.expect_numel(name, 1)
    return True


def scalar_increment(b: CallBinder) -> int:
    b.expect_dtype("x", DType.INT32, DType.FP32)
    one_int32(b, "hold")
    return b.tensor("x").numel


def lr_lookup(b: CallBinder) -> int:
    """The table's length."""
    b.expect_dtype("step", DType.INT32)
    b.expect_dtype("table", DType.FP32)
    b.expect_dtype("lr", DType.FP32)
    return b.tensor("table").numel


def count_flag(b: CallBinder) -> None:
    b.expect_dtype("flag", DType.INT32)
    b.expect_dtype("count", DType.INT32)
    one_int32(b, "hold")


@dataclass(frozen=True, slots=True)
class LossScale:
    dynamic: bool
    growth_interval: int  # dynamic: clean steps in a row before the scale doubles


def loss_scale_update(b: CallBinder) -> LossScale:
    b.expect_dtype("scale", DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    one_int32(b, "hold")
    rule = b.attr("rule", "static")
    if rule not in LOSS_SCALE_RULES:
        b.fail(f"loss-scale rule {rule!r} is not one of {list(LOSS_SCALE_RULES)}")
    if rule == "static":
        return LossScale(False, 0)
    if not b.has("tracker"):
        b.fail("rule 'dynamic' needs argument 'tracker' (INT32: clean steps in a row)")
    b.expect_dtype("tracker", DType.INT32)
    return LossScale(True, b.int_attr("growth_interval", DEFAULT_GROWTH_INTERVAL, 1))
