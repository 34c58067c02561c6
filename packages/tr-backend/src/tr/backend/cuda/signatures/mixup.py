"""Native op of csrc/ops/mixup.cu: Mixup / CutMix of the batch with its reverse, in place (x FP32, FP16 or BF16),
from the step's advanced seed; the draw is tr.core.mixup.draw's, bit for bit."""

from __future__ import annotations

from tr.backend.cuda.signatures._types import f64, i64, native_op, tensor

MIXUP = native_op(
    "mixup", "seed <- splitmix64(seed); draw (mix?, CutMix?, lam, box) from it; x mixed with x.flip(0) in place; "
    "lam[0] = the corrected lam (1: not mixed).",
    tensor("x", "[n, h, w, c]: the batch, mixed in place"),
    tensor("seed", "INT32 [2]: one little-endian uint64, advanced by each launch"),
    tensor("lam", "FP32 [1]: the step's lam, for the loss"),
    i64("n", "samples"), i64("h", "rows"), i64("w", "columns"), i64("c", "channels"),
    f64("mixup_alpha", "Mixup's Beta alpha (0: off)"), f64("cutmix_alpha", "CutMix's Beta alpha (0: off)"),
    f64("prob", "the probability a step mixes"), f64("switch_prob", "the probability of CutMix when both are on"))

OPS = (MIXUP,)
