"""Byte-range memory ops (clear, copy, cast), the finite check, scaling, all-reduce, EMA, metric sums."""

from __future__ import annotations

from functools import partial

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.convert import converter
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import range as rules
from tr.core.dtype import DType


@cpu_op("range_clear")
def range_clear(b: Binder) -> Step | None:
    v = b.span("span")
    return partial(v.fill, 0) if v.size else None


@cpu_op("range_copy")
def range_copy(b: Binder) -> Step | None:
    rules.range_copy(b)
    src, dst = b.span("src"), b.span("dst")
    if not src.size:
        return None
    if not b.has("flag"):
        return partial(np.copyto, dst, src)
    flag = b.flat("flag")

    def copy_unless_flagged() -> None:  # a skipped step keeps the destination as it was
        if not flag[0]:
            np.copyto(dst, src)

    return copy_unless_flagged


@cpu_op("range_cast")
def range_cast(b: Binder) -> Step | None:
    sdt, ddt, n = rules.range_cast(b)
    src, dst = b.span("src", sdt.np_dtype), b.span("dst", ddt.np_dtype)
    return partial(converter(sdt, ddt), src[:n], dst[:n]) if n else None


@cpu_op("range_check_finite")
def range_check_finite(b: Binder) -> Step | None:
    r = rules.range_check_finite(b)
    v = b.span("span", np.float32)
    flag = b.flat("flag")
    hold = b.flat("hold") if r.hold else None
    clip, accumulate = r.clip, r.accumulate
    lo, hi = np.float32(-clip), np.float32(clip)
    if v.size == 0:
        if accumulate:
            return None
        if hold is None:
            return partial(flag.fill, 0)

    def run() -> None:
        if hold is not None and hold[0]:  # a micro-step inside its window: skip every flagged op, read nothing
            if not accumulate:
                flag[0] = 1
            return
        if v.size == 0:
            flag[0] = 0
            return
        # max/min propagate NaN and expose +-inf: two vectorised passes, no boolean temporaries
        bad = not (np.isfinite(v.max()) and np.isfinite(v.min()))
        if bad or not accumulate:  # accumulate: OR into the flag, never clear it
            flag[0] = 1 if bad else 0
        if clip > 0:
            np.clip(v, lo, hi, out=v)

    return run


@cpu_op("range_scale")
def range_scale(b: Binder) -> Step | None:
    v = b.span("span", np.float32)
    factor = b.flat("factor")
    if not v.size:
        return None

    def run() -> None:
        np.multiply(v, np.float32(factor[0]), out=v)

    return run


@cpu_op("range_allreduce_mean")
def range_allreduce_mean(b: Binder) -> Step | None:
    coll = b.backend.collective
    if coll is None or int(coll.world_size) == 1:
        return None  # the mean over one rank is the identity
    v = b.span("span", np.float32)
    return partial(coll.allreduce_mean, v) if v.size else None


@cpu_op("range_ema")
def range_ema(b: Binder) -> Step | None:
    r = rules.range_ema(b)
    src, dst = b.span("src", np.float32), b.span("dst", np.float32)
    if not src.size:
        return None
    tmp = b.scratch(src.shape)
    flag = b.flat("flag") if b.has("flag") else None
    step = b.flat("step") if r.warmup > 0 else None

    def run() -> None:
        if flag is not None and flag[0]:  # a skipped step: the EMA weights stay as they were
            return
        decay = r.decay_at(int(step[0])) if step is not None else r.decay
        d, keep = np.float32(decay), np.float32(1.0 - decay)
        np.multiply(dst, d, out=dst)
        np.multiply(src, keep, out=tmp)
        np.add(dst, tmp, out=dst)

    return run


@cpu_op("accum_metrics")
def accum_metrics(b: Binder) -> Step:
    n = rules.accum_metrics(b)
    result, accum, batch = b.flat("result"), b.flat("accum"), b.flat("batch")
    tmp = b.scratch((n,), np.float64)
    flag = _int32_scalar(b, "flag")
    samples = b.flat("samples") if b.has("samples") else None

    def run() -> None:
        if flag is not None and flag[0]:
            return  # a skipped step: its (non-finite) loss must not reach the epoch's sums
        np.multiply(result, float(batch[0]), out=tmp)
        np.add(accum, tmp, out=accum, casting="same_kind")
        if samples is not None:
            samples[0] += float(batch[0])

    return run


def _int32_scalar(b: Binder, name: str) -> np.ndarray | None:
    """The optional INT32 scalar argument ``name`` (a flag), or None when absent."""
    if not b.has(name):
        return None
    b.expect_dtype(name, DType.INT32)
    b.expect_numel(name, 1)
    return b.flat(name)
