"""Native ops of csrc/ops/dropout.cu: dropout with the counter-based Philox mask the CPU backend draws too; x, y
(dy, dx) each FP32, FP16 or BF16."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

_N = i64("n", "elements")
_P = f64("p", "the drop probability")

DROPOUT_FWD = native_op(
    "dropout_fwd", "seed <- splitmix64(seed); keep element i iff Philox uniform(seed, i) >= p: y = x / (1 - p) "
    "where kept, else 0.",
    tensor("x", "[n]"), tensor("y", "[n]"), tensor("mask", "INT8 [n]: 1 kept, 0 dropped"),
    tensor("seed", "INT32 [2]: one little-endian uint64, advanced by each launch"), _N, _P)

DROPOUT_BWD = native_op(
    "dropout_bwd", "dx = dy / (1 - p) where mask, else 0 (dx may be dy).",
    tensor("dy", "[n]"), tensor("mask", "INT8 [n], the forward's"), tensor("dx", "[n]"), _N, _P)

OPS = (DROPOUT_FWD, DROPOUT_BWD)
