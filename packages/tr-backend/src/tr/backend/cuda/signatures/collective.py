"""Native ops of csrc/ops/collective.cpp: collectives over NCCL, recorded into the CUDA graph like any other op."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import i64, native_op, ptr

NCCL_ALLREDUCE_MEAN = native_op(
    "nccl_allreduce_mean", "span = the mean of span over the ranks (one in-place ncclAllReduce, ncclAvg).",
    ptr("span", "device address of n FP32 values"),
    ptr("comm", "the ncclComm_t: a tr.backend._native.NcclComm's handle, alive as long as the graphs"),
    i64("n", "elements (>= 0)"))

OPS = (NCCL_ALLREDUCE_MEAN,)
