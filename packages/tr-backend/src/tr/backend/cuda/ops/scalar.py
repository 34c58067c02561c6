"""Device-side scalars: step counters, the learning-rate table lookup, the loss scale (static or dynamic). The
counters and the loss scale pass gradient accumulation's optional hold, which their kernels read on the device."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.scalar import COUNT_FLAG, LOSS_SCALE_UPDATE, LR_LOOKUP, SCALAR_INCREMENT
from tr.backend.rules import scalar as rules


@cuda_op("scalar_increment")
def scalar_increment(b: CudaBinder) -> Any:
    return b.make(SCALAR_INCREMENT, x=b.dev("x"), hold=b.dev("hold"), n=rules.scalar_increment(b))


@cuda_op("lr_lookup")
def lr_lookup(b: CudaBinder) -> Any:
    return b.make(LR_LOOKUP, table=b.dev("table"), step=b.dev("step"), lr=b.dev("lr"), len=rules.lr_lookup(b))


@cuda_op("count_flag")
def count_flag(b: CudaBinder) -> Any:
    rules.count_flag(b)
    return b.make(COUNT_FLAG, flag=b.dev("flag"), count=b.dev("count"), hold=b.dev("hold"))


@cuda_op("loss_scale_update")
def loss_scale_update(b: CudaBinder) -> Any:
    r = rules.loss_scale_update(b)
    # the static rule reads neither the tracker nor the growth interval (0)
    return b.make(LOSS_SCALE_UPDATE, flag=b.dev("flag"), scale=b.dev("scale"),
                  tracker=b.dev("tracker") if r.dynamic else None, hold=b.dev("hold"), dynamic=r.dynamic,
                  growth_interval=r.growth_interval)
