"""A resident data set's order and batches on the device (csrc/ops/resident.cu): the epoch's Fisher-Yates
permutation by deterministic reservations in one block (tr/backend/cpu/ops/resident.py says why it is the
sequential one), and the batch selection, which advances the position on the device. Rules:
tr.backend.rules.resident."""

from __future__ import annotations

from typing import Any

from tr.backend.cuda.binder import CudaBinder
from tr.backend.cuda.ops._register import cuda_op
from tr.backend.rules import resident as rules


@cuda_op("shuffle_order")
def shuffle_order(b: CudaBinder) -> Any:
    n, shuffle = rules.shuffle_order(b)
    return b.native("shuffle_order", ["key", "order", "pos"], ints={"n": n, "shuffle": shuffle})


@cuda_op("batch_select")
def batch_select(b: CudaBinder) -> Any:
    n, rows, _, world, pad = rules.batch_select(b)
    return b.native("batch_select", ["order", "labels_all", "rank", "pos", "index", "labels"],
                    ints={"n": n, "rows": rows, "world": world, "pad": pad})


@cuda_op("batch_restart")
def batch_restart(b: CudaBinder) -> Any:
    rules.batch_restart(b)
    return b.native("batch_restart", ["pos"])
