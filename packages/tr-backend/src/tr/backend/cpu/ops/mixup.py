"""Mixup / CutMix of the training batch with its reverse, in place (tr.core.mixup has the draw and the math).

The seed (INT32[2], one little-endian uint64) is advanced first, seed <- splitmix64(seed), as dropout's is; the
step's draw then comes from tr.core.mixup.draw (float64, the CUDA kernel's operations one for one) and the batch
is mixed by tr.core.mixup.mix_batch: float32 products and sum, rounded once to x's dtype.
"""

from __future__ import annotations

from tr.backend.cpu.binder import Binder, Step, seq
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import mixup as rules
from tr.core import mixup as mx
from tr.core import philox


@cpu_op("mixup")
def mixup(b: Binder) -> Step:
    (n, h, w, c), cfg = rules.mixup(b)
    x, load_x, store_x = b.modify("x", (n, h, w, c))
    seed = b.view("seed", (2,)).view("<u8")
    lam = b.view("lam", (1,))

    def core() -> None:
        s = philox.splitmix64(int(seed[0]))
        seed[0] = s
        d = mx.draw(s, cfg, h, w)
        mx.mix_batch(x, d)
        lam[0] = d.lam32

    return seq(load_x, core, store_x)

