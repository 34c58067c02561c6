"""A resident data set's order and batches on the device (csrc/ops/resident.cu): the epoch's Fisher-Yates
permutation by deterministic reservations in one block (tr/backend/cpu/ops/resident.py says why it is the
sequential one), and the batch selection, which advances the position on the device. Rules:
tr.backend.rules.resident."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.cuda.signatures.resident import BATCH_RESTART, BATCH_SELECT, SHUFFLE_ORDER
from tr.backend.rules import resident as rules


@cuda_op("shuffle_order")
def shuffle_order(b: CudaBinder) -> Any:
    n, shuffle = rules.shuffle_order(b)
    return b.make(SHUFFLE_ORDER, key=b.dev("key"), order=b.dev("order"), pos=b.dev("pos"), n=n, shuffle=bool(shuffle))


@cuda_op("batch_select")
def batch_select(b: CudaBinder) -> Any:
    n, rows, _, world, pad = rules.batch_select(b)  # order is passed when given: without it, the positions
    return b.make(BATCH_SELECT, order=b.dev("order"), labels_all=b.dev("labels_all"), rank=b.dev("rank"),
                  pos=b.dev("pos"), index=b.dev("index"), labels=b.dev("labels"), n=n, rows=rows, world=world,
                  pad=bool(pad))


@cuda_op("batch_restart")
def batch_restart(b: CudaBinder) -> Any:
    rules.batch_restart(b)
    return b.make(BATCH_RESTART, pos=b.dev("pos"))
