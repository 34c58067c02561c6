"""Device-side scalars: step counters, the learning-rate table lookup, the loss scale (static or dynamic)."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import scalar as rules


@cuda_op("scalar_increment")
def scalar_increment(b: CudaBinder) -> Any:
    return b.native("scalar_increment", ["x"], ints={"n": rules.scalar_increment(b)})


@cuda_op("lr_lookup")
def lr_lookup(b: CudaBinder) -> Any:
    return b.native("lr_lookup", ["table", "step", "lr"], ints={"len": rules.lr_lookup(b)})


@cuda_op("count_flag")
def count_flag(b: CudaBinder) -> Any:
    rules.count_flag(b)
    return b.native("count_flag", ["flag", "count"])


@cuda_op("loss_scale_update")
def loss_scale_update(b: CudaBinder) -> Any:
    r = rules.loss_scale_update(b)
    if not r.dynamic:
        return b.native("loss_scale_update", ["flag", "scale"], ints={"dynamic": 0})
    return b.native("loss_scale_update", ["flag", "scale", "tracker"],
                    ints={"dynamic": 1, "growth_interval": r.growth_interval})
