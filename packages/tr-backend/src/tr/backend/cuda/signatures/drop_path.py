"""Native ops of csrc/ops/drop_path.cu: stochastic depth with the counter-based Philox keep decision the CPU backend
draws too, one a sample; x, y (dy, dx) each FP32, FP16 or BF16."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

_SIZES = (i64("n", "samples (x's first dimension)"), i64("per_sample", "elements of one sample"),
          f64("p", "the probability of dropping a sample's branch"))

DROP_PATH_FWD = native_op(
    "drop_path_fwd", "seed <- splitmix64(seed); keep sample s iff Philox uniform(seed, s) >= p: y[s] = x[s] / (1 - p) "
    "where kept, else 0.",
    tensor("x", "[n, per_sample]"), tensor("y", "[n, per_sample]"), tensor("mask", "INT8 [n]: 1 kept, 0 dropped"),
    tensor("seed", "INT32 [2]: one little-endian uint64, advanced by each launch"), *_SIZES)

DROP_PATH_BWD = native_op(
    "drop_path_bwd", "dx[s] = dy[s] / (1 - p) where mask[s], else 0 (dx may be dy).",
    tensor("dy", "[n, per_sample]"), tensor("mask", "INT8 [n], the forward's"), tensor("dx", "[n, per_sample]"),
    *_SIZES)

OPS = (DROP_PATH_FWD, DROP_PATH_BWD)
