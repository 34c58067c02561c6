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
from tr.backend.rules import range as rules

_F = np.float32


@cpu_op("lars_update")
def lars_update(b: Binder) -> Step:
    r = rules.lars_update(b)
    n, nesterov, beta, wd, tc, eps, clip = (r.n, r.nesterov, r.momentum, r.weight_decay, r.trust_coefficient, r.eps,
                                            r.trust_clip)
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
