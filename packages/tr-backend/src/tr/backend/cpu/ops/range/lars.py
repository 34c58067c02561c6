"""lars_update: layer-wise adaptive rate scaling for one weight tensor (SEED_SYSTEM.md §7).

eta = tc ||w|| / (||g|| + wd ||w|| + eps), with g = grad / grad_scale[0]; eta = 1 when ||w|| < 1e-12,
||g|| < 1e-12 or flag != 0; eta <= trust_clip (default 100). ratio[0] = eta. Unless flag != 0 (then nothing
else happens):
g' = g + wd w;  m <- momentum m + lr eta g';  w <- w - m  (Nesterov: w <- w - (lr eta g' + momentum m)).
Norms run over the tensor's elements (not its slot padding), accumulated by BLAS dot products.
"""

from __future__ import annotations

import math

import numpy as np

from tr.backend.cpu.binder import Binder, Step
from tr.backend.cpu.ops._register import cpu_op
from tr.core.dtype import DType

_F = np.float32


@cpu_op("lars_update")
def lars_update(b: Binder) -> Step:
    for name in ("w", "g", "m"):
        b.expect_dtype(name, DType.FP32)
    n = b.tensor("w").numel
    b.expect_numel("g", n)
    b.expect_numel("m", n)
    nesterov = bool(b.attr("nesterov", False))
    beta = b.float_attr("momentum", 0.9, 0.0, 1.0)
    wd = b.float_attr("weight_decay", 0.0, 0.0)
    tc = b.float_attr("trust_coefficient", 0.001, 0.0)
    eps = b.float_attr("eps", 1e-8, 0.0)
    clip = b.float_attr("trust_clip", 100.0, 0.0)
    w, g, m = b.flat("w"), b.flat("g"), b.flat("m")
    lr, flag, gscale, ratio = b.flat("lr"), b.flat("flag"), b.flat("grad_scale"), b.flat("ratio")
    tmp, tmp2 = b.scratch((n,)), b.scratch((n,))
    fbeta = _F(beta)

    def run() -> None:
        if flag[0]:
            ratio[0] = 1.0
            return
        inv = 1.0 / float(gscale[0])
        wn = math.sqrt(float(np.dot(w, w)))
        gn = math.sqrt(float(np.dot(g, g))) * inv
        eta = 1.0 if wn < 1e-12 or gn < 1e-12 else min(tc * wn / (gn + wd * wn + eps), clip)
        ratio[0] = eta
        step = float(lr[0]) * eta
        np.multiply(g, _F(inv), out=tmp)
        if wd:
            np.multiply(w, _F(wd), out=tmp2)
            np.add(tmp, tmp2, out=tmp)
        np.multiply(tmp, _F(step), out=tmp)  # lr eta g'
        np.multiply(m, fbeta, out=m)
        np.add(m, tmp, out=m)
        if nesterov:
            np.multiply(m, fbeta, out=tmp2)
            np.add(tmp, tmp2, out=tmp)
            np.subtract(w, tmp, out=w)
        else:
            np.subtract(w, m, out=w)

    return run
