"""clip_grad_norm on the CPU: the sum of squares in float64 (numpy's pairwise sum over a float64 copy: a fixed
order for a given span), then the norm and the optimizer's divisor (tr.backend.rules.clip)."""

from __future__ import annotations

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.backend.rules import clip as rules


@cpu_op("clip_grad_norm")
def clip_grad_norm(b: Binder) -> Step:
    n, max_norm = rules.clip_grad_norm(b)
    g = b.span("g", np.float32)[:n]
    scale, flag, div, norm = b.flat("scale"), b.flat("flag"), b.flat("divisor"), b.flat("norm")
    wide = b.scratch((n,), np.float64)

    def run() -> None:
        np.copyto(wide, g)
        np.square(wide, out=wide)
        s = float(scale[0])
        nrm, d = rules.divisor(float(np.sum(wide)), s, max_norm)
        norm[0] = nrm
        div[0] = s if flag[0] else d

    return run
