"""Native ops of csrc/ops/resident.cu: a data set held on the device shuffles its epoch's order and selects its
batches there (every tensor INT32; tr.backend.rules.resident)."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import flag, i64, native_op, tensor

SHUFFLE_ORDER = native_op(
    "shuffle_order", "order = tr.core.philox.shuffle_indices' Fisher-Yates permutation of 0..n-1 for the key (the "
    "identity without shuffle); pos = 0.",
    tensor("key", "INT32 [2]: the epoch's seed, one little-endian uint64"), tensor("order", "INT32 [n]"),
    tensor("pos", "INT32 [1]: the epoch position, reset"), i64("n", "samples"),
    flag("shuffle", "permute (False: the identity order)"))

BATCH_SELECT = native_op(
    "batch_select", "index[i] = order[(rank + world * (pos + i)) % n] (the position itself without order) and "
    "labels[i] = labels_all[index[i]] for the rows left in the rank's share of the epoch; pos += rows.",
    tensor("order", "INT32 [n]; absent: the epoch in sample order", optional=True),
    tensor("labels_all", "INT32 [n]"), tensor("rank", "INT32 [1]: this rank"),
    tensor("pos", "INT32 [1]: the epoch position, advanced"), tensor("index", "INT32 [rows]"),
    tensor("labels", "INT32 [rows]"), i64("n", "samples"), i64("rows", "batch rows"),
    i64("world", "ranks sharing the epoch"),
    flag("pad", "every rank takes ceil(n / world) positions, the order repeating from its start"))

BATCH_RESTART = native_op(
    "batch_restart", "pos = 0.", tensor("pos", "INT32 [1]: the epoch position"))

OPS = (SHUFFLE_ORDER, BATCH_SELECT, BATCH_RESTART)
