"""The rules of the range ops that both backends check alike: range_copy, range_cast, range_check_finite,
range_optimizer, lars_update, range_ema and accum_metrics. A span is a byte range over whole regions
(tr.core.memory.Span); element counts are FP32 unless the op says otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tr.backend.binding import CallBinder
from tr.backend.rules.scalar import one_int32
from tr.core.dtype import DType
from tr.core.errors import ShapeError
from tr.core.ops import OPTIMIZER_RULES
from tr.core.optim import second_moment


def range_copy(b: CallBinder) -> int:
    """Bytes to copy (src and dst of one size); an optional INT32 flag skips the copy when set."""
    sn, dn = b.span_size("src"), b.span_size("dst")
    if sn != dn:
        b.fail(f"span src has {sn} elements but dst has {dn}; expected equal ranges", ShapeError)
    if b.has("flag"):
        b.expect_dtype("flag", DType.INT32)
    return sn


def range_cast(b: CallBinder) -> tuple[DType, DType, int]:
    """(source dtype, destination dtype, elements): an FP32 slot is exactly twice its FP16 twin, so elements
    line up and the shorter span's count is the cast's."""
    try:
        sdt, ddt = DType.parse(b.attr("src_dtype")), DType.parse(b.attr("dst_dtype"))
    except ValueError as e:
        b.fail(str(e))
    for dt in (sdt, ddt):
        if not dt.is_float:
            b.fail(f"range_cast converts between float types, got {dt.name}")
    return sdt, ddt, min(b.span_size("src", sdt.itemsize), b.span_size("dst", ddt.itemsize))


@dataclass(frozen=True, slots=True)
class CheckFinite:
    n: int  # FP32 elements of the span
    clip: float  # > 0: clamp to [-clip, clip]
    accumulate: bool  # OR into the flag instead of setting it
    hold: bool  # a hold argument is given: when set, nothing is read and (unless accumulate) flag = 1


def range_check_finite(b: CallBinder) -> CheckFinite:
    b.expect_dtype("flag", DType.INT32)
    return CheckFinite(b.span_size("span", 4), b.float_attr("clip", 0.0, 0.0), b.bool_attr("accumulate", False),
                       one_int32(b, "hold"))


@dataclass(frozen=True, slots=True)
class Optimizer:
    rule: str
    n: int  # FP32 elements of w (and of g, m, v)
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    lr_scale: float  # the learning rate is lr[0] times this (a parameter group's multiplier)
    m: bool  # the rule keeps a first moment / momentum
    v: bool  # and a second moment (Adam): then also a step count

    @property
    def adam(self) -> bool:
        return self.v


def range_optimizer(b: CallBinder) -> Optimizer:
    return _optimizer(b, lambda name: b.span_size(name, 4))


def tensor_optimizer(b: CallBinder) -> Optimizer:
    """range_optimizer's rule over one FP32 tensor and its twins (each of w's elements)."""
    for name in ("w", "g", "m", "v"):
        if b.has(name):
            b.expect_dtype(name, DType.FP32)
    return _optimizer(b, lambda name: b.tensor(name).numel)


def _optimizer(b: CallBinder, size) -> Optimizer:
    rule = b.attr("rule")
    if rule not in OPTIMIZER_RULES:
        b.fail(f"optimizer rule {rule!r} is not one of {list(OPTIMIZER_RULES)}")
    adam = second_moment(rule)
    needs = {"m": rule != "sgd", "v": adam, "step": adam}
    for name, needed in needs.items():
        if needed and not b.has(name):
            b.fail(f"rule {rule!r} needs argument {name!r}")
    b1 = b.float_attr("beta1", 0.9, 0.0, 1.0)
    b2 = b.float_attr("beta2", 0.999, 0.0, 1.0)
    eps = b.float_attr("eps", 1e-8, 0.0)
    wd = b.float_attr("weight_decay", 0.0, 0.0)
    lr_scale = b.float_attr("lr_scale", 1.0, 0.0)
    if not math.isfinite(lr_scale):
        b.fail(f"attribute 'lr_scale' = {lr_scale!r} must be a finite number >= 0")
    if adam and (b1 >= 1.0 or b2 >= 1.0):
        b.fail(f"adam needs beta1, beta2 < 1, got {b1}, {b2}")
    n = size("w")
    for name in ("g", "m", "v"):
        if needs.get(name, True):
            k = size(name)
            if k != n:
                b.fail(f"{name!r} has {k} FP32 elements but w has {n}; expected equal sizes", ShapeError)
    b.expect_dtype("lr", DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    b.expect_dtype("grad_scale", DType.FP32)
    if adam:
        b.expect_dtype("step", DType.INT32)
    return Optimizer(rule, n, b1, b2, eps, wd, lr_scale, needs["m"], adam)


@dataclass(frozen=True, slots=True)
class Lars:
    n: int
    nesterov: bool
    momentum: float
    weight_decay: float
    trust_coefficient: float
    eps: float
    trust_clip: float


def lars_update(b: CallBinder) -> Lars:
    for name in ("w", "g", "m"):
        b.expect_dtype(name, DType.FP32)
    n = b.tensor("w").numel
    b.expect_numel("g", n)
    b.expect_numel("m", n)
    for name in ("lr", "grad_scale", "ratio"):
        b.expect_dtype(name, DType.FP32)
    b.expect_dtype("flag", DType.INT32)
    return Lars(n, bool(b.attr("nesterov", False)), b.float_attr("momentum", 0.9, 0.0, 1.0),
                b.float_attr("weight_decay", 0.0, 0.0), b.float_attr("trust_coefficient", 0.001, 0.0),
                b.float_attr("eps", 1e-8, 0.0), b.float_attr("trust_clip", 100.0, 0.0))


def _flag(b: CallBinder) -> None:
    """The optional skip flag: one INT32 (a step skipped for a non-finite value leaves the target as it was)."""
    if b.has("flag"):
        b.expect_dtype("flag", DType.INT32)
        b.expect_numel("flag", 1)


@dataclass(frozen=True, slots=True)
class Ema:
    n: int  # FP32 elements of src and dst
    decay: float
    warmup: float  # > 0: the decay ramps up with the step counter (ema_decay); 0: constant

    def decay_at(self, step: int) -> float:
        """The decay of the update made at step counter ``step`` (steps taken, this one included): both backends
        compute it in float64 and round it, and 1 minus it, to float32."""
        return self.decay * -math.expm1(-step / self.warmup) if self.warmup > 0 else self.decay


def range_ema(b: CallBinder) -> Ema:
    """dst = decay * dst + (1 - decay) * src over spans of one size; with a warmup, an INT32 step counter."""
    decay = b.float_attr("decay", lo=0.0, hi=1.0)
    warmup = b.float_attr("warmup", 0.0, lo=0.0)
    if not math.isfinite(warmup):
        b.fail(f"attribute 'warmup' = {warmup!r} must be a finite number >= 0")
    sn, dn = b.span_size("src", 4), b.span_size("dst", 4)
    if sn != dn:
        b.fail(f"span src has {sn} elements but dst has {dn}; expected equal ranges", ShapeError)
    _flag(b)
    if warmup > 0:
        if not b.has("step"):
            b.fail("a warmup needs argument 'step' (the step counter)")
        b.expect_dtype("step", DType.INT32)
        b.expect_numel("step", 1)
    return Ema(sn, decay, warmup)


def accum_metrics(b: CallBinder) -> int:
    """Values of the step's result: accum += result * batch (FP32), and samples += batch when given."""
    n = b.tensor("result").numel
    b.expect_numel("accum", n)
    b.expect_dtype("result", DType.FP32)
    b.expect_dtype("accum", DType.FP32)
    b.expect_dtype("batch", DType.FP32, DType.INT32)
    _flag(b)
    if b.has("samples"):
        b.expect_dtype("samples", DType.FP32)
        b.expect_numel("samples", 1)
    return n
