"""The rules of the resident family (shuffle_order, batch_select, batch_restart): a data set held on the
device picks its own batches. Every argument is INT32; written once for both backends."""

from __future__ import annotations

from tr.backend.binding import CallBinder
from tr.core.dtype import DType

MAX_SAMPLES = 2**31 - 2**16  # INT32 indices, with room for the kernels' thread strides


def _int32(b: CallBinder, *names: str) -> None:
    for name in names:
        if b.has(name):
            b.expect_dtype(name, DType.INT32)


def shuffle_order(b: CallBinder) -> tuple[int, bool]:
    """(n, shuffle)."""
    _int32(b, "key", "order", "pos")
    b.expect_numel("key", 2)
    b.expect_numel("pos", 1)
    n = _samples(b, b.tensor("order").numel)
    return n, b.bool_attr("shuffle", True)


def _samples(b: CallBinder, n: int) -> int:
    if not 1 <= n <= MAX_SAMPLES:
        b.fail(f"a resident data set has 1 to {MAX_SAMPLES} samples (INT32 indices), got {n}")
    return n


def batch_select(b: CallBinder) -> tuple[int, int, bool, int, bool]:
    """(n samples, B batch rows, whether an order is given, world, pad)."""
    _int32(b, "order", "labels_all", "rank", "pos", "index", "labels")
    b.expect_numel("pos", 1)
    b.expect_numel("rank", 1)
    world = b.int_attr("world", 1, 1)
    pad = b.bool_attr("pad", True)
    n = _samples(b, b.tensor("labels_all").numel)
    if b.has("order"):
        b.expect_numel("order", n)
    rows = b.tensor("index").numel
    b.expect_numel("labels", rows)
    return n, rows, b.has("order"), world, pad


def share(n: int, rank: int, world: int, pad: bool) -> int:
    """The positions of an epoch rank ``rank`` takes (tr.data.sharding.shard_size)."""
    return -(-n // world) if pad else len(range(rank, n, world))


def batch_restart(b: CallBinder) -> None:
    _int32(b, "pos")
    b.expect_numel("pos", 1)
